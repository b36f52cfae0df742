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
# a pytest worker per core (at most 4; OT_GRADIO_TEST_WORKERS=0: one process), each test file on
# one worker (its module fixtures, e.g. a browser file's app, start once); tests/conftest.py
# gives every process one torch thread
workers="${OT_GRADIO_TEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}"
[ "$workers" -gt 4 ] && workers=4
exec .venv/bin/python -m pytest -q -n "$workers" --dist loadfile --durations=40 "$@"
