"""The run's `attention_mechanism` on the denoiser's attention layers. Two kinds of layers:

- diffusers' classic processors (SD 1.x / 2.x / SDXL UNets, PixArt, the Würstchen / Cascade
  prior): DEFAULT (the classic processor), SDP (PyTorch's scaled-dot-product attention, the
  default), XFORMERS (the xformers package and a CUDA GPU), FLASH (SDP held to its flash kernel:
  CUDA GPU, half types). `classic_processor` makes them; FLEX does not reach them.
- processors that call diffusers' attention backends (`reaches_attention_backends`: Flux,
  Qwen-Image, Wan, ...): the same names as backends, and FLEX (PyTorch's FlexAttention: a fused
  kernel once the denoiser is compiled, `compile`; without it the whole attention matrix is
  computed). `FlowFamily.set_attention` sets them; a transformer whose processors call PyTorch
  themselves (SD 3, HiDream) takes SDP only.
The config's description of each family (`FamilyInfo.attention`) lists what reaches it, so the
doctor refuses the others before the model loads."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable

import torch

from ot_gradio.models.common import base_module, module_device


def mechanism_name(mechanism) -> str:
    return str(getattr(mechanism, "value", mechanism)).upper()


def keep_cudnn_attention_off(device) -> None:
    """PyTorch's cuDNN attention kernel out of SDP's choice for this process, on a CUDA device.
    On an H200 (torch 2.11, CUDA 13) SDP chose it for a Flux.1
    step in bfloat16 and its backward failed ("mha_graph.execute(...).is_good()" with
    CUDA_LAUNCH_BLOCKING=1; otherwise NaN losses or an illegal memory access a few kernels later),
    a known class of cuDNN attention faults (pytorch/pytorch#134001, #190321). SDP then takes its
    flash or memory-efficient kernel, which compute the same attention (bench/attention_kernel_check.py
    checks each kernel on a box). The flag is process-wide, set by `configure_model` in the training
    process, which is ours (its samples then take the same kernels)."""
    if torch.device(device).type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


def flash_attention_processor():
    """SDP attention that may only use the flash kernel (fails loudly where it cannot)."""
    from diffusers.models.attention_processor import AttnProcessor2_0

    class FlashAttnProcessor(AttnProcessor2_0):
        def __call__(self, *args, **kwargs):
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return super().__call__(*args, **kwargs)

    return FlashAttnProcessor()


def classic_processor(mechanism, where: str) -> Callable[[], object]:
    """What makes one classic processor for `mechanism` on the device type `where`; a ValueError
    naming the field when it cannot run there. On meta (the memory planner's run of a GPU run)
    XFORMERS and FLASH are SDP, whose kernel the planner counts as the fused one (memory_probe.py)."""
    from diffusers.models.attention_processor import AttnProcessor, AttnProcessor2_0, XFormersAttnProcessor

    mechanism = mechanism_name(mechanism)
    on_cuda = where == "cuda"
    if mechanism == "DEFAULT":
        return AttnProcessor
    if mechanism == "SDP" or (where == "meta" and mechanism in ("XFORMERS", "FLASH")):
        return AttnProcessor2_0
    if mechanism == "XFORMERS":
        if importlib.util.find_spec("xformers") is None or not on_cuda:
            raise ValueError("attention_mechanism: XFORMERS needs the xformers package and a CUDA GPU"
                             + ("" if on_cuda else " (training is not on cuda)") + "; use SDP, which saves about as much memory")
        return XFormersAttnProcessor
    if mechanism == "FLASH":
        if not on_cuda:
            raise ValueError("attention_mechanism: FLASH needs a CUDA GPU; use SDP (it picks flash attention itself where it can)")
        return flash_attention_processor
    if mechanism == "FLEX":
        raise ValueError("attention_mechanism: FLEX reaches the transformers whose attention goes through diffusers' attention "
                         "backends (Flux, Qwen-Image, Wan, ...), not this model's classic attention processors; use SDP")
    raise ValueError(f"attention_mechanism: unknown value {mechanism!r}; use SDP, DEFAULT, XFORMERS, FLASH or FLEX")


def set_classic_attention(module: torch.nn.Module, mechanism, device: torch.device | str | None = None) -> None:
    """The attention of a UNet or DiT with diffusers' classic processors (SD, PixArt). `device`:
    where training runs (None: where the module is)."""
    module = base_module(module)
    where = torch.device(device).type if device is not None else module_device(module).type
    make = classic_processor(mechanism, where)
    if mechanism_name(mechanism) == "XFORMERS" and where != "meta":
        module.enable_xformers_memory_efficient_attention()
    else:
        module.set_attn_processor(make())


def reaches_attention_backends(module: torch.nn.Module) -> bool:
    """Does `module`'s attention go through diffusers' attention backends? Its processors either
    hold the backend `set_attention_backend` sets, or call `dispatch_attention_fn` with none, which
    takes the backend it made active (Anima's Cosmos transformer). SD 3's and HiDream's call
    PyTorch themselves."""
    processors = [getattr(m, "processor", None) for m in base_module(module).modules()]
    return any(p is not None and (hasattr(p, "_attention_backend") or _dispatches(type(p))) for p in processors)


def _dispatches(cls: type) -> bool:
    modules = (sys.modules.get(c.__module__) for c in cls.__mro__)
    return any(m is not None and "dispatch_attention_fn" in vars(m) for m in modules)
