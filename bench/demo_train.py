"""Time the offline demo end to end, as a new user runs it.

    .venv/bin/python bench/demo_train.py [--runs 2] [--set epochs=1]

Runs `python -m ot_gradio train --config demo` in a fresh folder (first run: builds the tiny
model and the dataset; later runs: reuse them and the latent cache) and prints wall time,
training steps per second and the worker's peak memory. The issue's target: under a minute on
CPU. It also prints where the time before the first step goes, from the run's events: start-up
(interpreter, imports, config checks) until "reading the config", the worker's imports until the
model loads, loading the model, caching, and the first training step."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def startup_phases(events: list[dict], launched: float) -> str:
    """The seconds between the process start and the first training step, phase by phase."""
    def first(match) -> float | None:
        return next((e["time"] for e in events if match(e)), None)

    marks = [("start-up and config checks", first(lambda e: e["type"] == "status" and e["message"] == "reading the config")),
             ("worker imports", first(lambda e: e["type"] == "status" and e["message"].startswith("loading "))),
             ("model loading", first(lambda e: e["type"] == "status" and e["status"] == "caching")),
             ("caching", first(lambda e: e["type"] == "status" and e["status"] == "training")),
             ("first step", first(lambda e: e["type"] == "progress" and e.get("phase") == "training"))]
    parts, before = [], launched
    for name, at in marks:
        if at is not None:
            parts.append(f"{name} {at - before:.1f} s")
            before = at
    return ", ".join(parts) + f" (total {before - launched:.1f} s)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="passed to `train` (e.g. --set epochs=1 to time only the start-up and one epoch)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ot-demo-bench-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OT_GRADIO_TINY_DIR": str(work / "tiny"), "PYTHONPATH": str(ROOT)}
    for i in range(args.runs):
        start, launched = time.perf_counter(), time.time()
        out = subprocess.run([sys.executable, "-m", "ot_gradio", "train", "--config", "demo",
                              *(f"--set={item}" for item in args.set)], cwd=work, env=env,
                             capture_output=True, text=True)
        wall = time.perf_counter() - start
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            return out.returncode
        runs = sorted((work / "workspace" / "demo" / "runs").iterdir())
        events = [json.loads(line) for line in (runs[-1] / "events.jsonl").read_text().splitlines()]
        progress = [e for e in events if e["type"] == "progress" and e.get("phase") == "training"]
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"run {i + 1}: {wall:.1f} s wall, {progress[-1]['global_step']} steps, "
              f"{progress[-1]['it_s']:.2f} steps/s while training, peak RSS so far {peak_mb:.0f} MB")
        print(f"  before the first step: {startup_phases(events, launched)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
