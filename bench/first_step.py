"""Time from `python -m ot_gradio train --config demo` to the first training step, with and without
the memory planner's probe.

    .venv/bin/python bench/first_step.py [--pairs 5]

One warm-up run in a fresh folder builds the tiny model, the dataset and the latent cache; then
pairs of runs alternate: one with `memory-probe.json` removed from the cache folder (the planner
probes the step, as a config's first run does) and one that reuses it (a later run of the same
model and step settings: training/memory_probe_cache.py). Times come from the run's events,
measured from the launch of the process: until the model starts loading, from there until the
trainer reports 'training' (model, LoRA, memory planner, data: the part the probe is in, less
disturbed by other processes' load than the imports before it), until 'training' (everything
before the first step), until the first step is done."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(work: Path, index: int, env: dict[str, str]) -> dict[str, float | bool]:
    workspace = work / f"w{index}"
    launched = time.time()
    out = subprocess.run([sys.executable, "-m", "ot_gradio", "train", "--config", "demo", "--set", "epochs=1",
                          "--workspace", str(workspace)], cwd=work, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    run = next((workspace / "runs").iterdir())
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]

    def at(match) -> float:
        return next(e["time"] for e in events if match(e)) - launched

    loading = at(lambda e: e["type"] == "status" and str(e.get("message", "")).startswith("loading "))
    ready = at(lambda e: e["type"] == "status" and e.get("status") == "training")
    plan = next(e["message"] for e in events if e["type"] == "status" and str(e.get("message", "")).startswith("gradient checkpointing"))
    return {"model loading starts": loading, "loading -> ready (model, LoRA, planner, data)": ready - loading, "ready to train": ready,
            "first step done": at(lambda e: e["type"] == "progress" and e.get("phase") == "training"),
            "reused": "probe of an earlier run reused" in plan}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="ot-bench-first-step-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "TRANSFORMERS_OFFLINE": "1"}
    one_run(work, 0, env)  # builds the tiny model, the dataset, the latent cache
    probe_file = work / "workspace" / "demo" / "cache" / "memory-probe.json"
    rows: dict[str, list[dict]] = {"probe": [], "reused": []}
    for i in range(args.pairs):
        for mode in ("probe", "reused"):
            if mode == "probe":
                probe_file.unlink(missing_ok=True)
            r = one_run(work, 1 + 2 * i + (mode == "reused"), env)
            rows["reused" if r["reused"] else "probe"].append(r)  # a code edit between two runs means a new probe
            print(f"{mode:6s} " + ", ".join(f"{k} {v:.2f} s" for k, v in r.items() if k != "reused")
                  + f" (probe reused: {r['reused']})", flush=True)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}; medians:")
    for mode, runs in rows.items():
        if not runs:
            continue
        print(f"RESULT {mode} ({len(runs)} runs): " + ", ".join(f"{k} {statistics.median(r[k] for r in runs):.2f} s"
                                            for k in ("model loading starts", "loading -> ready (model, LoRA, planner, data)",
                                                      "ready to train", "first step done")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
