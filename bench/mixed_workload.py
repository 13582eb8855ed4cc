"""Writes a mixed-length generate workload (JSONL on stdout): 48 requests,
prompts of 10-400 words of the demo model's held-out text, 16-512 generated
tokens each (greedy, EOS ignored). Run with Debian's /usr/bin/python3:
  /usr/bin/python3 bench/mixed_workload.py > /tmp/mixed.jsonl
  infera generate -m MODEL --input /tmp/mixed.jsonl --output /tmp/mixed.out --no-prefix-cache --max-num-seqs 48
"""
import json
import os
import random

random.seed(1)
here = os.path.dirname(os.path.abspath(__file__))
words = open(os.path.join(here, "..", "models", "kjv-7m", "heldout.txt")).read().split()
for i in range(48):
    w = random.randint(10, 400)
    o = random.randint(16, 512)
    print(json.dumps({"prompt": " ".join(words[i * 300:i * 300 + w]), "max_tokens": o, "temperature": 0,
                      "ignore_eos": True}))
