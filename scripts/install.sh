#!/usr/bin/env bash
# Creates .venv at the repo root and installs ot_gradio into it (pip only, torch first).
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 bash scripts/install.sh   # NVIDIA GPU
#   bash scripts/install.sh --dev                                                   # + test tools
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    .venv/bin/pip install -q "torch==${TORCH_VERSION}" --index-url "$TORCH_INDEX_URL"
  else
    .venv/bin/pip install -q "torch==${TORCH_VERSION}"
  fi
fi
if [ "${1:-}" = "--dev" ]; then
  .venv/bin/pip install -q -r requirements-dev.txt
else
  .venv/bin/pip install -q -r requirements.txt
fi
# Bytecode for our own modules, as pip writes it for the packages it installs. Python writes it on
# first import too, except where PYTHONDONTWRITEBYTECODE is set (some containers and GPU images,
# and the machines this project is developed on); there every training run compiled the 107 of
# our modules it imports again (16,000 lines: 0.115 s, against 0.005 s to load their bytecode).
# Python checks each file's stamp, so an edited module is compiled afresh.
.venv/bin/python -m compileall -q ot_gradio bench >/dev/null || echo "note: could not write bytecode (read-only checkout?)" >&2
