#!/usr/bin/env bash
# The wheels a GPU box that already has torch needs to run ot_gradio, for CPython 3.12 on
# manylinux x86_64: every package pinned in requirements.txt and what they depend on, torch and
# its CUDA packages left out (the box keeps its own). Downloaded into .whl/ (ignored by git) on a
# machine with internet, copied with the checkout, installed there without an index:
#
#   bash scripts/gpu_wheels.sh           # download into .whl/ and print the install line
#   bash scripts/gpu_wheels.sh --list    # only resolve: print the wheels it would download
#
# REQUIREMENTS=file takes another requirements file. Pure-Python packages published as source only
# are built into wheels here (pip wheel). torch's own small dependencies (sympy, filelock, ...)
# are in the set too: installed under --target they come after nothing the box needs.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=${PIP:-python3 -m pip}
DEST=${WHEEL_DIR:-.whl}
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64
        --platform manylinux_2_34_x86_64 --platform linux_x86_64 --platform any)
# torch, triton and the CUDA libraries come with the box's torch
SKIP='^(torch|triton|nvidia-.*|cuda-.*)$'

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
grep -vE '^\s*(#|$)' "${REQUIREMENTS:-requirements.txt}" > "$work/req.txt"

# Resolve the whole set for the target (pip reads the packages' metadata, not the torch wheels).
$PIP install --quiet --dry-run --ignore-installed --report "$work/report.json" --target "$work/none" \
  "${TARGET[@]}" -r "$work/req.txt" 2> "$work/err.txt" || { cat "$work/err.txt" >&2; exit 1; }
python3 - "$work/report.json" "$SKIP" > "$work/pins.txt" <<'EOF'
import json, re, sys
report, skip = json.load(open(sys.argv[1])), re.compile(sys.argv[2])
for item in report["install"]:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    if not skip.match(name.lower()):
        print(f"{name}=={version}")
EOF

if [ "${1:-}" = "--list" ]; then
  cat "$work/pins.txt"
  echo "$(wc -l < "$work/pins.txt") wheels (torch and its CUDA packages left out)" >&2
  exit 0
fi

mkdir -p "$DEST"
while read -r pin; do
  if ! $PIP download --quiet --no-deps "${TARGET[@]}" -d "$DEST" "$pin" 2>/dev/null; then
    $PIP wheel --quiet --no-deps -w "$DEST" "$pin"  # source only: a pure-Python wheel built here
  fi
done < "$work/pins.txt"
echo "downloaded $(ls "$DEST"/*.whl | wc -l) wheels into $DEST; on the GPU box, from the repository root:"
echo "  python3 -m pip install --no-index --no-deps --target $DEST/site $DEST/*.whl && export PYTHONPATH=\$PWD/$DEST/site"
