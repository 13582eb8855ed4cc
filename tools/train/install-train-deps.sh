#!/usr/bin/env bash
# Dependencies of the demo-model training tool only (never needed to build,
# run or test infera): Debian's PyTorch and SentencePiece, OpenBLAS (Debian's
# torch otherwise runs on the reference BLAS, tens of times slower) and the
# public-domain corpus packages.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends python3-torch python3-sentencepiece python3-numpy \
  libopenblas0-pthread bible-kjv-text bible-kjv >/dev/null
