"""What the benchmarks share: the benchmark model, a dataset, a config, a step clock.

The benchmark model is SD 1.5's UNet layout (three cross-attention down blocks and a plain one,
two layers per block, the mirrored up blocks) at reduced width, with the tiny VAE, CLIP text
encoder and tokenizer of `ot_gradio.models.tiny`, saved as a diffusers folder so the trainer
loads it through its real loading code. At 64 px, batch 2, a training step takes a few hundred
milliseconds on one CPU core.

The machine is shared (2 cores, other jobs running): every benchmark runs what it compares in
one process, interleaved, and prints ratios. Torch gets one thread by default (`--threads`):
with two OpenMP threads and another busy process on the machine, a step becomes several times
slower and much noisier, which hides everything measured here.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

from ot_gradio.training.trainer import Reporter  # noqa: E402

BENCH_WIDTHS = (32, 64, 128, 128)  # SD 1.5: (320, 640, 1280, 1280)
BENCH_MODEL_VERSION = 1
SHAPES = ("circle", "square", "triangle")
COLOURS = {"red": (220, 40, 40), "green": (40, 170, 70), "blue": (40, 80, 220), "yellow": (235, 200, 30), "purple": (140, 60, 180)}


def setup_torch(threads: int) -> None:
    import torch

    torch.set_num_threads(max(1, threads))
    from ot_gradio.runner.worker import quiet_libraries

    quiet_libraries()


def bench_unet(cross_attention_dim: int = 32, seed: int = 0):
    """SD 1.5's UNet block layout at reduced width (8.5 M weights instead of 860 M)."""
    import torch
    from diffusers import UNet2DConditionModel

    torch.manual_seed(seed)
    return UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        block_out_channels=BENCH_WIDTHS,
        layers_per_block=2,
        cross_attention_dim=cross_attention_dim,
        attention_head_dim=8,
        norm_num_groups=32,
    )


def bench_model(root: Path) -> Path:
    """The benchmark model as a diffusers folder under `root` (built once, then reused)."""
    from diffusers import StableDiffusionPipeline

    from ot_gradio.fsutil import atomic_write_dir
    from ot_gradio.models.tiny.sd15 import tiny_sd15_components

    folder = Path(root) / f"bench-sd15-v{BENCH_MODEL_VERSION}"
    if not (folder / "model_index.json").is_file():
        parts = tiny_sd15_components(seed=0)
        parts["unet"] = bench_unet(cross_attention_dim=parts["text_encoder"].config.hidden_size)
        pipe = StableDiffusionPipeline(**parts, safety_checker=None, feature_extractor=None, requires_safety_checker=False)
        atomic_write_dir(folder, lambda tmp: pipe.save_pretrained(tmp, safe_serialization=True))
    return folder


def tiny_model(root: Path) -> Path:
    """The tiny SD 1.5 of the tests and the demo, as a diffusers folder under `root`."""
    from ot_gradio.models.tiny.sd15 import save_tiny_sd15

    return save_tiny_sd15(Path(root) / "tiny-sd15").diffusers_dir


def make_images(folder: Path, count: int, size: int = 64, seed: int = 0, start: int = 0) -> Path:
    """`count` PNGs of coloured shapes with a caption each (numbered from `start`)."""
    from PIL import Image, ImageDraw

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed * 100_003 + start)
    for number in range(start, start + count):
        shape, colour = rng.choice(SHAPES), rng.choice(sorted(COLOURS))
        img = Image.new("RGB", (size, size), tuple(rng.randrange(200, 256) for _ in range(3)))
        draw = ImageDraw.Draw(img)
        side = size * rng.uniform(0.4, 0.8)
        cx, cy = rng.uniform(side / 2, size - side / 2), rng.uniform(side / 2, size - side / 2)
        box = (cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2)
        if shape == "circle":
            draw.ellipse(box, fill=COLOURS[colour])
        elif shape == "square":
            draw.rectangle(box, fill=COLOURS[colour])
        else:
            draw.polygon([(cx, box[1]), (box[2], box[3]), (box[0], box[3])], fill=COLOURS[colour])
        img.save(folder / f"{number:05d}.png")
        (folder / f"{number:05d}.txt").write_text(f"a {colour} {shape} on a light background\n")
    return folder


def make_photos(folder: Path, count: int, size: int, wide_every: int = 4) -> Path:
    """Large, noisy photos-like sources (noise keeps PNG decoding honest); every `wide_every`-th
    is 3:2 (0: all square)."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        w, h = (size * 3 // 2, size) if wide_every and i % wide_every == 0 else (size, size)
        base = rng.integers(0, 255, (1, 1, 3))
        grad = np.linspace(0, 1, w)[None, :, None] * rng.integers(0, 120, (1, 1, 3))
        noise = rng.integers(-25, 25, (h, w, 3))
        arr = np.clip(base + grad + noise, 0, 255).astype(np.uint8)
        Image.fromarray(arr).save(folder / f"{i:04d}.png")
        (folder / f"{i:04d}.txt").write_text(f"photo number {i}\n")
    return folder


def config_dict(model_dir: Path, data_dir: Path, work: Path, **overrides: Any) -> dict[str, Any]:
    """A FINE_TUNE of the UNet (text encoder frozen), FLOAT_32, no sampling, backups or
    TensorBoard, output to `work`; `overrides` replace any key."""
    base = {
        "model_type": "STABLE_DIFFUSION_15",
        "training_method": "FINE_TUNE",
        "base_model_name": str(model_dir),
        "train_device": "cpu",
        "train_dtype": "FLOAT_32",
        "workspace_dir": str(work / "ws"),
        "cache_dir": str(work / "cache"),
        "output_model_destination": str(work / "out" / "model.safetensors"),
        "output_model_format": "SAFETENSORS",
        "concepts": [{"name": "shapes", "path": str(data_dir)}],
        "resolution": "64",
        "batch_size": 2,
        "epochs": 1,
        "learning_rate": 1e-5,
        "learning_rate_warmup_steps": 0,
        "text_encoder": {"train": False},
        "unet": {"train": True, "gradient_checkpointing": False},
        "samples": [],
        "sample_after": 0,
        "sample_after_unit": "NEVER",
        "backup_after": 0,
        "backup_after_unit": "NEVER",
        "save_every": 0,
        "save_every_unit": "NEVER",
        "tensorboard": False,
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


def make_trainer(data: dict[str, Any], work: Path, reporter):
    from ot_gradio.config.io import load_config
    from ot_gradio.training.trainer import RunPaths, Trainer

    config = load_config(data).config
    run = Path(work) / "run"
    paths = RunPaths(run / "samples", run / "backup", run / "save", None, [])
    return Trainer(config, paths, reporter)


class Clock(Reporter):
    """A Reporter that timestamps every optimizer step (the trainer reports metrics once per
    step) and every epoch change, and can run a callback between steps (interleaving)."""

    def __init__(self, between=None):
        self.between = between
        self.step_times: list[float] = []  # one per step: from the end of the previous one
        self.step_epochs: list[int] = []
        self.losses: list[float] = []
        self.statuses: list[tuple[float, str]] = []
        self.warnings: list[str] = []
        self._mark: float | None = None

    def status(self, status: str, message: str = "") -> None:
        now = time.perf_counter()
        self.statuses.append((now, status))
        if status == "training" and self._mark is None:
            self._mark = now

    def warning(self, message: str) -> None:
        self.warnings.append(message)

    def progress(self, **fields: Any) -> None:
        if fields.get("phase") == "training":
            self.step_epochs.append(int(fields["epoch"]))

    def metrics(self, **fields: Any) -> None:
        now = time.perf_counter()
        if self._mark is not None:
            self.step_times.append(now - self._mark)
        self.losses.append(float(fields["loss"]))
        if self.between is not None:
            self.between()
        self._mark = time.perf_counter()



def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def machine_line() -> str:
    import platform

    import torch

    return (f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPU cores, no GPU, torch {torch.__version__}, "
            f"{torch.get_num_threads()} torch thread(s), load average {os.getloadavg()[0]:.1f}, {platform.python_version()}")
