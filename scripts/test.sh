#!/usr/bin/env bash
# Installs everything the tests need (venv, packages, Chromium for the browser suite) and runs
# the whole test suite. This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "note: could not install chromium; browser tests will report it" >&2
fi
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m pytest -q --durations=40 "$@"
