"""The memory planner against the peaks an H200 measured for bench/gpu_check.py's runs.

    python bench/memory_gpu_check.py [--run sd15-lora-b1 ...]

Each run of the GPU check (docs/GPU_CHECK.md) is built again at full size on the meta device
(bench/memory_presets.py's builders: the published configs, nothing downloaded), with our preset
and the check's settings (512 px, 1024 for SDXL, batch 1 or 4), and the planner estimates it for a
CUDA card as large as the H200 (`estimate_on_meta`, what `python -m ot_gradio estimate-memory`
runs). The table puts the estimate beside `torch.cuda.max_memory_allocated` of the steps measured
on an NVIDIA H200 (docs/PERFORMANCE.md sections 17, 17b and 17c; the peaks are written below, they
cannot be measured here: SD 1.5 LoRA batch 1, the fine-tune, SDXL and Flux NF4 from 17c, on the
code with a LoRA layer's float32 input cast once for both products and cuDNN attention off; the
offloading run and SD 1.5 batch 4 from 17b; the others from 17). Since section 17d a FLOAT_16 run's
frozen norms compute in float16 and keep less (SD 1.5 and SDXL LoRA: estimates 9-17 % lower):
their peaks here are of the code before, until a GPU measures them again. Takes 2-20 s a run on 2
CPU cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import bench._common  # noqa: E402,F401  (sets the offline environment)

CARD_GB = 150  # the H200 as torch reports it: AUTO then leaves checkpointing off, as it did there
# run: (preset, resolution, batch, changes to the config's sections, peak GB measured on the H200)
RUNS: dict[str, tuple[str, str, int, dict[str, Any], float]] = {
    "sd15-lora-b1": ("sd15-lora", "512", 1, {}, 3.474),
    "sd15-lora-b4": ("sd15-lora", "512", 4, {}, 7.417),
    "sd15-finetune": ("sd15-finetune", "512", 1, {"train_dtype": "BFLOAT_16", "ema": "GPU",
                                                   "optimizer": {"optimizer": "ADAFACTOR", "fused_back_pass": True}}, 13.121),
    "sdxl-lora": ("sdxl-lora", "1024", 1, {}, 14.377),
    "flux-lora-nf4": ("flux-dev-1-lora", "512", 1, {}, 14.071),
    "flux-lora-bf16": ("flux-dev-1-lora", "512", 1, {"transformer": {"weight_dtype": "BFLOAT_16"}}, 31.665),
    "z-image-lora-fp8": ("z-image-lora", "512", 1, {}, 27.26),
    "z-image-lora-int-w8a8": ("z-image-lora", "512", 1, {"transformer": {"weight_dtype": "INT_W8A8"}}, 16.627),
    "z-image-lora-fp8-offload": ("z-image-lora", "512", 1, {"transformer": {
        "offload_fraction": 0.5, "activation_offloading": True, "gradient_checkpointing": "ON"}}, 4.763),
}


def config_changes(preset: str, resolution: str, batch: int, changes: dict[str, Any]) -> dict[str, Any]:
    """The run's settings as `model_copy` updates of the preset's loaded config (sections merged)."""
    from ot_gradio.config.io import config_to_dict, load_config

    config = config_to_dict(load_config(ROOT / "presets" / f"{preset}.json").config)
    for key, value in changes.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) else value
    config.update(resolution=resolution, batch_size=batch)
    loaded = load_config(config).config
    return {key: getattr(loaded, key) for key in ("resolution", "batch_size", *changes)}


def main() -> int:
    from bench.memory_presets import run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", nargs="*", default=[], choices=sorted(RUNS), help="only these runs")
    args = parser.parse_args()
    print("| run | measured peak on the H200 (GB) | estimate (GB) | measured / estimate | checkpointing | activations (GB) |")
    print("|---|---|---|---|---|---|")
    for name, (preset, resolution, batch, changes, measured) in RUNS.items():
        if args.run and name not in args.run:
            continue
        start = time.perf_counter()
        row = run(f"presets/{preset}.json", CARD_GB, config_changes(preset, resolution, batch, changes))
        if row["peak"] is None:
            print(f"| {name} | {measured:.2f} | not measured: {row['probe_error']} | - | - | - |")
            continue
        print(f"| {name} | {measured:.2f} | {row['peak'] / 1e9:.2f} | {measured / (row['peak'] / 1e9):.2f} | "
              f"{'on' if row['checkpointing'] else 'off'} | {row['activations'] / 1e9:.2f} |", flush=True)
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
