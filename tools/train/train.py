"""Trains infera's bundled demo model (Stage 2). Tooling only: needs Debian's
python3-torch and python3-sentencepiece (tools/train/install-train-deps.sh).

  /usr/bin/python3 tools/train/train.py --out /tmp/demo-train --minutes 60
  /usr/bin/python3 tools/train/train.py --out /tmp/demo-train --export models/kjv-8m

Writes checkpoints to --out and resumes from the last one; keeps the
checkpoint with the best held-out loss; logs to --out/train.log.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus  # noqa: E402
from model import Config, Llama  # noqa: E402

SEED = 1234


def log(out, msg):
    print(msg, flush=True)
    with open(os.path.join(out, "train.log"), "a") as f:
        f.write(msg + "\n")


def prepare(out, vocab_size, tokenizer=None):
    """Corpus split + SentencePiece BPE tokenizer (or a copy of `tokenizer`,
    for a draft model that must share a target's vocabulary) + token arrays
    (cached)."""
    import shutil
    import sentencepiece as spm
    if os.path.exists(os.path.join(out, "train.npy")):
        return
    chapters = corpus.kjv_chapters()
    train_docs, held_docs = corpus.split(chapters)
    with open(os.path.join(out, "train.txt"), "w") as f:
        f.write("\n\n".join(train_docs))
    with open(os.path.join(out, "heldout.txt"), "w") as f:
        f.write("\n\n".join(held_docs))
    if tokenizer:
        shutil.copy(tokenizer, os.path.join(out, "tokenizer.model"))
    else:
        spm.SentencePieceTrainer.train(
            input=os.path.join(out, "train.txt"), model_prefix=os.path.join(out, "tokenizer"), vocab_size=vocab_size,
            model_type="bpe", byte_fallback=True, character_coverage=1.0, split_digits=True, add_dummy_prefix=True,
            user_defined_symbols=["<|im_start|>", "<|im_end|>"], max_sentence_length=1 << 16, num_threads=2,
            input_sentence_size=2_000_000, shuffle_input_sentence=True, seed_sentencepiece_size=200_000,
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "tokenizer.model"))
    if sp.get_piece_size() != vocab_size:
        sys.exit(f"train.py: error: the tokenizer has {sp.get_piece_size()} pieces, not --vocab {vocab_size}")
    for name, docs in (("train", train_docs), ("heldout", held_docs)):
        ids = []
        for d in docs:  # each chapter: BOS + text + EOS
            ids += [sp.bos_id()] + sp.encode(d) + [sp.eos_id()]
        np.save(os.path.join(out, name + ".npy"), np.array(ids, dtype=np.int16))


def batches(data, seq_len, batch, rng):
    starts = rng.integers(0, len(data) - seq_len - 1, size=batch)
    x = np.stack([data[s:s + seq_len] for s in starts]).astype(np.int64)
    y = np.stack([data[s + 1:s + seq_len + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


@torch.no_grad()
def heldout_loss(model, data, seq_len):
    """Mean next-token loss over non-overlapping windows of the held-out split."""
    model.eval()
    total, n = 0.0, 0
    for s in range(0, len(data) - seq_len - 1, seq_len):
        x = torch.from_numpy(data[s:s + seq_len].astype(np.int64))[None]
        y = torch.from_numpy(data[s + 1:s + seq_len + 1].astype(np.int64))[None]
        total += F.cross_entropy(model(x).view(-1, model.cfg.vocab_size), y.view(-1), reduction="sum").item()
        n += seq_len
    model.train()
    return total / n


def lr_at(step, total, peak, warmup=100):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def train(args):
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(args.threads)
    torch.manual_seed(SEED)
    prepare(args.out, args.vocab, args.tokenizer)
    data = np.load(os.path.join(args.out, "train.npy")).astype(np.int32)
    held = np.load(os.path.join(args.out, "heldout.npy")).astype(np.int32)
    cfg = Config(vocab_size=args.vocab, dim=args.dim, n_layers=args.layers, n_heads=args.heads,
                 n_kv_heads=args.kv_heads, ffn_dim=args.ffn)
    model = Llama(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    state = {"step": 0, "best": float("inf"), "seconds": 0.0}
    last = os.path.join(args.out, "last.pt")
    if os.path.exists(last):
        ck = torch.load(last)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
        log(args.out, f"resumed at step {state['step']} ({state['seconds'] / 60:.1f} min trained, best held-out {state['best']:.4f})")
    else:
        log(args.out, f"model: {model.num_params() / 1e6:.2f} M parameters; {len(data)} train tokens, {len(held)} held-out tokens")
    rng = np.random.default_rng(SEED + state["step"])
    budget = args.minutes * 60
    t_start = time.time() - state["seconds"]
    total_steps = args.steps
    while state["step"] < total_steps and time.time() - t_start < budget:
        step = state["step"]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total_steps, args.lr)
        x, y = batches(data, args.seq, args.batch, rng)
        loss = F.cross_entropy(model(x).view(-1, cfg.vocab_size), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["step"] += 1
        state["seconds"] = time.time() - t_start
        done = state["step"] / total_steps
        bar = "#" * int(30 * done) + "-" * (30 - int(30 * done))
        print(f"\r[{bar}] step {state['step']}/{total_steps} loss {loss.item():.4f} "
              f"{state['seconds'] / 60:.1f} min", end="", flush=True)
        if state["step"] % args.eval_every == 0 or state["step"] == total_steps:
            hl = heldout_loss(model, held, args.seq)
            print()
            log(args.out, f"step {state['step']} train loss {loss.item():.4f} held-out loss {hl:.4f} "
                          f"(ppl {math.exp(hl):.2f}) {state['seconds'] / 60:.1f} min")
            if hl < state["best"]:
                state["best"] = hl
                torch.save({"model": model.state_dict(), "cfg": cfg.__dict__, "state": dict(state), "train_loss": loss.item()},
                           os.path.join(args.out, "best.pt"))
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state}, last)
    log(args.out, f"stopped at step {state['step']} after {state['seconds'] / 60:.1f} min; best held-out loss {state['best']:.4f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="work folder: corpus, tokenizer, checkpoints, log")
    ap.add_argument("--minutes", type=float, default=90, help="wall-clock budget of this run")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    # The shape (defaults: the bundled kjv-7m). A draft model for speculative
    # decoding: a smaller shape and --tokenizer the target's tokenizer.model.
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--tokenizer", help="use this SentencePiece model instead of training one (same vocabulary)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--export", help="write the best checkpoint to this models/<name> folder and stop")
    args = ap.parse_args()
    if args.export:
        import export
        export.export(args.out, args.export)
        export.evaluate(args.out, args.export)
    else:
        train(args)


if __name__ == "__main__":
    main()
