"""Benchmark: the memory planner's estimate of a run's peak against the peak it reaches.

    .venv/bin/python bench/memory_plan.py [--images 8] [--threads 1]

Three runs of the benchmark model (SD 1.5's UNet layout at reduced width, _common.py) on CPU, each
in a fresh process through the real Trainer: the planner's estimate (training/memory_plan.py,
made in `setup` before any step) against the process's peak resident memory (VmHWM) after one
epoch of training. On CPU the estimate counts what the process already holds (Python, torch,
the loaded model) plus gradients, optimizer state and the activations measured on the meta
device; RSS also holds what the allocator keeps after freeing, so it is the honest yardstick of
"what the machine must have". (On a GPU, `torch.cuda.max_memory_allocated` is the yardstick:
bench/gpu.py.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import _common as C

CONFIGS = {
    "LoRA 64 px, batch 2, defaults (AUTO; FLOAT_16, which trains in float32 on CPU)": dict(
        training_method="LORA", resolution="64", batch_size=2, train_dtype="FLOAT_16", unet={"train": True, "gradient_checkpointing": "AUTO"}),
    "fine-tune 256 px, batch 4, float32, checkpointing AUTO": dict(
        training_method="FINE_TUNE", resolution="256", batch_size=4, unet={"train": True, "gradient_checkpointing": "AUTO"}),
    "fine-tune 256 px, batch 4, float32, checkpointing ON": dict(
        training_method="FINE_TUNE", resolution="256", batch_size=4, unet={"train": True, "gradient_checkpointing": "ON"}),
}

CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import _common as C
C.setup_torch(int(sys.argv[3]))
from ot_gradio.training import memory_plan
data = json.loads(sys.argv[1])
trainer = C.make_trainer(data, Path(data["workspace_dir"]), C.Clock())
trainer.setup()
on = trainer.checkpointing[trainer.model.denoiser]
plan = trainer.memory_plan or memory_plan.plan_run(
    trainer.model, trainer.config, trainer.device, trainer.precision, trainer.param_groups,
    trainer.trained_text_parts, [trainer.model.denoiser], measure=(on,))
trainer.train()
print(json.dumps({"estimate": plan.peak(on), "measured": C.peak_rss_mb() * 1024 * 1024, "checkpointing": on,
                  "line": plan.line(on), "breakdown": plan.breakdown(on)}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    C.setup_torch(args.threads)
    work = args.work or Path(tempfile.mkdtemp(prefix="ot-bench-memory-plan-"))
    model = C.bench_model(work / "models")
    data = C.make_images(work / "data-256", args.images, size=256)
    print(f"# memory_plan: {C.machine_line()}; {args.images} images, 1 epoch each", flush=True)
    env = {**os.environ, "PYTHONPATH": str(C.ROOT), "OMP_NUM_THREADS": str(args.threads)}
    errors = []
    for i, (label, overrides) in enumerate(CONFIGS.items()):
        run = work / f"run{i}"
        config = C.config_dict(model, data, run, output_model_destination=str(run / "out" / "model.safetensors"), **overrides)
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config), str(Path(__file__).parent), str(args.threads)],
                             capture_output=True, text=True, env=env, cwd=C.ROOT)
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            return 1
        r = json.loads(out.stdout.strip().splitlines()[-1])
        error = (r["estimate"] - r["measured"]) / r["measured"]
        errors.append(abs(error))
        print(f"[{label}] estimate {r['estimate'] / 1e6:.0f} MB, measured peak RSS {r['measured'] / 1e6:.0f} MB "
              f"({error:+.1%}); checkpointing {'on' if r['checkpointing'] else 'off'}; {r['breakdown']}", flush=True)
    worst = max(errors)
    print(f"RESULT memory planner: largest error {worst:.1%} over {len(errors)} configs "
          f"(target within 15%: {'met' if worst <= 0.15 else 'NOT met'})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
