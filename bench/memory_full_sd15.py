"""Benchmark: the memory planner's estimate against the training steps' peak, for SD 1.5 at full size on the CPU.

    .venv/bin/python bench/memory_full_sd15.py [--work DIR] [--threads 2]

Builds SD 1.5 at full size with random weights once (bench/gpu_check_models.py, float16 on disk,
2 GB) and trains its LoRA (float32, rank 16, our defaults otherwise) for two steps in a fresh
process per run, through the real Trainer. Measured: the process's peak resident memory
during the steps alone (VmHWM is reset with /proc/self/clear_refs before the first step, so the
latent caching before them does not count), against the planner's estimate made in `setup`.

Each run is made twice: with glibc's default allocator settings, and with its mmap threshold
fixed at 128 KiB (MALLOC_MMAP_THRESHOLD_), so that every large tensor is returned to the system
when it is freed. By default glibc raises that threshold after the first large free and serves
later tensors from its heaps, which it keeps: the RSS then also holds memory that no tensor
uses. The planner estimates live tensors (on a GPU: `torch.cuda.max_memory_allocated`), so the
second figure is the one it should match.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RUNS = [("256", 1), ("512", 2)]

CHILD = r"""
import json, sys
from pathlib import Path
import torch
torch.set_num_threads(int(sys.argv[3]))
from ot_gradio.config.io import load_config
from ot_gradio.data import ensure_demo_dataset
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

def status(key):
    return next(int(l.split()[1]) * 1024 for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(key + ":"))

data = json.loads(sys.argv[1])
work = Path(sys.argv[2])
data["concepts"] = [{"name": "shapes", "path": str(ensure_demo_dataset(work / "shapes"))}]
run = work / "run"
trainer = Trainer(load_config(data).config, RunPaths(run / "s", run / "b", run / "o", None, []), Reporter())
trainer.setup()
plan = trainer.memory_plan
seen = {"steps": 0, "start": None}
forward_backward, optimizer_step = trainer._forward_backward, trainer._optimizer_step

def first_resets(batch, accum):
    if seen["start"] is None:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        seen["start"] = status("VmRSS")
    return forward_backward(batch, accum)

def two_steps():
    optimizer_step()
    seen["steps"] += 1
    trainer.stop_requested = seen["steps"] >= 2

trainer._forward_backward, trainer._optimizer_step = first_resets, two_steps
trainer.train()
on = trainer.checkpointing[trainer.model.denoiser]
print(json.dumps({"estimate": plan.peak(on), "steps_peak": status("VmHWM"), "at_first_step": seen["start"],
                  "activations": plan.activations(on), "breakdown": plan.breakdown(on)}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="where the model is built (kept) and the runs write")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not Path("/proc/self/clear_refs").exists():
        print("needs Linux (/proc/self/clear_refs)", file=sys.stderr)
        return 2
    from bench.gpu_check_models import full_size_model

    work = args.work or Path(tempfile.mkdtemp(prefix="ot-bench-memory-sd15-"))
    model = full_size_model("sd15", work / "models", "cpu")
    base_env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": str(args.threads)}
    allocators = {"glibc default": {}, "mmap threshold 128 KiB": {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}}
    print("| run | allocator | estimate (GB) | RSS at the first step (GB) | peak RSS of the steps (GB) | estimate against it | activations (GB) |")
    print("|---|---|---|---|---|---|---|")
    for resolution, batch in RUNS:
        for name, extra in allocators.items():
            folder = work / f"run-{resolution}-{batch}-{len(extra)}"
            config = {"model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "base_model_name": str(model),
                      "train_device": "cpu", "train_dtype": "FLOAT_32", "workspace_dir": str(folder / "ws"),
                      "cache_dir": str(folder / "cache"), "output_model_destination": str(folder / "out" / "lora.safetensors"),
                      "resolution": resolution, "batch_size": batch, "epochs": 1, "samples": [], "sample_after_unit": "NEVER",
                      "backup_after_unit": "NEVER", "backup_before_save": False, "tensorboard": False}
            out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config), str(folder), str(args.threads)],
                                 capture_output=True, text=True, env={**base_env, **extra}, cwd=ROOT)
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                return 1
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {resolution} px, batch {batch} | {name} | {r['estimate'] / 1e9:.2f} | {r['at_first_step'] / 1e9:.2f} | "
                  f"{r['steps_peak'] / 1e9:.2f} | {(r['estimate'] - r['steps_peak']) / r['steps_peak']:+.1%} | {r['activations'] / 1e9:.2f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
