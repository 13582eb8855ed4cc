"""Recovers a pruned model's quality by distillation (tooling, Debian's
python3-torch): the pruned student is fine-tuned to match the dense
teacher's next-token distributions (KL divergence at a temperature) plus the
usual language-model loss on the training text. Zeros of unstructured / N:M
pruning stay zero (masks fixed); a structurally pruned student keeps its
smaller shapes. Resumable: a checkpoint in --work every --save-every steps
(rerun the same command to continue). Writes the student back as GGUF with
its own metadata and tensor types.

The same trains a draft model for speculative decoding: a smaller model of
the same vocabulary (tools/train/train.py --tokenizer TARGET's tokenizer.model
and a smaller shape) distilled from the target agrees with its greedy choice
more often than one trained on the text alone (models/kjv-draft-1m).

Early stopping: with --val (held-out text, never the text a later
evaluation reads) the mean per-token KL(teacher || student) on it is measured
before training and every --val-every steps; the student with the lowest one
is what gets written (the untouched student if training never beat it), and
training stops after --patience measurements without a new best. Without it
a small training text is over-fitted: the student learns the text instead of
the teacher (kjv-7m on 121 KB, docs/pruning.md).

  /usr/bin/python3 tools/train/distill.py --teacher dense.gguf --student pruned.gguf \\
      --text train.txt --out recovered.gguf [--steps 300] [--val val.txt] [--eval heldout.txt]
"""
import argparse
import hashlib
import math
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gguf_model import GgufError, GgufLlama, read_gguf, write_patched  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))


def fail(msg):
    print(f"distill: error: {msg}", file=sys.stderr)
    sys.exit(2)


def tokenize(infera, model, path):
    r = subprocess.run([infera, "tokenize", "-m", model, "--file", path], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"tokenizing {path}: {r.stderr.strip()}")
    return np.array([int(t) for t in r.stdout.split()], dtype=np.int64)


def bos_id(model):
    meta, _ = read_gguf(model)
    return meta.get("tokenizer.ggml.bos_token_id", 1)


def windows(tokens, seq, batch, rng, bos):
    """[batch, seq] token windows, BOS first, from random offsets."""
    starts = rng.integers(0, len(tokens) - seq, size=batch)
    out = np.empty((batch, seq), dtype=np.int64)
    out[:, 0] = bos
    for i, s in enumerate(starts):
        out[i, 1:] = tokens[s:s + seq - 1]
    return torch.from_numpy(out)


def windows_of(tokens, seq, bos, max_windows):
    """[n, seq]: consecutive BOS-first windows of a text (n <= max_windows),
    the same ones every time they are asked for."""
    body = seq - 1
    n = min(max_windows, (len(tokens) - 1) // body)
    return torch.from_numpy(np.stack([np.concatenate([[bos], tokens[i * body:(i + 1) * body]]) for i in range(n)]))


@torch.no_grad()
def heldout_ppl(model, tokens, seq, bos, max_chunks=40):
    """llama-perplexity's measure: chunks BOS-first, the second half scored."""
    nll, n = 0.0, 0
    first = seq // 2
    for x in windows_of(tokens, seq, bos, max_chunks):
        logp = F.log_softmax(model(x[None, :])[0].float(), dim=-1)
        tgt = x[first + 1:]
        nll -= logp[first:seq - 1].gather(1, tgt[:, None]).sum().item()
        n += len(tgt)
    return math.exp(nll / n)


@torch.no_grad()
def heldout_kl(teacher, student, windows, batch):
    """Mean per-token KL(teacher || student) at temperature 1 over windows."""
    total = 0.0
    for i in range(0, len(windows), batch):
        x = windows[i:i + batch]
        t = F.log_softmax(teacher(x).float(), -1)
        s = F.log_softmax(student(x).float(), -1)
        total += (t.exp() * (t - s)).sum().item()
    return total / windows.numel()


def file_hash(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", required=True, help="the dense model (GGUF)")
    ap.add_argument("--student", required=True, help="the pruned model (GGUF, F32/F16/BF16 weights)")
    ap.add_argument("--text", required=True, help="training text")
    ap.add_argument("--out", required=True, help="output GGUF")
    ap.add_argument("--work", help="checkpoint folder (default: OUT.work)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-4)
    # 1: the KL term alone. kjv-7m, structured 25 %, on its training corpus:
    # validation KL 0.069 -> 0.029 in 50 steps with 1, but rising to 0.074
    # with 0.5 (the LM loss's noisy one-hot gradient outweighs the small KL
    # one once the student is close to the teacher) (docs/pruning.md).
    ap.add_argument("--alpha", type=float, default=1.0, help="weight of the KL term; 1 - alpha on the LM loss")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--eval", help="held-out text: perplexity before and after")
    ap.add_argument("--val", help="held-out text for early stopping: the student with the lowest KL to the "
                    "teacher on it is written")
    ap.add_argument("--val-every", type=int, default=25, help="steps between validation measurements")
    ap.add_argument("--val-tokens", type=int, default=8192, help="validation tokens per measurement")
    ap.add_argument("--patience", type=int, default=4,
                    help="stop after this many validation measurements without a new best (0: never)")
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--infera", default=os.path.join(REPO, "build", "tools", "infera"))
    a = ap.parse_args()
    if a.steps < 1 or a.batch < 1 or a.seq < 8 or not 0 <= a.alpha <= 1 or a.temperature <= 0:
        fail("--steps, --batch >= 1, --seq >= 8, --alpha in [0, 1], --temperature > 0")
    if a.val_every < 1 or a.val_tokens < 8 or a.patience < 0:
        fail("--val-every >= 1, --val-tokens >= 8, --patience >= 0")
    for p in (a.teacher, a.student, a.text) + ((a.val,) if a.val else ()):
        if not os.path.isfile(p):
            fail(f"{p}: no such file")
    if os.path.abspath(a.out) in {os.path.abspath(p) for p in (a.teacher, a.student, a.text, a.val) if p}:
        fail(f"{a.out}: the output would overwrite an input")
    if a.threads:
        torch.set_num_threads(a.threads)
    try:
        teacher, student = GgufLlama(a.teacher), GgufLlama(a.student)
    except GgufError as e:
        fail(str(e))
    # Only the vocabularies must agree (the KL is over the logits): a draft
    # model for speculative decoding is a narrower student of the same vocabulary.
    if teacher.p("token_embd.weight").shape[0] != student.p("token_embd.weight").shape[0]:
        fail("teacher and student have different vocabularies")
    teacher.requires_grad_(False)
    tokens = tokenize(a.infera, a.student, a.text)
    if len(tokens) < a.seq * 4:
        fail(f"{a.text} has {len(tokens)} tokens; --seq {a.seq} needs at least {a.seq * 4}")
    bos = bos_id(a.student)
    # Masks: the zeros of pruned matrices stay zero.
    masks = {}
    for name, w in student.layer_matrices():
        zeros = (w == 0).float().mean().item()
        if zeros > 0.01:
            masks[name] = (w != 0).float()
    opt = torch.optim.AdamW(student.parameters(), lr=a.lr, weight_decay=0.0, betas=(0.9, 0.95))
    work = a.work or a.out + ".work"
    os.makedirs(work, exist_ok=True)
    ckpt = os.path.join(work, "distill.pt")
    best_path = os.path.join(work, "best.pt")
    key = {"student": file_hash(a.student), "teacher": file_hash(a.teacher), "text": file_hash(a.text),
           "seed": a.seed, "batch": a.batch, "seq": a.seq,
           "val": [file_hash(a.val), a.val_every, a.val_tokens] if a.val else None}
    val = None
    if a.val:
        vt = tokenize(a.infera, a.student, a.val)
        if len(vt) < a.seq:
            fail(f"{a.val} has {len(vt)} tokens; --seq {a.seq} needs at least {a.seq}")
        val = windows_of(vt, a.seq, bos, max(1, a.val_tokens // a.seq))
    # Early-stopping state: the best validation KL so far, its step, and how
    # many measurements since; the best student itself is in best.pt.
    step, rng = 0, np.random.default_rng(a.seed)
    best_kl, best_step, stale = math.inf, 0, 0
    if os.path.exists(ckpt):
        ck = torch.load(ckpt)
        if ck["key"] != key:
            fail(f"{ckpt} belongs to another run (other inputs or settings); remove it or pick another --work")
        student.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, rng.bit_generator.state = ck["step"], ck["rng"]
        best_kl, best_step, stale = ck.get("best", (math.inf, 0, 0))
        print(f"distill: resuming at step {step}", file=sys.stderr)

    def validate():
        """Measures the validation KL; keeps the student if it is the best so far.
        Returns True when training should stop (patience used up)."""
        nonlocal best_kl, best_step, stale
        kl_val = heldout_kl(teacher, student, val, a.batch)
        if kl_val < best_kl:
            best_kl, best_step, stale = kl_val, step, 0
            tmp = best_path + ".tmp"
            torch.save({"key": key, "step": step, "kl": kl_val, "model": student.state_dict()}, tmp)
            os.replace(tmp, best_path)
            mark = " (best)"
        else:
            stale += 1
            mark = f" (best {best_kl:.4f} at step {best_step})"
        print(f"\ndistill: step {step}: validation KL {kl_val:.4f}{mark}", file=sys.stderr, flush=True)
        return a.patience > 0 and stale >= a.patience
    held = tokenize(a.infera, a.student, a.eval) if a.eval else None
    ppl0 = None
    if held is not None and step == 0:
        ppl0 = heldout_ppl(student, held, a.seq, bos)
        print(f"distill: held-out perplexity teacher {heldout_ppl(teacher, held, a.seq, bos):.4f}, "
              f"student before {ppl0:.4f}", file=sys.stderr)
    t0, T = time.time(), a.temperature
    start = step
    stopped = False
    if val is not None and step == 0:
        validate()
    elif val is not None and stale >= a.patience > 0:
        stopped = True
    while step < a.steps and not stopped:
        lr = a.lr * min(1.0, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / a.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        x = windows(tokens, a.seq + 1, a.batch, rng, bos)
        inp, tgt = x[:, :-1], x[:, 1:]
        with torch.no_grad():
            t_logits = teacher(inp)
        s_logits = student(inp)
        kl = F.kl_div(F.log_softmax(s_logits / T, -1), F.log_softmax(t_logits / T, -1), log_target=True,
                      reduction="batchmean") * T * T / a.seq
        ce = F.cross_entropy(s_logits.reshape(-1, s_logits.shape[-1]), tgt.reshape(-1))
        loss = a.alpha * kl + (1 - a.alpha) * ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for name, m in masks.items():
                student.p(name).mul_(m)
        step += 1
        el = time.time() - t0
        eta = el / (step - start) * (a.steps - step)
        done = step * 30 // a.steps
        print(f"\r[{'#' * done}{'-' * (30 - done)}] {step}/{a.steps} loss {loss.item():.4f} (kl {kl.item():.4f}, "
              f"lm {ce.item():.4f}) {el:.0f} s, eta {eta:.0f} s", end="", file=sys.stderr, flush=True)
        if val is not None and (step % a.val_every == 0 or step == a.steps):
            stopped = validate()
            if stopped:
                print(f"distill: stopping early at step {step}: {a.patience} validation measurements without a "
                      "new best", file=sys.stderr)
        if step % a.save_every == 0 or step == a.steps or stopped:
            tmp = ckpt + ".tmp"
            torch.save({"key": key, "model": student.state_dict(), "opt": opt.state_dict(), "step": step,
                        "rng": rng.bit_generator.state, "best": (best_kl, best_step, stale)}, tmp)
            os.replace(tmp, ckpt)
    print(file=sys.stderr)
    if val is not None:
        student.load_state_dict(torch.load(best_path)["model"])
        print(f"distill: writing the step-{best_step} student (validation KL {best_kl:.4f})"
              + (", the student as given: training never improved on it" if best_step == 0 else ""),
              file=sys.stderr)
    for name, m in masks.items():
        assert bool((student.p(name)[m == 0] == 0).all()), name
    write_patched(a.student, a.out, {n: student.p(n).detach().numpy() for n in student.names})
    msg = f"distill: wrote {a.out}"
    if held is not None:
        after = heldout_ppl(student, held, a.seq, bos)
        msg += f"; held-out perplexity {'before %.4f, ' % ppl0 if ppl0 else ''}after {after:.4f}"
    print(msg, file=sys.stderr)


if __name__ == "__main__":
    main()
