"""The maskers of the automatic mask tool, one registry entry each: ClipSeg (a text prompt,
transformers), rembg's u2net human model (onnxruntime, no rembg package) and closeness to a
colour. Each turns an image into a 0..1 score map at the image's size; torch, transformers and
onnxruntime are imported only when a masker loads."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from PIL import Image, ImageColor

from ..fsutil import atomic_write_bytes
from .jobs import JobError

CLIPSEG_HUB_ID = "CIDAS/clipseg-rd64-refined"
U2NET_FILE = "u2net_human_seg.onnx"
U2NET_URL = "https://github.com/danielgatis/rembg/releases/download/v0.0.0/u2net_human_seg.onnx"

class Predictor(Protocol):
    def predict(self, image: Image.Image, query: str) -> np.ndarray: ...


@dataclass(frozen=True)
class MaskerSpec:
    """One registry entry. `query` names the field the masker reads (prompt or colour);
    `cut` turns the user's threshold into the cut on the score map."""

    label: str
    load: Callable[..., Predictor]
    query: str = ""
    cut: Callable[[float], float] = float


MASKERS: dict[str, MaskerSpec] = {}


def register(name: str, label: str, query: str = "", cut: Callable[[float], float] = float):
    def wrap(load: Callable[..., Predictor]) -> Callable[..., Predictor]:
        MASKERS[name] = MaskerSpec(label, load, query, cut)
        return load
    return wrap


def resize_map(score: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A float map resized (bilinear) to a PIL size (width, height)."""
    score = np.asarray(score, dtype=np.float32)
    if score.shape[::-1] == tuple(size):
        return score
    return np.asarray(Image.fromarray(score, "F").resize(size, Image.BILINEAR), dtype=np.float32)


def _torch_device(device: str) -> str:
    import torch  # noqa: PLC0415

    if device in ("", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


# ---- ClipSeg ------------------------------------------------------------------------------

class ClipSeg:
    """transformers' CLIPSegForImageSegmentation; comma-separated prompts, the max over them
    (OneTrainer averages, which dilutes each prompt; a list of things means "any of them")."""

    def __init__(self, model_path: str, device: str):
        import torch  # noqa: PLC0415
        from transformers import CLIPSegForImageSegmentation, CLIPSegProcessor  # noqa: PLC0415

        source = (model_path or "").strip() or CLIPSEG_HUB_ID
        local = Path(source).expanduser()
        if local.exists() and not (local / "config.json").is_file():
            raise JobError(f"Model path: {local} is not a ClipSeg folder (no config.json); download {CLIPSEG_HUB_ID} "
                           f"(e.g. `hf download {CLIPSEG_HUB_ID} --local-dir {local}`)")
        try:
            where = str(local) if local.exists() else source
            self.processor = CLIPSegProcessor.from_pretrained(where)
            self.model = CLIPSegForImageSegmentation.from_pretrained(where).eval()
        except (OSError, ValueError) as err:
            raise JobError(f"ClipSeg model '{source}' could not be loaded ({str(err).splitlines()[0]}). Without internet, "
                           f"download {CLIPSEG_HUB_ID} on a connected machine (`hf download {CLIPSEG_HUB_ID} "
                           f"--local-dir clipseg`) and give that folder as Model path.") from None
        self.device = _torch_device(device)
        self.model.to(self.device)
        self.torch = torch

    def predict(self, image: Image.Image, query: str) -> np.ndarray:
        prompts = split_prompts(query)
        inputs = self.processor(text=prompts, images=[image] * len(prompts), padding="max_length", return_tensors="pt")
        inputs = inputs.to(self.device)
        with self.torch.no_grad():
            logits = self.model(**inputs).logits.float()
        probs = self.torch.sigmoid(logits).reshape(len(prompts), *logits.shape[-2:]).amax(0)
        return resize_map(probs.cpu().numpy(), image.size)


def split_prompts(prompt: str) -> list[str]:
    return [part.strip() for part in (prompt or "").split(",") if part.strip()]


@register("clipseg", "ClipSeg (text prompt)", query="prompt")
def load_clipseg(model_path: str, device: str, **_: Any) -> Predictor:
    return ClipSeg(model_path, device)


# ---- rembg human (u2net) ------------------------------------------------------------------

U2NET_SIZE = 320
U2NET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
U2NET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def u2net_home() -> Path:
    """Where rembg keeps its models: $U2NET_HOME, else $XDG_DATA_HOME/.u2net, else ~/.u2net."""
    if os.environ.get("U2NET_HOME"):
        return Path(os.environ["U2NET_HOME"]).expanduser()
    return Path(os.environ.get("XDG_DATA_HOME") or "~").expanduser() / ".u2net"


def find_u2net(model_path: str, allow_download: bool = False) -> Path:
    if (model_path or "").strip():
        path = Path(model_path).expanduser()
        path = path / U2NET_FILE if path.is_dir() else path
        if path.is_file():
            return path
        raise JobError(f"Model path: {path} does not exist; download {U2NET_FILE} from {U2NET_URL} and put it there")
    path = u2net_home() / U2NET_FILE
    if path.is_file():
        return path
    if not allow_download:
        raise JobError(f"rembg human model {U2NET_FILE} not found: download it from {U2NET_URL} and put it in "
                       f"{path.parent} (or set U2NET_HOME, or give the file as Model path, or allow the download)")
    try:
        with urllib.request.urlopen(U2NET_URL, timeout=60) as response:  # noqa: S310 - fixed https URL
            data = response.read()
    except OSError as err:
        raise JobError(f"downloading {U2NET_URL} failed ({err}); download it by hand and put it in {path.parent}") from None
    return atomic_write_bytes(path, data)


class U2NetHuman:
    """The u2net_human_seg ONNX model run with onnxruntime, with rembg's pre/post-processing."""

    def __init__(self, model_path: str, device: str, allow_download: bool = False):
        import onnxruntime as ort  # noqa: PLC0415

        path = find_u2net(model_path, allow_download)
        providers = ["CPUExecutionProvider"]
        if device != "cpu" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        try:
            self.session = ort.InferenceSession(str(path), providers=providers)
        except Exception as err:  # noqa: BLE001 - onnxruntime raises its own error types
            raise JobError(f"{path} is not a usable ONNX model ({err}); download {U2NET_FILE} again from {U2NET_URL}") from None
        self.input_name = self.session.get_inputs()[0].name

    def predict(self, image: Image.Image, query: str) -> np.ndarray:
        small = np.asarray(image.convert("RGB").resize((U2NET_SIZE, U2NET_SIZE), Image.LANCZOS), dtype=np.float32)
        small = small / max(float(small.max()), 1e-6)
        batch = ((small - U2NET_MEAN) / U2NET_STD).transpose(2, 0, 1)[None].astype(np.float32)
        pred = np.asarray(self.session.run(None, {self.input_name: batch})[0], dtype=np.float32)[0, 0]
        low, high = float(pred.min()), float(pred.max())
        pred = (pred - low) / (high - low) if high > low else np.zeros_like(pred)
        return resize_map(pred, image.size)


@register("rembg_human", "rembg human (u2net_human_seg)")
def load_rembg_human(model_path: str, device: str, allow_download: bool = False, **_: Any) -> Predictor:
    return U2NetHuman(model_path, device, allow_download)


# ---- by colour ----------------------------------------------------------------------------

def parse_colour(text: str) -> tuple[int, int, int]:
    """'#ff0000', 'ff0000', '0xff0000', '255,0,0' or a colour name."""
    raw = (text or "").strip()
    if "," in raw and not raw.lower().startswith(("rgb", "hs")):
        parts = [p.strip() for p in raw.split(",")]
        if len(parts) == 3 and all(p.isdigit() and int(p) <= 255 for p in parts):
            return int(parts[0]), int(parts[1]), int(parts[2])
    hexed = raw[2:] if raw.lower().startswith("0x") else raw
    if len(hexed) == 6 and all(c in "0123456789abcdefABCDEF" for c in hexed):
        hexed = "#" + hexed
    try:
        return ImageColor.getrgb(hexed)[:3]
    except ValueError:
        raise JobError(f"Colour: '{text}' is not a colour; use e.g. #ff0000, 255,0,0 or red") from None


class ByColour:
    """Score = 1 - Euclidean distance to the colour in 0..1 RGB (OneTrainer's distance), so a
    threshold t keeps the pixels within distance t of the colour."""

    def predict(self, image: Image.Image, query: str) -> np.ndarray:
        target = np.array(parse_colour(query), dtype=np.float32) / 255.0
        pixels = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
        return np.clip(1.0 - np.linalg.norm(pixels - target, axis=2), 0.0, 1.0)


@register("colour", "By colour", query="colour", cut=lambda t: 1.0 - float(t) - 1e-6)
def load_colour(model_path: str, device: str, **_: Any) -> Predictor:
    return ByColour()


# ---- map arithmetic -----------------------------------------------------------------------
