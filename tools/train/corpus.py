"""Builds the training corpus from Debian's public-domain text packages.

The King James Bible (package bible-kjv-text, read through the `bible`
program of package bible-kjv): one document per chapter, one verse per line,
verse numbers removed. Every 20th chapter (5 %) is held out and never
trained on.
"""
import re
import subprocess

HELD_OUT_EVERY = 20


def kjv_chapters():
    """Returns [(title, text)] for the 1189 chapters of the KJV."""
    out = subprocess.run(["bible", "gen1:1-rev22:21"], capture_output=True, text=True, check=True).stdout
    chapters, title, verses, cur = [], None, [], None
    for line in out.split("\n"):
        m = re.match(r"^(\S.*\S) (\d+)$", line)
        if m and not line.startswith(" "):
            if title is not None:
                if cur:
                    verses.append(cur)
                chapters.append((title, "\n".join(verses)))
            title, verses, cur = line, [], None
            continue
        v = re.match(r"^\s+(\d+) (.*)$", line)
        if v:
            if cur:
                verses.append(cur)
            cur = v.group(2).strip()
        elif line.strip() and cur is not None:
            cur += " " + line.strip()  # wrapped verse line
    if cur:
        verses.append(cur)
    if title is not None:
        chapters.append((title, "\n".join(verses)))
    return chapters


def split(chapters):
    """(train_docs, heldout_docs): every HELD_OUT_EVERY-th chapter is held out."""
    train, held = [], []
    for i, (_, text) in enumerate(chapters):
        (held if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else train).append(text)
    return train, held


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="Counts the corpus, or writes its training part (e.g. for distill.py).")
    ap.add_argument("--write-train", metavar="FILE",
                    help="write the training chapters as the model saw them (SentencePiece's nmt_nfkc turned "
                         "newlines into spaces: one line, single spaces, like models/kjv-7m/heldout.txt)")
    a = ap.parse_args()
    ch = kjv_chapters()
    tr, he = split(ch)
    if a.write_train:
        with open(a.write_train, "w") as f:
            f.write(" ".join(" ".join(tr).split()))
    print(len(ch), "chapters;", len(tr), "train,", len(he), "held out;",
          sum(len(t.split()) for t in tr), "train words")
