"""`debug_mode` (OneTrainer's): what the model sees at each training step, written as files so a
user can check that crops, flips, masks and caption augmentation do what they expect.

For every sample of every step (as OneTrainer; turn it on for a short run), in the debug folder:
`<step>-<n>-<image stem>-image.png`: the latents the step trains on (cached, or encoded from the
pixels at this step), decoded by the model's VAE, so the VAE's view shows too; video families:
the first frame. `-mask.png` when the step has a mask (masked training): the mask the loss used,
at the image's size. `-conditioning.png` for inpainting families: the conditioning image the
denoiser takes (the masked image, the `-condlabel` image, or blank), decoded the same way.
`-prompt.txt`: the caption after caption augmentation, the method's text hook (embedding
placeholders) and caption dropout (one `part: text` line per text encoder when they differ).
`<step>` is the optimizer step (1 = the first), `<n>` the sample within it (with gradient
accumulation it counts on through the step's batches).

Decoding runs without gradients, the VAE in eval mode, and draws no random numbers, so the run
trains exactly as with debug mode off; a VAE parked in RAM (placement.py) comes to the device for
it, as for samples. Würstchen and Stable Cascade decode through a diffusion model, not a VAE:
there only the masks and prompts are written, which the log says once. With several GPUs the main
process writes its slice of each batch. A method with its own step (FINE_TUNE_VAE) writes nothing.

`debug_dir`: a relative path is a folder inside the run's folder and may not climb out of it
with `..`; an absolute path (or `~/...`) is used as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from ..models.common import conditioning_image_latents
from .preflight import TrainingError


def debug_folder(debug_dir: str, run_folder: Path) -> Path:
    """Where debug mode writes for `debug_dir`; a relative one that leaves the run folder is refused."""
    if not debug_dir.strip():
        raise TrainingError("debug_dir is empty: name a folder (relative: inside the run's folder) or turn debug_mode off")
    path = Path(debug_dir.strip()).expanduser()
    if path.is_absolute():
        return path
    folder = (run_folder / path).resolve()
    if not folder.is_relative_to(run_folder.resolve()):
        raise TrainingError(f"debug_dir '{debug_dir}' climbs out of the run's folder with '..'; "
                            "use a folder inside it, or an absolute path to write somewhere else")
    return folder


def debug_writer(run: Any, placement: Any, step: Callable[[], int]) -> DebugWriter | None:
    """The step's writer for this run (`run`: a RunState), or None when debug mode is off or the
    process is not the main one. Says once in the log what it cannot write."""
    cfg = run.config
    if not cfg.debug_mode or not run.dist.is_main:
        return None
    if run.method.step_parts is not None:
        run.report.warning(f"debug_mode: the {cfg.training_method.value} step is not the diffusion step; nothing is written")
        return None
    folder = debug_folder(cfg.debug_dir, run.paths.run or run.paths.samples.parent)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TrainingError(f"debug_dir: cannot create {folder} ({exc}); pick a folder you can write to") from exc
    if not run.model.decodes_latents:
        run.report.warning(f"debug_mode: {cfg.model_type.value} decodes its latents with a diffusion model, not a VAE; "
                           "only the prompts and masks are written")
    print(f"debug_mode: writing what each step trains on to {folder}", flush=True)
    return DebugWriter(folder, run.model, placement, step)


class DebugWriter:
    """Called by the diffusion step (`DiffusionStep.debug`) with what it is about to train on."""

    def __init__(self, folder: Path, model: Any, placement: Any, step: Callable[[], int]):
        self.folder = folder
        self.model = model
        self.placement = placement
        self.step = step
        self.last_step, self.count = 0, 0

    def __call__(self, batch: Any, latents: torch.Tensor, mask: torch.Tensor | None, texts: Any) -> None:
        step = self.step()
        if step != self.last_step:
            self.last_step, self.count = step, 0
        stems = [f"{step}-{self.count + i}-{Path(p).stem}" for i, p in enumerate(batch.image_paths)]
        self.count += len(stems)
        for i, stem in enumerate(stems):
            (self.folder / f"{stem}-prompt.txt").write_text(prompt_text(texts, i), encoding="utf-8")
        if mask is not None:
            self._write(stems, "mask", mask_pixels(first_frame(mask), batch.size))
        if not self.model.decodes_latents:
            return
        with torch.no_grad(), self._decoding():
            self._write(stems, "image", self.model.decode_latents(latents))
            if self.model.inpainting:
                self._write(stems, "conditioning", self.model.decode_latents(self._conditioning(batch, latents, mask)))

    def _conditioning(self, batch: Any, latents: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The conditioning-image latents the inpainting denoiser takes, as the family makes them."""
        n, _, h, w = latents.shape
        blank = self.model.blank_latents(h, w).to(latents.device).expand(n, -1, -1, -1)
        whole = torch.ones(n, dtype=torch.bool) if mask is None else mask.flatten(1).amin(dim=1) >= 1.0
        return conditioning_image_latents(self.model, batch, blank, whole.to(latents.device))

    @contextlib.contextmanager
    def _decoding(self) -> Iterator[None]:
        """The image parts on the device (a parked VAE comes as for samples) and in eval mode."""
        model = self.model
        modules = [m for name, m in model.parts.items() if name != model.denoiser and name not in model.text_encoder_names]
        modes = [m.training for m in modules]
        with self.placement.using(self.placement.for_samples()):
            try:
                for m in modules:
                    m.eval()
                yield
            finally:
                for m, mode in zip(modules, modes, strict=True):
                    m.train(mode)

    def _write(self, stems: list[str], kind: str, pixels: torch.Tensor) -> None:
        """`pixels`: (B, C, H, W) in [-1, 1] (a mask: [0, 1]), or video (B, C, F, H, W)."""
        pixels = first_frame(pixels).float()
        if kind != "mask":
            pixels = (pixels + 1.0) / 2.0
        array = (pixels.clamp(0, 1) * 255).round().to(torch.uint8).cpu().numpy()
        for stem, image in zip(stems, array, strict=True):
            picture = Image.fromarray(image[0]) if image.shape[0] == 1 else Image.fromarray(np.moveaxis(image, 0, -1))
            picture.save(self.folder / f"{stem}-{kind}.png")


def first_frame(tensor: torch.Tensor) -> torch.Tensor:
    return tensor[:, :, 0] if tensor.ndim == 5 else tensor


def mask_pixels(mask: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The step's mask (B, 1, h, w), at the image's size (height, width) as the loss sees it (nearest)."""
    return torch.nn.functional.interpolate(mask.detach().float().cpu(), size=tuple(size), mode="nearest")


def prompt_text(texts: Any, index: int) -> str:
    """Sample `index`'s caption as the text encoders get it; one line per encoder when they differ."""
    if not isinstance(texts, dict):
        return texts[index]
    each = {part: captions[index] for part, captions in texts.items()}
    if len(set(each.values())) == 1:
        return next(iter(each.values()))
    return "\n".join(f"{part}: {text}" for part, text in each.items())
