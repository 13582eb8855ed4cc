"""Writes models/<name>/README.md from the training record and measurements
made with the infera binary itself (held-out perplexity, samples).

  /usr/bin/python3 tools/train/model_card.py models/kjv-7m build/tools/infera
"""
import json
import os
import subprocess
import sys


def run(infera, *args):
    r = subprocess.run([infera, *args], capture_output=True, text=True, check=True)
    return r.stdout


def main(dest, infera):
    name = os.path.basename(os.path.normpath(dest))
    gguf = os.path.join(dest, name + ".gguf")
    with open(os.path.join(dest, "training.json")) as f:
        tr = json.load(f)
    with open(os.path.join(dest, "tool_eval.json")) as f:
        tool = json.load(f)
    ppl = json.loads(run(infera, "perplexity", "-m", gguf, "-f", os.path.join(dest, "heldout.txt"), "--ctx", "128", "--json"))
    ppl512 = json.loads(run(infera, "perplexity", "-m", gguf, "-f", os.path.join(dest, "heldout.txt"), "--ctx", "512", "--json"))
    info = run(infera, "info", gguf)
    params = [l for l in info.splitlines() if l.startswith("parameters:")][0].split(":", 1)[1].strip()
    samples = []
    for prompt, args in (("In the beginning", ["--temp", "0"]), ("And it came to pass", ["--temp", "0"]),
                         ("The LORD is my shepherd", ["--temp", "0.8", "--seed", "42"]),
                         ("And Jesus said unto them", ["--temp", "0.8", "--seed", "7"])):
        out = run(infera, "run", "-m", gguf, "-p", prompt, "-n", "60", *args).strip()
        samples.append((prompt, " ".join(args), out))
    corpus_version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "bible-kjv-text"], capture_output=True,
                                    text=True).stdout or "unknown"
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(dest) for f in fs)
    lines = [
        f"# {name} — infera's bundled demo model",
        "",
        "A small Llama-architecture language model trained by this project (`tools/train/`) so that infera has a real,",
        "readable default model on a machine without network. It writes King-James-style English; it is not",
        "instruction-tuned (the chatml template only frames turns).",
        "",
        "| | |",
        "|---|---|",
        f"| architecture | llama: RMSNorm, RoPE (θ 10000), SwiGLU, GQA, untied output |",
        f"| parameters | {params} |",
        f"| shape | 256 embd, 6 layers, 8 heads / 4 KV heads (head dim 32), FFN 768, context 1024 |",
        "| tokenizer | SentencePiece BPE, 4096 tokens, byte fallback, `<|im_start|>`/`<|im_end|>` as user-defined |",
        f"| corpus | King James Bible, Debian package `bible-kjv-text` {corpus_version} (text in the public domain; "
        "dumped with the `bible` program of package `bible-kjv`), one document per chapter |",
        "| split | every 20th chapter (59 of 1189, ~5 %) held out, never trained on (`heldout.txt`) |",
        f"| training | {tr['steps']} steps of 16 × 256 tokens, AdamW (lr 2e-3, cosine, wd 0.1), seed 1234, "
        f"{tr['minutes']} min on 2 CPU cores (PyTorch {torch_version()}) |",
        f"| final train loss | {tr['train_loss_at_best']:.4f} (at the best checkpoint) |",
        f"| best held-out loss | {tr['best_heldout_loss']:.4f} (256-token windows; ppl {2.718281828 ** tr['best_heldout_loss']:.2f}) |",
        f"| held-out perplexity, infera | **{ppl['ppl']:.4f} ± {ppl['ppl_stderr']:.4f}** (`--ctx 128`, {ppl['chunks']} chunks); "
        f"{ppl512['ppl']:.4f} ± {ppl512['ppl_stderr']:.4f} at `--ctx 512` |",
        f"| held-out perplexity, training tool | {tool['heldout_ppl']:.4f} (same method and windows, F16-rounded weights) |",
        f"| files | `{name}.gguf` (F16 weights, F32 norms; llama.cpp keys), `hf/` (LlamaForCausalLM, F16 safetensors, "
        f"tokenizer.model), {size / 2**20:.1f} MiB in all |",
        "",
        "Measured with:",
        "```",
        f"infera perplexity -m models/{name}/{name}.gguf -f models/{name}/heldout.txt --ctx 128",
        "```",
        "",
        "## Samples (infera, this file)",
        "",
    ]
    for prompt, args, out in samples:
        lines += [f"`infera run -p \"{prompt}\" -n 60 {args}`", "", "> " + out.replace("\n", "\n> "), ""]
    lines += ["## Limitations", "",
              "The tokenizer was trained with SentencePiece's default `nmt_nfkc` normalization, which turns newlines into",
              "spaces, so the model saw each chapter as one line of text and never a newline token. infera (like llama.cpp)",
              "does not apply that normalization: text with newlines is tokenized with `<0x0A>` byte tokens the model has not",
              "learned. `heldout.txt` is therefore stored as the model saw it (single spaces). A retrain with identity",
              "normalization (as Llama's tokenizer uses) would fix this; it also needs a longer run than this one (550 of",
              "the planned 700 steps fit in the time budget).", ""]
    lines += ["## Reproduce", "", "```",
              "bash tools/train/install-train-deps.sh",
              "/usr/bin/python3 tools/train/train.py --out /tmp/kjv --minutes 65 --steps 700 --eval-every 50",
              f"/usr/bin/python3 tools/train/train.py --out /tmp/kjv --export models/{name}",
              f"/usr/bin/python3 tools/train/model_card.py models/{name} build/tools/infera", "```",
              "The run resumes from its last checkpoint if interrupted; `train.log` here is the log of the run that made this model."]
    with open(os.path.join(dest, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", os.path.join(dest, "README.md"))


def torch_version():
    try:
        import torch
        return torch.__version__
    except ImportError:
        return "?"


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
