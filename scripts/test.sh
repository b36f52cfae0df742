#!/usr/bin/env bash
# Installs everything the tests need (venv, packages, Chromium for the browser suite) and runs
# the whole test suite. This is the README's test command and what CI runs.
#
# With no arguments the browser suite (tests/browser: mostly waiting on a page and its app) runs
# beside the rest (mostly CPU), so that the two cores of a small machine are both used; its report
# follows the main one. With arguments, they go to one pytest as given.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "note: could not install chromium; browser tests will report it" >&2
fi
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRANSFORMERS_OFFLINE=1
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest -q "$@"
fi
browser_log="$(mktemp -t ot-browser-tests.XXXXXX)"
.venv/bin/python -m pytest -q --durations=15 tests/browser >"$browser_log" 2>&1 &
browser_pid=$!
rest=0
.venv/bin/python -m pytest -q --durations=25 --ignore=tests/browser || rest=$?
browser=0
wait "$browser_pid" || browser=$?
echo
echo "================ browser suite (tests/browser, run beside the rest) ================"
cat "$browser_log"
rm -f "$browser_log"
echo "exit status: rest of the suite $rest, browser suite $browser"
[ "$rest" -eq 0 ] && [ "$browser" -eq 0 ]
