"""Benchmark 6: the training process's peak memory, and whether it grows from epoch to epoch.

    .venv/bin/python bench/memory.py [--epochs 8] [--threads 1]

Runs `python -m ot_gradio train --config <file>` (the worker runs in that process) for the tiny
SD 1.5 and for the benchmark model (LoRA, and a FINE_TUNE of the UNet for the benchmark model),
16 images at 64 px, batch 2, and samples the process's resident memory (VmRSS) every 50 ms from
/proc, with its peak (VmHWM). Epoch boundaries come from the run's events.jsonl. Printed: the
peak, the highest RSS within each epoch, and the growth from epoch 2 to the last epoch (epoch 1
holds one-time allocations: the allocator's pools, the optimizer state, caches). Target: no
growth across epochs (within a few MB of allocator noise).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as C


def read_status(pid: int) -> tuple[float, float] | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            values[line.split(":")[0]] = int(line.split()[1]) / 1024
    if "VmRSS" not in values:
        return None
    return values["VmRSS"], values.get("VmHWM", values["VmRSS"])


def measure(label: str, model_dir: Path, data_dir: Path, work: Path, epochs: int, threads: int, **overrides) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix=f"mem-{label}-", dir=work))
    data = C.config_dict(model_dir, data_dir, run_dir, epochs=epochs, backup_before_save=False, **overrides)
    config = run_dir / "config.json"
    config.write_text(json.dumps(data))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(C.ROOT), "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    proc = subprocess.Popen([sys.executable, "-m", "ot_gradio", "train", "--config", str(config)], env=env, cwd=C.ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples: list[tuple[float, float]] = []
    peak = 0.0
    while proc.poll() is None:
        status = read_status(proc.pid)
        if status is not None:
            samples.append((time.time(), status[0]))
            peak = max(peak, status[1])
        time.sleep(0.05)
    err = proc.stderr.read()
    if proc.returncode != 0:
        print(err[-3000:], file=sys.stderr)
        raise SystemExit(f"{label}: training failed")
    runs = sorted((run_dir / "ws").glob("runs/*"))
    events = [json.loads(line) for line in (runs[-1] / "events.jsonl").read_text().splitlines()]
    training = next(e["time"] for e in events if e["type"] == "status" and e["status"] == "training")
    ends: dict[int, float] = {}
    for e in events:
        if e["type"] == "progress" and e.get("phase") == "training":
            ends[e["epoch"]] = e["time"]
    per_epoch, start = [], training
    for epoch in sorted(ends):
        inside = [rss for t, rss in samples if start <= t <= ends[epoch]]
        per_epoch.append(max(inside) if inside else float("nan"))
        start = ends[epoch]
    growth = per_epoch[-1] - per_epoch[1] if len(per_epoch) > 2 else float("nan")
    print(f"{label:<26} peak RSS {peak:7.1f} MB; max RSS per epoch {', '.join(f'{v:.0f}' for v in per_epoch)} MB; "
          f"growth epoch 2 -> {len(per_epoch)}: {growth:+.1f} MB", flush=True)
    return {"peak": peak, "per_epoch": per_epoch, "growth": growth}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="ot-bench-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    C.setup_torch(args.threads)
    tiny = C.tiny_model(work / "models")
    bench = C.bench_model(work / "models")
    data_dir = work / "data"
    if not data_dir.is_dir():
        C.make_images(data_dir, 16, size=64)
    print(f"# memory: {C.machine_line()}; 16 images of 64 px, batch 2, {args.epochs} epochs")
    lora = {"training_method": "LORA", "lora_rank": 4, "lora_alpha": 4}
    results = [
        measure("tiny SD 1.5, LoRA", tiny, data_dir, work, args.epochs, args.threads, **lora),
        measure("benchmark model, LoRA", bench, data_dir, work, args.epochs, args.threads, **lora),
        measure("benchmark model, FINE_TUNE", bench, data_dir, work, args.epochs, args.threads),
    ]
    worst = max(r["growth"] for r in results)
    print(f"RESULT largest growth from epoch 2 to the last: {worst:+.1f} MB (target: none beyond allocator noise, < 10 MB): "
          f"{'met' if worst < 10 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
