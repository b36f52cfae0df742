"""Fixtures for the data tests: small images on disk, concepts, a counting fake VAE.

Helpers are fixtures (not imports) so the tests work under any pytest import mode."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ot_gradio.config.concept import ConceptConfig


def _write_image(path: Path, width: int = 32, height: int = 32, colour=(200, 30, 30), mode: str = "RGB", fmt: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(zlib.crc32(f"{path.name}{width}{height}".encode()))
    noise = rng.integers(-20, 20, (height, width, 3))
    arr = np.clip(np.array(colour, dtype=np.int16) + noise, 0, 255).astype(np.uint8)
    img = Image.fromarray(arr, "RGB")
    if mode != "RGB":
        img = img.convert(mode)
    img.save(path, format=fmt)
    return path


def _make_concept(path: Path, **kwargs) -> ConceptConfig:
    kwargs.setdefault("name", Path(path).name)
    return ConceptConfig(path=str(path), **kwargs)


class CountingEncoder:
    """A stand-in VAE: 8x average pooling to 4 channels; counts calls and images."""

    def __init__(self):
        self.calls = 0
        self.images = 0

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        assert pixels.dim() == 4 and pixels.shape[1] == 3
        assert float(pixels.min()) >= -1.0 and float(pixels.max()) <= 1.0
        self.calls += 1
        self.images += pixels.shape[0]
        pooled = torch.nn.functional.avg_pool2d(pixels, 8)
        return torch.cat([pooled, pooled.mean(1, keepdim=True)], dim=1)


@pytest.fixture
def write_image():
    return _write_image


@pytest.fixture
def make_concept():
    return _make_concept


@pytest.fixture
def encoder() -> CountingEncoder:
    return CountingEncoder()


@pytest.fixture
def simple_folder(tmp_path: Path) -> Path:
    """Six images: four square, two wide (2:1); captions for all but the last."""
    folder = tmp_path / "concept"
    sizes = [(32, 32), (40, 40), (48, 48), (64, 64), (96, 48), (128, 64)]
    for i, (w, h) in enumerate(sizes):
        _write_image(folder / f"img{i}.png", w, h, colour=(40 * i, 100, 200 - 30 * i))
        if i != 5:
            (folder / f"img{i}.txt").write_text(f"caption {i}\n")
    return folder
