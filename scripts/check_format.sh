#!/usr/bin/env bash
# Checks that the C++ lines changed since BASE follow .clang-format (Google
# style, 120 columns). Only the changed lines are looked at: the tree is
# hand-formatted and whole-file reformatting is not wanted. Prints the
# diff clang-format would apply and exits 1 if there is one.
#
#   scripts/check_format.sh [BASE=HEAD~1]    (run before committing: BASE=HEAD)
# scripts/check_format.sh --fix [BASE] applies the changes to the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
FIX=0
if [ "${1:-}" = --fix ]; then FIX=1; shift; fi
BASE="${1:-HEAD~1}"
ARGS=(--extensions cc,h "$BASE" -- src tools tests bench include python)
if [ "$FIX" = 1 ]; then
  git clang-format --force "${ARGS[@]}"  # (also files with unstaged changes)
  exit 0
fi
out="$(git clang-format --diff "${ARGS[@]}")"
case "$out" in
  "" | "no modified files to format" | "clang-format did not modify any files") echo "format: ok (since $BASE)" ;;
  *) printf '%s\n' "$out"; echo "format: the lines above differ from .clang-format (since $BASE)" >&2; exit 1 ;;
esac
