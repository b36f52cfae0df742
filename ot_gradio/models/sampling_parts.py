"""The parts of a model around a sample: parked on the sampling device and put back
(`parked_for_sampling`, `SamplingParts.release`), the VAE answering in its caller's type
(`vae_in_callers_dtype`), the denoiser taking its inputs in its own (`denoiser_in_its_dtype`), a
frozen module taking turns with a part on the device (`turns_on_device`, moving bitsandbytes
layers with `move_module`), and the image's size (`generation_size`, `exact_size`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from ot_gradio.models.common import base_module, compute_dtype, map_tensors, module_device, module_dtype


class SamplingParts:
    """The parts of one sample and where each was before it (`homes`); `device`: where it runs."""

    def __init__(self, parts: Mapping[str, torch.nn.Module], homes: Mapping[str, torch.device], device: torch.device):
        self.parts, self.homes, self.device = parts, homes, device

    def release(self, names: Iterable[str], pipe: Any = None) -> list[str]:
        """Parts `names` back where they were before the sample (RAM, for the parts a run keeps
        there) once their work is done, e.g. the text encoders once the prompt is encoded, so that
        the denoiser and the VAE run without them beside (OneTrainer samples one part at a time).
        `pipe`, the diffusers pipeline that runs next, then goes without them (it is given the
        prompt's embeddings): diffusers takes a pipeline's device from its first module in name
        order, which would be a text encoder left in RAM. Returns the parts moved."""
        names = [n for n in names if n in self.parts and self.homes[n] != self.device]
        for name in names:
            self.parts[name].to(self.homes[name])
        if names and pipe is not None:
            pipe.register_modules(**dict.fromkeys(names))
        return names


def floats_in(value: Any, dtype: torch.dtype) -> Any:
    """`value` with its floating tensors in `dtype`: a tensor, a tuple or list of them, a diffusers output
    (its fields set in place) or a distribution object (DiagonalGaussianDistribution: its tensor
    attributes set in place)."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if type(value) in (tuple, list):
        return type(value)(floats_in(v, dtype) for v in value)
    if isinstance(value, Mapping):
        for key in list(value.keys()):
            value[key] = floats_in(value[key], dtype)
        return value
    for key, item in list(vars(value).items()) if hasattr(value, "__dict__") else ():
        if isinstance(item, torch.Tensor) and item.is_floating_point():
            setattr(value, key, item.to(dtype))
    return value


@contextlib.contextmanager
def vae_in_callers_dtype(vae: torch.nn.Module | None) -> Iterator[None]:
    """While the block runs, `vae.decode` and `vae.encode` compute in the VAE's own weight type and
    answer in their caller's: diffusers' pipelines assume one type for every part, handing the VAE
    latents (SD 1.x / 2.x) or a control image (SD 2 depth, Qwen-Image-Edit) in the denoiser's or
    the prompt's type and the encoded image on to the denoiser, outside autocast; the presets (ours
    and OneTrainer's) load a half-precision denoiser beside a FLOAT_32 VAE on a GPU (a CPU loads
    both in float32, where the types always agree)."""
    names = [n for n in ("decode", "encode") if vae is not None and callable(getattr(vae, n, None))
             and not getattr(getattr(vae, n), "_in_callers_dtype", False)]  # (not twice: a sample inside a sample)
    if not names:
        yield
        return

    def in_callers_dtype(original):
        def run(value, *args, **kwargs):
            dtype = module_dtype(vae)  # (at the call: a family may cast its VAE for an encoding of its own)
            caller = value.dtype if isinstance(value, torch.Tensor) and value.is_floating_point() else dtype
            out = original(value.to(dtype) if caller != dtype else value, *args, **kwargs)
            return floats_in(out, caller) if caller != dtype else out

        run._in_callers_dtype = True
        return run

    before = {n: vars(vae)[n] for n in names if n in vars(vae)}  # a wrapper of the instance's own (the fp16 fallback's)
    for name in names:
        setattr(vae, name, in_callers_dtype(getattr(vae, name)))
    try:
        yield
    finally:
        for name in names:
            if name in before:
                setattr(vae, name, before[name])
            else:
                delattr(vae, name)


_HALF = (torch.float16, torch.bfloat16)


def _cast(value: torch.Tensor) -> bool:
    """Whether a denoiser input is one to bring to its type: latents and prompt states (floating,
    two or more dimensions), and timesteps or guidance in a half type (a pipeline casts them to the
    other transformer's type: Ideogram 4's); float32 timesteps keep their precision."""
    return value.is_floating_point() and (value.ndim >= 2 or value.dtype in _HALF)


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors to bring to the denoiser's type in `value` (in lists, tuples and dicts too)."""
    if isinstance(value, torch.Tensor):
        if _cast(value):
            yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


@contextlib.contextmanager
def denoiser_in_its_dtype(denoiser: torch.nn.Module) -> Iterator[None]:
    """While the block runs, the inputs that reach `denoiser` in another type than its compute type
    (`_cast`: latents, prompt states, half-type timesteps) come in that type, and its answer goes back
    in the first latents' or states' type: a pipeline hands the denoiser the prompt encoder's output
    as it is and the latents in a type of its choosing (LTX-2's: the Gemma states' type, its
    connectors' output in theirs), outside autocast; a run in float16 loads quantized or
    fp16-unstable parts beside it in other types. Inputs already in its type pass as they are (no
    hook does anything then)."""
    module, callers = base_module(denoiser), []

    def before(_module, args, kwargs):
        dtype = compute_dtype(module)
        tensors = [*_tensors(args), *_tensors(kwargs)]
        if all(t.dtype == dtype for t in tensors):
            callers.append(None)
            return None
        callers.append(next((t.dtype for t in tensors if t.ndim >= 2), dtype))

        def cast(t: torch.Tensor) -> torch.Tensor:
            return t.to(dtype) if _cast(t) else t

        return map_tensors(args, cast), map_tensors(kwargs, cast)

    def after(_module, _args, _kwargs, output):
        caller = callers.pop()
        return floats_in(output, caller) if caller is not None else None

    handles = [module.register_forward_pre_hook(before, with_kwargs=True),
               module.register_forward_hook(after, with_kwargs=True)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def parked_for_sampling(parts: Mapping[str, torch.nn.Module], device: torch.device | str | None, main: str) -> Iterator[SamplingParts]:
    """Every part in eval mode on the sampling device (`device`, or the `main` part's), for a
    sample in the middle of training, the VAE answering in its caller's type and the `main` part
    (the denoiser) taking its inputs in its own; each part's device and train mode are put back
    afterwards, also when sampling fails. Yields the SamplingParts (its `device`: the sampling device)."""
    was_training = {name: m.training for name, m in parts.items()}
    devices = {name: module_device(m) for name, m in parts.items()}
    target = torch.device(device) if device is not None else devices[main]
    try:
        for m in parts.values():
            m.eval()
            m.to(target)
        with vae_in_callers_dtype(parts.get("vae")), denoiser_in_its_dtype(parts[main]):
            yield SamplingParts(parts, devices, target)
    finally:
        for name, m in parts.items():
            m.to(devices[name])
            m.train(was_training[name])


def int8_states_follow(module: torch.nn.Module, device: torch.device) -> None:
    """bitsandbytes' 8-bit layers hold their int8 weight and its row scales beside the parameter
    (`weight.CB` / `weight.SCB` until the first forward, the layer's `state` after it), and a
    module's `.to` moves only the parameter's data (Linear8bitLt.to, which moves the state, runs
    only when called on the layer itself): point them at the moved weight and move the scales."""
    for layer in module.modules():
        if type(layer).__name__ != "Linear8bitLt":
            continue
        weight, state = layer.weight, layer.state
        if getattr(weight, "CB", None) is not None:
            weight.CB = weight.data
        if getattr(weight, "SCB", None) is not None:
            weight.SCB = weight.SCB.to(device)
        if state.CB is not None:
            state.CB = weight.data
        if state.SCB is not None:
            state.SCB = state.SCB.to(device)


def move_module(module: torch.nn.Module, device: torch.device) -> None:
    """`module` to `device`, bitsandbytes' quantized layers with it: a 4-bit weight's quantization
    state moves with its parameter, an 8-bit layer's int8 weight and row scales are made to follow
    (`int8_states_follow`)."""
    module.to(device)
    int8_states_follow(module, device)


@contextlib.contextmanager
def turns_on_device(active: torch.nn.Module, waiting: torch.nn.Module, target: torch.device) -> Iterator[None]:
    """`active` (a part on the sampling device) and `waiting` (a frozen module kept elsewhere,
    its home: where it is now) take turns on `target` during a sample: before either's forward it
    comes to `target` and the other goes to the home, so the device holds one of them, not both
    (Wan 2.2 A14B's experts, Ideogram 4's two transformers). Moves go through `move_module`, so a
    bitsandbytes-quantized module comes quantized. Afterwards `waiting` is home again; `active` is
    where its last turn left it (parked_for_sampling puts parts back)."""
    home = module_device(waiting)
    pair = (active, waiting)

    def take_turn(module, _args):
        for other in pair:
            if other is not module:
                move_module(other, home)
        move_module(module, target)

    hooks = [module.register_forward_pre_hook(take_turn) for module in pair]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()
        move_module(waiting, home)


def generation_size(height: int, width: int, step: int) -> tuple[int, int]:
    """(height, width) rounded up to a multiple of `step` (what the latent grid needs)."""
    return -(-int(height) // step) * step, -(-int(width) // step) * step


def exact_size(image, width: int, height: int):
    """The image at exactly the asked size (generated at `generation_size`, resized back if that differs)."""
    return image if image.size == (int(width), int(height)) else image.resize((int(width), int(height)))


@contextlib.contextmanager
def sample_image(model, given, needed: str) -> Iterator[None]:
    """`model._sample_image` for the sample drawn inside: `given` (a path to an image or a clip,
    whose first frame is taken, or a PIL image), blank: `model.default_control_image` (the
    trainer sets the first training pair's / clip's); a ValueError saying `needed` without either."""
    from pathlib import Path

    from ot_gradio.data.video import still_image

    source = given if given not in (None, "") else model.default_control_image
    if source is None:
        raise ValueError(needed)
    model._sample_image = still_image(Path(source)) if isinstance(source, (str, Path)) else source.convert("RGB")
    try:
        yield
    finally:
        model._sample_image = None


def start_image_input(model, height: int, width: int) -> dict:
    """{"image": `model._sample_image` cut to the sample's aspect ratio and scaled to its size}
    (an image-to-video pipeline would stretch it); {} where the sample has none."""
    from PIL import Image, ImageOps

    if model._sample_image is None:
        return {}
    return {"image": ImageOps.fit(model._sample_image, (int(width), int(height)), Image.Resampling.LANCZOS)}
