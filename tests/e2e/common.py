"""Shared helpers for the end-to-end tests (run with Debian's /usr/bin/python3)."""
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
INFERA = os.path.abspath(os.environ.get("INFERA_BIN", os.path.join(REPO, "build", "tools", "infera")))
SHARED = os.environ.get("INFERA_SHARED_DIR", os.path.join(REPO, "..", "shared"))


def infera(*args, input=None, timeout=300):
    return subprocess.run([INFERA, *args], capture_output=True, timeout=timeout, input=input)


def shared(*parts):
    return os.path.join(SHARED, *parts)
