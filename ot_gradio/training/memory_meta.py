"""The memory planner for a model built on the meta device at full size (no weights, nothing
downloaded): what a run of `config` would take on its train device, e.g. a GPU this machine does
not have. bench/memory_presets.py builds the published models and plans OneTrainer's presets.

The run is set up as `memory_plan.estimate` sets up a loaded one (the config's weight data types
on the train device, `configure_model` with its quantization, the method's layers, layer
offloading, gradient checkpointing as the config says), with three differences a meta model
needs:
- bitsandbytes quantizes a layer when it is moved to the GPU; here its weights are given the
  stored layout straight away (`pack_bitsandbytes`: NF4 two weights per byte, INT8 one);
- layer offloading is counted, not installed (`offloaded_bytes_planned`: the blocks it would move);
  the parts the trainer keeps in RAM while the steps run (placement.py) are decided as a run
  on the train device decides them and counted there, not on the card;
- frozen text encoders give the probe CPU zeros of their outputs' shapes (the planner encodes
  the probe's captions before the step, and the families' code around the encoders reads the
  prompt lengths, which meta tensors have not): CLIP runs on meta for the shapes; T5 and language
  models, whose attention masks cannot be built on meta, are not run (`_shape_only_text_encoders`). Their activations
  are freed before the denoiser's forward, so the step's peak does not hold them either way.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..config.enums import DataType, GradientCheckpointing
from ..config.families import family_info
from ..models.common import cast_part
from .device import Precision
from .fp16_fallback import part_load_dtypes
from .memory_plan import MemoryPlan, plan_run
from .memory_probe import quantized_on_meta

META = torch.device("meta")


def pack_bitsandbytes(module: nn.Module) -> int:
    """Give the bitsandbytes layers of `module` the stored size of their weights (what moving them
    to a GPU does: NF4 packs two 4-bit weights in a byte, with one 8-bit scale per 64 weights;
    INT8 keeps one byte per weight and a float32 scale per row). Returns how many were packed."""
    packed = 0
    for layer in module.modules():
        kind = type(layer).__name__
        weight = getattr(layer, "weight", None)
        if kind not in ("Linear4bit", "Linear8bitLt") or weight is None or weight.dtype in (torch.uint8, torch.int8):
            continue
        n = weight.numel()
        if kind == "Linear4bit":  # with bitsandbytes' default compress_statistics: the scales in 8 bits, 256 to a float32
            weight.data = torch.empty((n + 1) // 2, 1, dtype=torch.uint8, device=weight.device)
            layer.register_buffer("meta_absmax", torch.empty(math.ceil(n / 64), dtype=torch.uint8, device=weight.device))
            layer.register_buffer("meta_absmax2", torch.empty(math.ceil(n / 64 / 256), device=weight.device))
        else:
            weight.data = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
            layer.register_buffer("meta_scale", torch.empty(weight.shape[0], device=weight.device))
        packed += 1
    return packed


def offloaded_bytes_planned(model: Any, config: Any, parked: Any = ()) -> int:
    """Bytes of the weights layer offloading would keep in RAM (offload.install_offloading picks
    the last `offload_fraction` of each part's blocks; their frozen weights, and with the fused
    back pass their trained ones too), counted without moving anything; not those of the
    `parked` parts, which wait in RAM whole while the steps run."""
    from .offload import find_blocks, offloads_trained_weights  # noqa: PLC0415

    trained = offloads_trained_weights(config)
    total = 0
    for part in (model.denoiser, *model.text_encoder_names):
        part_config = getattr(config, part, None)
        if part not in model.parts or part in parked or part_config is None or part_config.offload_fraction <= 0:
            continue
        blocks = find_blocks(model.parts[part])
        count = min(len(blocks), math.ceil(part_config.offload_fraction * len(blocks)))
        for block in blocks[len(blocks) - count:]:
            tensors = [*block.parameters(), *block.buffers()]
            if trained or any(not t.requires_grad for t in block.parameters()):
                total += sum(t.numel() * t.element_size() for t in tensors if trained or not t.requires_grad)
    return total


class _ShapeOnly:
    """A frozen language model's forward for the planner: its hidden states as zeros on the
    inputs' device (the CPU, see `_shape_only_text_encoders`), no computation."""

    def __init__(self, width: int, layers: int) -> None:
        self.width, self.layers = width, layers

    def __call__(self, input_ids: torch.Tensor | None = None, **kwargs: Any) -> Any:  # noqa: ARG002
        from transformers.modeling_outputs import BaseModelOutputWithPast  # noqa: PLC0415

        b, n = input_ids.shape
        hidden = torch.zeros(b, n, self.width, dtype=torch.bfloat16, device=input_ids.device)
        return BaseModelOutputWithPast(last_hidden_state=hidden, hidden_states=(hidden,) * (self.layers + 1))


def _cpu_zeros(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return torch.zeros(value.shape, dtype=value.dtype)
    if isinstance(value, tuple):
        return tuple(_cpu_zeros(v) for v in value)
    return value


class _OnMeta:
    """A frozen encoder that runs on meta tensors (CLIP): run there, its outputs given back as
    CPU zeros of their shapes and types (in the output's own format)."""

    def __init__(self, forward: Any) -> None:
        self.forward = forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        meta = lambda v: v.to(META) if isinstance(v, torch.Tensor) else v  # noqa: E731
        out = self.forward(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
        if isinstance(out, dict):  # transformers' ModelOutput
            for key in list(out.keys()):
                out[key] = _cpu_zeros(out[key])
            return out
        return _cpu_zeros(out)


@contextmanager
def _shape_only_text_encoders(model: Any, trained: frozenset[str]) -> Iterator[None]:
    """The frozen text encoders give CPU zeros of their outputs' shapes (see the module's notes):
    T5 and language models by `_ShapeOnly`, CLIP runs on meta (`_OnMeta`). The families' code around
    them reads the attention mask's values (prompt lengths), which meta tensors have not: a first,
    empty CPU parameter makes the encoder's device (the first parameter's,
    models.common.module_device) the CPU while it is in place."""
    saved = []
    for part in model.text_encoder_names:
        module = model.parts.get(part)
        if part in trained or module is None:
            continue
        config = getattr(module, "config", None)
        text = getattr(config, "text_config", config)
        kind = getattr(text, "model_type", "")
        saved.append((module, module._parameters))
        first = next(module.parameters())
        module._parameters = OrderedDict([("planner_device", nn.Parameter(torch.empty(0, dtype=first.dtype), requires_grad=False)),
                                          *module._parameters.items()])
        on_meta = kind == "clip_text_model" or text is None  # T5 with a mask cannot run there either
        module.forward = _OnMeta(module.forward) if on_meta else _ShapeOnly(text.hidden_size, text.num_hidden_layers)
    beside = _beside_text_encoders(model, trained)
    for module in beside:  # LTX-2's connectors: run on meta for the shapes, left where they are (their CPU inputs' device)
        module.to = lambda *_a, _module=module, **_k: _module
        module.forward = _OnMeta(module.forward)
    try:
        yield
    finally:
        for module, parameters in saved:
            del module.forward
            module._parameters = parameters
        for module in beside:
            del module.to, module.forward


def _beside_text_encoders(model: Any, trained: frozenset[str]) -> list[nn.Module]:
    """The modules a family runs on a frozen text encoder's output, on the parts' device (its
    description's extra_params kept on the "device" for a text encoder part: LTX-2's connectors)."""
    info = family_info(getattr(model, "model_type", None)) if getattr(model, "model_type", None) else None
    extra = info.extra_params if info is not None else {}
    return [module for name, (part, _, where) in extra.items()
            if where == "device" and part in model.text_encoder_names and part not in trained
            and isinstance(module := getattr(model, name, None), nn.Module)]


def estimate_on_meta(model: Any, config: Any, free: int) -> tuple[MemoryPlan, bool]:
    """The plan of `config` for `model` (built on the meta device in float32) on a train device
    with `free` bytes, and whether the denoiser checkpoints (ON, or AUTO and the run does not fit
    without it)."""
    from .diffusion import configure_model  # noqa: PLC0415
    from .methods import get_method  # noqa: PLC0415
    from .placement import Placement  # noqa: PLC0415

    target = torch.device(config.train_device)
    precision = Precision(config.train_dtype, target, config.enable_autocast_cache)
    dtypes = part_load_dtypes(config, model, model.parts, target, precision.dtype)
    for part, module in model.parts.items():
        cast_part(module, dtypes[part])  # (what the part keeps in float32 stays there, as in a real load)
    configure_model(model, config, META, precision)
    for part in model.parts:
        if DataType(getattr(config, part).weight_dtype) in (DataType.NFLOAT_4, DataType.INT_8):
            pack_bitsandbytes(model.parts[part])
    method = get_method(config.training_method)
    config = _without_downloads(config)
    groups = method.setup(model, config, META)
    parked = Placement.for_run(model, config, target, groups, method.embeddings is not None,
                               step_parts=method.step_parts).parked
    text = frozenset(g.model_part for g in groups if g.model_part in model.text_encoder_names and g.trains)
    setting = GradientCheckpointing(getattr(config, model.denoiser).gradient_checkpointing)
    with _shape_only_text_encoders(model, text), quantized_on_meta(model.parts.values()):
        plan = plan_run(model, config, META, precision, groups, text, [model.denoiser], measure=(False, True),
                        free_fn=lambda _device: free, parked=parked)
    plan.device = f"{target.type} (planned on meta)"
    plan.offloaded = offloaded_bytes_planned(model, config, parked)
    on = setting == GradientCheckpointing.ON or (setting == GradientCheckpointing.AUTO and not plan.fits(False))
    return plan, on


def _local(name: Any) -> bool:
    return not str(name or "").strip() or Path(str(name)).expanduser().is_file()


def _without_downloads(config: Any) -> Any:
    """`config` with the files a run starts from that download (an address) left out, as none is
    fetched for an estimate: the config's rank stands in for a LoRA's, the embedding's token count
    for an embedding's."""
    update: dict[str, Any] = {}
    if not _local(config.lora_model_name):
        update["lora_model_name"] = ""
    if not _local(config.embedding.model_name):
        update["embedding"] = config.embedding.model_copy(update={"model_name": ""})
    if any(not _local(e.model_name) for e in config.additional_embeddings):
        update["additional_embeddings"] = [e if _local(e.model_name) else e.model_copy(update={"model_name": ""})
                                           for e in config.additional_embeddings]
    return config.model_copy(update=update) if update else config
