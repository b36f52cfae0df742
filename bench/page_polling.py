"""Does watching a run from the page slow the training down?

    .venv/bin/python bench/page_polling.py [--epochs 10] [--pollers 5] [--rounds 3]

Builds the page in this process (it is the UI process: torch is never imported here), then
trains the offline demo (preset `demo`, tiny model, CPU) through the page's Start handler, after
a warm-up run, in rounds of two runs: one with nobody watching, one with N pollers each calling
the page's poll handler (Monitor.render, what the page's 1-second timer runs) once a second.
Alternating keeps a busy machine's drift out of the ratio. Prints the worker's training steps/s
for each run, the ratio polled / unpolled per round, the poll latency, the CPU the UI process
used (the cost of polling, whatever else runs on the machine), and this process's RSS before and
after polling. Sampling and TensorBoard are off so only training is timed. The HTTP
layer (gradio's queue and JSON) is not included."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def steps_per_s(run_path: Path) -> tuple[float, int]:
    """Training steps per second between the first and the last training progress event."""
    events = [json.loads(line) for line in (run_path / "events.jsonl").read_text().splitlines() if line.strip()]
    progress = [e for e in events if e["type"] == "progress" and e.get("phase") == "training"]
    if len(progress) < 2:
        raise SystemExit(f"{run_path}: no training progress (see {run_path / 'log.txt'})")
    first, last = progress[0], progress[-1]
    return (last["global_step"] - first["global_step"]) / (last["time"] - first["time"]), last["global_step"]


def train(page, config: dict, pollers: int = 0, rate_s: float = 1.0) -> dict:
    values = page.form_values(config)
    run_id = page.on_start(values)[page.monitor.run_id]
    if not run_id:
        raise SystemExit("the page did not start the run")
    run = page.monitor.run_dir(run_id)
    stop = threading.Event()
    latencies: list[float] = []

    def poll() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            page.monitor.render(run_id)
            latencies.append(time.perf_counter() - t)
            stop.wait(max(0.0, rate_s - (time.perf_counter() - t)))

    threads = [threading.Thread(target=poll, daemon=True) for _ in range(pollers)]
    cpu0, wall0 = os.times(), time.perf_counter()
    for th in threads:
        th.start()
    code = page.supervisor.wait(run, timeout=1800)
    stop.set()
    for th in threads:
        th.join()
    cpu1, wall = os.times(), time.perf_counter() - wall0
    ui_cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / wall
    if code != 0:
        raise SystemExit(f"training failed ({code}): " + run.log_tail())
    rate, steps = steps_per_s(run.path)
    return {"rate": rate, "steps": steps, "polls": len(latencies), "ui_cpu": ui_cpu,
            "latency_ms": statistics.median(latencies) * 1000 if latencies else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--pollers", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ot-poll-bench-"))
    os.chdir(work)
    os.environ.update({"HF_HUB_OFFLINE": "1", "OT_GRADIO_TINY_DIR": str(work / "tiny"), "GRADIO_ANALYTICS_ENABLED": "False",
                       "PYTHONPATH": str(ROOT)})

    from ot_gradio.ui.page import Page
    from ot_gradio.ui.state import preset_config

    page = Page(work / "workspace")
    base = {**preset_config("demo"), "tensorboard": False, "sample_after_unit": "NEVER", "samples": []}
    print(f"work folder {work}; UI process RSS after building the page: {rss_mb():.0f} MB")
    train(page, {**base, "epochs": 2})  # builds the tiny model, the dataset and the latent cache
    config = {**base, "epochs": args.epochs}
    ratios, rss_before, rss_after = [], None, None
    for i in range(args.rounds):
        load = os.getloadavg()[0]
        quiet = train(page, config)
        rss_before = rss_before or rss_mb()
        polled = train(page, config, pollers=args.pollers)
        rss_after = rss_mb()
        ratios.append(polled["rate"] / quiet["rate"])
        print(f"round {i + 1} (load average {load:.1f}): no polling {quiet['rate']:.3f} steps/s, "
              f"{args.pollers} pollers at 1/s {polled['rate']:.3f} steps/s ({polled['steps']} steps, {polled['polls']} polls, "
              f"median poll {polled['latency_ms']:.1f} ms): ratio {ratios[-1]:.3f}; UI process CPU "
              f"{100 * quiet['ui_cpu']:.1f}% of a core without polling, {100 * polled['ui_cpu']:.1f}% with")
    assert "torch" not in sys.modules, "the UI process imported torch"
    print(f"ratio polled/unpolled: {statistics.median(ratios):.3f} (median of {len(ratios)} rounds)")
    print(f"UI process RSS:        {rss_before:.0f} MB before polling, {rss_after:.0f} MB after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
