#!/usr/bin/env python3
"""Builds small evaluation tasks for `infera eval` from a plain text,
deterministically (the same text and seed give the same files):

  NAME-continuation.jsonl  HellaSwag-style: a passage of --context words, and
                           4 endings of --ending words — the one that follows
                           it in the text, and 3 taken from elsewhere (at least
                           1,000 words away); {"ctx", "endings", "label"}
  NAME-continuation.txt    the same tasks in llama.cpp's --hellaswag format
  NAME-lambada.txt         LAMBADA-style: one passage per line, ending in a
                           word of 3 or more letters the model must predict

Usage: make_eval_tasks.py TEXT OUTDIR NAME [--tasks 300] [--seed 1]
"""
import argparse
import json
import os
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("text")
    ap.add_argument("outdir")
    ap.add_argument("name")
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--ending", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    with open(a.text, encoding="utf-8") as f:
        words = f.read().split()
    span = a.context + a.ending
    if len(words) < span * a.tasks // 2 + 2000:
        raise SystemExit(f"{a.text}: {len(words)} words is too short for {a.tasks} tasks")
    rng = random.Random(a.seed)
    os.makedirs(a.outdir, exist_ok=True)

    # Continuation tasks: non-overlapping windows, in order of the text.
    starts = list(range(0, len(words) - span, span))
    rng.shuffle(starts)
    starts = sorted(starts[:a.tasks])
    tasks = []
    for s in starts:
        ctx = " ".join(words[s:s + a.context])
        true = " ".join(words[s + a.context:s + span])
        endings = [true]
        while len(endings) < 4:
            o = rng.randrange(0, len(words) - a.ending)
            if abs(o - (s + a.context)) < 1000:
                continue
            e = " ".join(words[o:o + a.ending])
            if e not in endings:
                endings.append(e)
        order = list(range(4))
        rng.shuffle(order)
        shuffled = [endings[i] for i in order]
        tasks.append({"ctx": ctx, "endings": shuffled, "label": order.index(0)})
    with open(os.path.join(a.outdir, f"{a.name}-continuation.jsonl"), "w", encoding="utf-8") as f:
        for t in tasks:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
    with open(os.path.join(a.outdir, f"{a.name}-continuation.txt"), "w", encoding="utf-8") as f:
        for t in tasks:
            f.write("\n".join([t["ctx"], str(t["label"])] + t["endings"]) + "\n")

    # LAMBADA-style passages: the window's last word is a word of letters.
    lam, at = [], 0
    while len(lam) < a.tasks and at + span < len(words):
        end = at + span - 1
        while end < len(words) - 1 and not (words[end].isalpha() and len(words[end]) >= 3):
            end += 1
        lam.append(" ".join(words[at:end + 1]))
        at = end + 1 + rng.randrange(0, span)
    with open(os.path.join(a.outdir, f"{a.name}-lambada.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lam) + "\n")
    print(f"wrote {len(tasks)} continuation tasks and {len(lam)} LAMBADA passages to {a.outdir}")


if __name__ == "__main__":
    main()
