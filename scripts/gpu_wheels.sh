#!/usr/bin/env bash
# The wheels a GPU box that already has torch needs to run ot_gradio, for CPython 3.12 on
# manylinux x86_64: every package pinned in requirements.txt and what they depend on, torch and
# its CUDA packages left out (the box keeps its own). Downloaded into .whl/ (ignored by git) on a
# machine with internet, copied with the checkout, installed there without an index:
#
#   bash scripts/gpu_wheels.sh           # download into .whl/ and print the install line
#   bash scripts/gpu_wheels.sh --list    # only resolve: print the wheels it would download
#
# For this project's device machines (a call carries at most 64 MiB, the repository included),
# ONLY='regex' keeps the wheels whose names (lower case, '-' for '_') match (the box has the others) and BNB_CUDA=cuda130
# keeps bitsandbytes' library for that CUDA alone (43 MB -> 4 MB): docs/GPU_CHECK.md.
#
# REQUIREMENTS=file takes another requirements file. Pure-Python packages published as source only
# are built into wheels here (pip wheel). torch's own small dependencies (sympy, filelock, ...)
# are in the set too: installed under --target they come after nothing the box needs.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=${PIP:-python3 -m pip}
DEST=${WHEEL_DIR:-.whl}
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_28_x86_64
        --platform manylinux_2_34_x86_64 --platform linux_x86_64 --platform any)
# torch, triton and the CUDA libraries come with the box's torch
SKIP='^(torch|triton|nvidia-.*|cuda-.*)$'

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
grep -vE '^\s*(#|$)' "${REQUIREMENTS:-requirements.txt}" > "$work/req.txt"

# A pinned package published as source only (dadaptation) cannot be resolved for another platform
# (pip then takes wheels alone): it is built into a pure-Python wheel here first, and found there.
mkdir -p "$DEST"
# Resolve the whole set for the target (pip reads the packages' metadata, not the torch wheels).
for _ in 1 2 3 4 5 6; do
  if $PIP install --quiet --dry-run --ignore-installed --report "$work/report.json" --target "$work/none" \
       "${TARGET[@]}" --find-links "$DEST" -r "$work/req.txt" 2> "$work/err.txt"; then
    break
  fi
  missing=$(grep -oE 'No matching distribution found for [^ ]+' "$work/err.txt" | awk '{print $NF}' | head -1)
  { [ -n "$missing" ] && $PIP wheel --quiet --no-deps -w "$DEST" "$missing"; } || { cat "$work/err.txt" >&2; exit 1; }
done
[ -s "$work/report.json" ] || { cat "$work/err.txt" >&2; exit 1; }
python3 - "$work/report.json" "$SKIP" "${ONLY:-.*}" > "$work/pins.txt" <<'EOF'
import json, re, sys
report, skip, only = json.load(open(sys.argv[1])), re.compile(sys.argv[2]), sys.argv[3]
for item in report["install"]:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    if not skip.match(name.lower()) and re.fullmatch(only, re.sub(r"[-_.]+", "-", name.lower())):
        print(f"{name}=={version}")
EOF

if [ "${1:-}" = "--list" ]; then
  cat "$work/pins.txt"
  echo "$(wc -l < "$work/pins.txt") wheels (torch and its CUDA packages left out)" >&2
  exit 0
fi

mkdir -p "$DEST"
while read -r pin; do
  if ! $PIP download --quiet --no-deps "${TARGET[@]}" --find-links "$DEST" -d "$DEST" "$pin" 2>/dev/null; then
    $PIP wheel --quiet --no-deps -w "$DEST" "$pin"  # source only: a pure-Python wheel built here
  fi
done < "$work/pins.txt"
if [ -n "${BNB_CUDA:-}" ]; then  # bitsandbytes' other CUDA and ROCm libraries out of its wheel
  for wheel in "$DEST"/bitsandbytes-*.whl; do
    python3 - "$wheel" "$BNB_CUDA" <<'EOF'
import os, sys, zipfile
path, keep = sys.argv[1], ("libbitsandbytes_" + sys.argv[2] + ".", "libbitsandbytes_cpu.")
with zipfile.ZipFile(path) as src, zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as out:
    for item in src.infolist():
        if "libbitsandbytes_" not in item.filename or any(k in item.filename for k in keep):
            out.writestr(item, src.read(item.filename))
os.replace(path + ".tmp", path)
EOF
  done
fi
echo "downloaded $(ls "$DEST"/*.whl | wc -l) wheels ($(du -sh "$DEST" | cut -f1)) into $DEST; on the GPU box, from the repository root:"
echo "  python3 -m pip install --no-index --no-deps --target $DEST/site $DEST/*.whl && export PYTHONPATH=\$PWD/$DEST/site"
