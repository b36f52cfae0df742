"""Data parallel on this machine: two CPU processes (gloo) against one process at twice the batch.

    .venv/bin/python bench/multi_process.py [--epochs 4]

Runs the offline demo preset (tiny SD 1.5 LoRA) twice through the command line, which is how a
user starts it: `python -m ot_gradio train --config demo` with `--set multi_gpu=true --set
train_device=cpu --set device_indexes=0,1 --set batch_size=1` (two processes, launched by
torch.distributed.run) and with `--set batch_size=2` (one process). Both use the same seed, data
and cached latents. Prints the largest loss difference over all steps, the largest difference of
the saved LoRA weights, how many images each process trained per epoch (from log.txt) and both
wall times. On 2 CPU cores the two processes do not run faster than one (each process is single
threaded and the model is tiny); the point is that the results agree. On GPUs the same launch
gives each process its own GPU."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def train(work: Path, name: str, sets: list[str], env: dict[str, str]) -> tuple[float, Path]:
    args = [sys.executable, "-m", "ot_gradio", "train", "--config", "demo", "--workspace", str(work / name)]
    for s in sets + [f"output_model_destination={work / name / 'lora.safetensors'}", f"cache_dir={work / name / 'cache'}"]:
        args += ["--set", s]
    start = time.perf_counter()
    out = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{name} failed:\n{out.stderr[-3000:]}")
    return wall, sorted((work / name / "runs").iterdir())[-1]


def losses(run: Path) -> dict[int, float]:
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    return {e["global_step"]: e["loss"] for e in events if e["type"] == "metrics"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    from safetensors.torch import load_file

    work = Path(tempfile.mkdtemp(prefix="ot-multi-process-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OT_GRADIO_TINY_DIR": str(work / "tiny"), "PYTHONPATH": str(ROOT)}
    common = [f"epochs={args.epochs}", "seed=5", "sample_after_unit=NEVER", "tensorboard=false", "dataloader_threads=0"]
    wall_two, two = train(work, "two", common + ["multi_gpu=true", "train_device=cpu", "device_indexes=0,1", "batch_size=1"], env)
    wall_one, one = train(work, "one", common + ["batch_size=2"], env)
    a, b = losses(two), losses(one)
    if sorted(a) != sorted(b):
        print(f"RESULT: FAIL: different steps ({len(a)} vs {len(b)})")
        return 1
    loss_diff = max(abs(a[s] - b[s]) for s in b)
    rel = max(abs(a[s] - b[s]) / max(abs(b[s]), 1e-12) for s in b)
    wa, wb = load_file(str(work / "two" / "lora.safetensors")), load_file(str(work / "one" / "lora.safetensors"))
    weight_diff = max(float((wa[k] - wb[k]).abs().max()) for k in wb)
    # per tensor, relative to that tensor's largest weight (AdamW turns 1e-7 gradient differences
    # into differences of this size over the run)
    weight_rel = max(float((wa[k] - wb[k]).abs().max()) / max(float(wb[k].abs().max()), 1e-12) for k in wb)
    log = (two / "log.txt").read_text()
    counts = re.findall(r"process (\d)/2: epoch (\d+): trained (\d+) images", log)
    per_epoch: dict[str, list[str]] = {}
    for rank, epoch, n in counts:
        per_epoch.setdefault(epoch, []).append(f"process {rank}: {n}")
    print(f"steps: {len(b)} (global batch 2), loss at the first / last step {b[min(b)]:.4f} / {b[max(b)]:.4f}")
    print(f"largest loss difference: {loss_diff:.2e} (relative {rel:.2e})")
    print(f"largest LoRA weight difference: {weight_diff:.2e} (relative to its tensor's largest weight: {weight_rel:.2e})")
    for epoch, parts in sorted(per_epoch.items(), key=lambda kv: int(kv[0])):
        print(f"epoch {epoch}: {', '.join(parts)} images")
    print(f"wall time: two processes {wall_two:.1f} s, one process {wall_one:.1f} s (both include start-up)")
    # AdamW moves a weight by at most about lr per step (1e-3 x 16 steps = 1.6e-2 here): a weight
    # difference under 1e-4 is under 1 % of the largest possible movement
    ok = rel < 1e-4 and weight_diff < 1e-4
    print(f"RESULT: {'OK' if ok else 'FAIL'}: two processes at batch 1 {'match' if ok else 'do not match'} one at batch 2 "
          "(loss within 1e-4 relative at every step, LoRA weights within 1e-4)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
