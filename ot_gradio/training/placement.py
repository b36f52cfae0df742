"""Where the model's parts wait while the training steps run: the parts a step does not run stay
in RAM, and come to the train device only for what needs them, as OneTrainer keeps them on its
`temp_device` (cpu); a temp_device that names the train device keeps every part there (nothing moves).

With latent caching on, a step reads its image latents from the cache, so the VAE (every image
part: the VAE, Würstchen's EfficientNet encoder and decoders) does not run; with the text encoder
outputs cached as well (data/text_cache.py: latent caching on, no text encoder nor embedding
trains, captions without random options), a frozen text encoder does not run either, once the
cache holds every caption the data can give: the trainer fills it for all of them before it
parks the encoders. A caption the cache still misses is encoded where the encoder is (the
families run a text encoder on its own device), so it costs time, never the run.

Kept on the train device, as before: the denoiser; every part that trains;
an inpainting model's VAE (its steps encode a blank image); and everything when latent caching
is off or the train device is the CPU. A method whose step runs other parts names them
(`Method.step_parts`; FINE_TUNE_VAE: the VAE alone), and every other frozen part waits in RAM, the
denoiser too (it comes for samples). The memory planner counts the parked parts in RAM, not on
the device (memory_plan.MemoryPlan.parked).

`Placement.park()` moves the parked parts to the CPU; `Placement.using(parts)` brings them to the
train device for a block (sampling) and back afterwards. Moves go through `move`, so a test can
see them without a GPU. bitsandbytes' INT_8 and NFLOAT_4 parts are parked too (a Flux NF4 T5:
4.1 GB), as OneTrainer parks them: they are quantized on the device before they are parked, a
4-bit weight's quantization state moves with it, and `move` makes an 8-bit layer's state follow
its weight (bitsandbytes keeps the int8 weight and its row scales outside the parameter, where a
module's `.to` does not reach). A frozen part with layer offloading waits in RAM as well (Flux.2
klein's Qwen3-8B in OneTrainer's 8 GB preset): its offloaded blocks never leave RAM with it
(`offloaded_tensors_stay`), so a sample brings only the rest, and the blocks come one at a time.

While samples are made, the parked VAE waits on the device (`for_samples`); a parked text
encoder stays in RAM, and each sample brings it to the device for the prompt's encoding alone:
the flow-matching families (Flux, Chroma, Flux.2, Qwen-Image, Z-Image, SD 3, Sana) send it back
before the denoiser runs (models/sampling_parts.SamplingParts.release), as OneTrainer samples one part at
a time; the others (SD 1.x/2.x/XL, whose text encoders are small, PixArt, Würstchen/Cascade) keep
it beside the denoiser until the image is made. A sample's peak can still be higher than a training step's, which is what the
memory planner estimates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from ..config.devices import parks_in_ram
from ..models.sampling_parts import move_module

HOST = torch.device("cpu")  # where parked parts wait (temp_device cpu; with the train device's name nothing is parked)


def move(module: torch.nn.Module, device: torch.device) -> None:
    with offloaded_tensors_stay(module):
        move_module(module, device)


@contextlib.contextmanager
def offloaded_tensors_stay(module: torch.nn.Module) -> Iterator[None]:
    """A part with layer offloading (offload.py) moves without its offloaded blocks' tensors: they
    stay in RAM and come to the device one block at a time, in the block's forward. (They are
    taken out of their modules' tables while the part moves, and put back in their places.)"""
    from .offload import offloaded_entries  # noqa: PLC0415

    tables: dict[int, tuple[dict, list[str]]] = {}
    held: dict[tuple[int, str], torch.Tensor] = {}
    for _block, entry in offloaded_entries(module):
        table, name = entry[0], entry[1]
        tables.setdefault(id(table), (table, list(table)))
        held[(id(table), name)] = table.pop(name)
    try:
        yield
    finally:
        for key, (table, order) in tables.items():
            items = {name: held.get((key, name), table.get(name)) for name in order}
            table.clear()
            table.update(items)


def parked_parts(model: Any, config: Any, device: torch.device, trained_parts: Iterable[str],
                 text_cache_off_reason: str | None, step_parts: Iterable[str] | None = None) -> tuple[list[str], list[str]]:
    """(the parts that wait in RAM while the steps run, the frozen parts that stay on `device`
    with why: 'text_encoder: latent caching is off'). Both empty on the CPU. `step_parts`: the
    parts a method's own training step runs (FINE_TUNE_VAE: the VAE alone; then the denoiser waits too)."""
    if torch.device(device).type == HOST.type:
        return [], []
    trained = set(trained_parts)
    text_parts = set(model.text_encoder_names)
    parked, kept = [], []
    for part in model.parts:
        if part in trained or (part == model.denoiser and step_parts is None):
            continue
        reason = None
        if step_parts is not None:
            reason = "the training steps run it" if part in step_parts else None
        elif not config.latent_caching:
            reason = "latent caching is off"
        elif part in text_parts and text_cache_off_reason is not None:
            reason = f"its outputs are not cached ({text_cache_off_reason})"
        elif part not in text_parts and model.inpainting:
            reason = "an inpainting model's steps encode a blank image with it"
        if reason is None and not parks_in_ram(config.temp_device):
            reason = f"temp_device is {config.temp_device}"
        if reason is None:
            parked.append(part)
        else:
            kept.append(f"{part}: {reason}")
    return parked, kept


class Placement:
    """The parked parts of one run and where each one is now (`where`)."""

    def __init__(self, model: Any, device: torch.device, parked: Iterable[str], kept: Iterable[str] = (),
                 mover: Callable[[torch.nn.Module, torch.device], None] | None = None):
        self.model = model
        self.device = torch.device(device)
        self.parked = list(parked)
        self.kept = list(kept)
        self.move = mover or move
        self.where: dict[str, torch.device] = {}
        self.text_cache_off_reason: str | None = None

    @classmethod
    def for_run(cls, model: Any, config: Any, device: torch.device, param_groups: Iterable[Any],
                uses_embeddings: bool, step_parts: Iterable[str] | None = None) -> Placement:
        """The placement of a run whose method made `param_groups`; its `text_cache_off_reason`
        says why the text encoder outputs are not cached (None: they are)."""
        from ..data.text_cache import text_cache_problem  # noqa: PLC0415

        trained = {g.model_part for g in param_groups if g.trains}
        # the trainer's test (its trained_text_parts); a part holding any weight that takes gradients stays too
        reason = text_cache_problem(latent_caching=config.latent_caching, concepts=config.concepts,
                                    trained_text_parts={p for p in trained if p in model.text_encoder_names},
                                    uses_embeddings=uses_embeddings, reads_images=model.control_image)
        trained |= {part for part, module in model.parts.items() if any(p.requires_grad for p in module.parameters())}
        placement = cls(model, device, *parked_parts(model, config, device, trained, reason, step_parts))
        placement.text_cache_off_reason = reason
        return placement

    @property
    def parks_text_encoders(self) -> bool:
        return any(part in self.model.text_encoder_names for part in self.parked)

    def message(self) -> str:
        """The log's line: what waits in RAM, what stays on the device and why ('' when nothing to say)."""
        if not self.parked and not self.kept:
            return ""
        text = []
        if self.parked:
            text.append(f"{', '.join(self.parked)} wait in RAM while the training steps run (on {self.device} "
                        "only for samples)")
        if self.kept:
            text.append(f"kept on {self.device}: " + "; ".join(self.kept))
        return "part placement: " + "; ".join(text)

    def for_samples(self) -> list[str]:
        """The parked parts that wait on the device while samples are made: all but the text
        encoders, which each sample brings for its encoding alone."""
        return [part for part in self.parked if part not in self.model.text_encoder_names]

    def _to(self, parts: Iterable[str], device: torch.device) -> None:
        for part in parts:
            if self.where.get(part) != device:
                self.move(self.model.parts[part], device)
                self.where[part] = device

    def park(self) -> None:
        """The parked parts to RAM, for the training steps."""
        self._to(self.parked, HOST)

    @contextlib.contextmanager
    def using(self, parts: Iterable[str] | None = None) -> Iterator[None]:
        """The parked parts among `parts` (all when None) on the train device for the block, then
        back in RAM (also when the block fails)."""
        wanted = [p for p in (self.parked if parts is None else parts) if p in self.parked]
        moved = [p for p in wanted if self.where.get(p, self.device) != self.device]
        self._to(moved, self.device)
        try:
            yield
        finally:
            self._to(moved, HOST)


def fill_text_cache(cache: Any, encode_fn: Callable[..., Any], sources: Iterable[tuple[Any, Any]]) -> int:
    """Every text the (step, dataset) pairs can give a training step, in `cache` (the encoders
    are still on the train device); returns how many were encoded now."""
    texts: dict[str, str | dict[str, str]] = {}
    for step, dataset in sources:
        for caption in dataset.captions():
            for text in step.text_variants(caption):
                texts[repr(text)] = text
    return cache.fill(texts.values(), encode_fn)
