"""Small pieces every model family shares: the load error, dtype names, the parts of a loaded
model (under peft wrappers, without adapters), the diffusers-folder and safetensors writers, the
parts parked for sampling, and the attention, autocast and quantization guards several families
use."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import torch

from ot_gradio.config.civitai import civitai_address
from ot_gradio.config.enums import DataType
from ot_gradio.config.hub_files import EXAMPLE as HUB_FILE_EXAMPLE
from ot_gradio.config.hub_files import hub_file_address, hub_repo_address, is_web_address
from ot_gradio.fsutil import atomic_write, atomic_write_dir
from ot_gradio.models.errors import ModelLoadError  # noqa: F401  (re-exported: every family raises it)

SINGLE_FILE_SUFFIXES = (".safetensors", ".ckpt")
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # `org/name` on the hub
# layer filter presets of a decoder-only language model used as text encoder (Qwen3, Gemma 2)
QWEN_PRESETS = {"full": [], "attn-mlp": ["self_attn", "mlp"], "attn-only": ["self_attn"], "blocks": ["layers."]}


_DTYPES = {
    DataType.FLOAT_32: torch.float32,
    DataType.FLOAT_16: torch.float16,
    DataType.BFLOAT_16: torch.bfloat16,
}


def torch_dtype(dtype: DataType | str | torch.dtype | None, default: torch.dtype = torch.float32) -> torch.dtype:
    """The torch dtype for a saved or loaded weight; NONE and None mean `default`."""
    if dtype is None:
        return default
    if isinstance(dtype, torch.dtype):
        return dtype
    dtype = DataType(dtype)
    if dtype == DataType.NONE:
        return default
    if dtype not in _DTYPES:
        raise ValueError(f"Weights cannot be stored as {dtype}; use one of {', '.join(d.value for d in _DTYPES)}.")
    return _DTYPES[dtype]


def part_dtypes(dtypes: Mapping[str, torch.dtype | DataType | str | None] | None, parts) -> dict[str, torch.dtype]:
    """The dtype of each of `parts` (the family's part names) from a load's `dtypes` (float32 for
    a part not named); a name in `dtypes` that is not a part is a ValueError listing the parts."""
    parts = list(parts)
    dtypes = dict(dtypes or {})
    unknown = set(dtypes) - set(parts)
    if unknown:
        raise ValueError(f"Unknown model part(s) {sorted(unknown)} in dtypes; expected {', '.join(parts)}.")
    return {part: torch_dtype(dtypes.get(part)) for part in parts}


def cast_state_dict(state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    """Float tensors cast to `dtype` (copies, so the live model keeps its own dtype); others untouched."""
    out = {}
    for key, value in state_dict.items():
        value = value.detach()
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)
        out[key] = value.cpu().contiguous()
    return out


def map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`value` with each tensor `t` in it (in lists, tuples and dicts too) replaced by `fn(t)`."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if type(value) in (list, tuple):
        return type(value)(map_tensors(v, fn) for v in value)
    if type(value) is dict:
        return {k: map_tensors(v, fn) for k, v in value.items()}
    return value


# ---------------------------------------------------------------- modules of a loaded family


def kept_in_float32(module: torch.nn.Module) -> Callable[[str], bool]:
    """Whether a parameter or buffer name of `module` is in one of the modules its class keeps in
    float32 (diffusers' and transformers' `_keep_in_fp32_modules`: Wan's rotary tables, time
    embedder and norms), matched by name component as diffusers' loader matches them."""
    keep = tuple(getattr(base_module(module), "_keep_in_fp32_modules", None) or ())
    return lambda name: bool(keep) and any(k in name.split(".") for k in keep)


def module_dtype(module: torch.nn.Module) -> torch.dtype:
    """The type of a part's weights: its first parameter's, past the modules it keeps in float32
    (as diffusers' `dtype` reads it)."""
    kept = kept_in_float32(module)
    first = None
    for name, p in module.named_parameters():
        if not kept(name):
            return p.dtype
        first = first or p.dtype
    return first if first is not None else next(module.parameters()).dtype


def compute_dtype(module: torch.nn.Module) -> torch.dtype:
    """The dtype a part computes in: its first floating-point weight that is not a stored
    8-bit one (NF4/INT8 layers hold uint8/int8 weights, FLOAT_8 float8; their inputs are not), past
    the modules it keeps in float32 (`kept_in_float32`)."""
    stored = (torch.float8_e4m3fn, torch.float8_e5m2)
    kept = kept_in_float32(module)
    for name, p in module.named_parameters():
        if p.is_floating_point() and p.dtype not in stored and not kept(name):
            return p.dtype
    return torch.float32


def module_device(module: torch.nn.Module) -> torch.device:
    return next(module.parameters()).device


def input_dtype(module: torch.nn.Module) -> torch.dtype:
    """The type a part's floating inputs are given in when it trains: the autocast's where one is
    on for its device (OneTrainer gives them in the train data type), else its compute type. (Under
    a float16 autocast, bfloat16 weights' type would make the denoiser concatenate bfloat16 tensors,
    which autocast refuses: OneTrainer's SDXL, Chroma and Z-Image fine-tune presets in a FLOAT_16
    run.)"""
    return autocast_dtype(module_device(module).type) or compute_dtype(module)


def autocast_dtype(kind: str) -> torch.dtype | None:
    """The type autocast computes in on devices of `kind` where one is on, else None (always on
    "meta", which torch has no autocast for: the memory planner's probe). Whether a device type
    has autocast is asked once per type (`_AUTOCAST_AVAILABLE`): a compiled step reads this in
    every LoRA layer, and torch 2.11's dynamo cannot trace `torch.amp.is_autocast_available` (a
    graph break in each layer, whose resumed halves then recompiled per layer shape until dynamo's
    recompile limit sent the UNet back to eager on an H200)."""
    available = _AUTOCAST_AVAILABLE.get(kind)
    if available is None:
        available = _AUTOCAST_AVAILABLE[kind] = torch.amp.is_autocast_available(kind)
    if available and torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return None


# device type -> whether torch has autocast for it (asked before any step is compiled)
_AUTOCAST_AVAILABLE: dict[str, bool] = {kind: torch.amp.is_autocast_available(kind) for kind in ("cpu", "cuda", "meta")}


def cast_part(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """`module`'s floating weights and buffers cast to `dtype`, but for those its class keeps in
    float32 (`kept_in_float32`), which stay in float32 as the loaders keep them: diffusers' for any
    type, transformers' in float16."""
    kept = kept_in_float32(module)
    module.to(dtype=dtype)
    if type(base_module(module)).__module__.startswith("diffusers") or dtype == torch.float16:
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if tensor.is_floating_point() and kept(name):
                tensor.data = tensor.data.float()


def cast_parts(parts: Mapping[str, torch.nn.Module], dtypes: Mapping[str, torch.dtype]) -> None:
    """Each part cast to its dtype in `dtypes` (`cast_part`), unless its floating-point weights are
    in it already (a GGUF transformer's quantized weights are bytes, its other weights loaded in
    its dtype; the weights it keeps in float32 are not looked at: Wan's first parameter is one)."""
    for part, module in parts.items():
        kept = kept_in_float32(module)
        floating = next((p.dtype for name, p in module.named_parameters() if p.is_floating_point() and not kept(name)), dtypes[part])
        if floating != dtypes[part]:
            cast_part(module, dtypes[part])


def base_module(module: torch.nn.Module) -> torch.nn.Module:
    """The model under a peft `PeftModel` wrapper (injected adapter layers stay in it)."""
    return module.get_base_model() if hasattr(module, "get_base_model") else module


def vl_language_model_presets(n_layers: int) -> dict[str, list[str]]:
    """Layer presets of a vision-language text encoder (Qwen2.5-VL, Qwen3-VL): its language
    model's layers only (the vision tower and any lm_head are never run for prompts)."""
    layers = [f"language_model.layers.{i}." for i in range(n_layers)]
    return {
        "full": ["language_model.layers."], "attn-mlp": ["language_model.layers."],
        "attn-only": [f"{layer}self_attn." for layer in layers], "blocks": ["language_model.layers."],
    }


def language_model_config(encoder: torch.nn.Module):
    """The text config of a vision-language encoder (the model's own config for a plain LLM)."""
    config = base_module(encoder).config
    return getattr(config, "text_config", config)


def _wan_vae_stats(vae: torch.nn.Module, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A Wan-style VAE's per-channel `latents_mean` / `latents_std`, shaped to broadcast over
    (B, C, F, H, W) latents like `like`, in its device and dtype."""
    config = base_module(vae).config
    shape = (1, int(config.z_dim), 1, 1, 1)
    mean = torch.tensor(config.latents_mean, device=like.device, dtype=like.dtype).view(shape)
    std = torch.tensor(config.latents_std, device=like.device, dtype=like.dtype).view(shape)
    return mean, std


@torch.no_grad()
def wan_vae_encode(vae: torch.nn.Module, pixels: torch.Tensor, *, sample: bool = True,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """Latents (B, C, F', h, w) of a Wan-style VAE (Wan, Qwen-Image) for pixels (B, 3, F, H, W)
    in [-1, 1], normalised per channel with its `latents_mean` / `latents_std`: a sample of the
    distribution by default (as OneTrainer), its mean with `sample=False`."""
    dist = vae.encode(pixels.to(module_device(vae), module_dtype(vae))).latent_dist
    latents = dist.sample(generator) if sample else dist.mode()
    mean, std = _wan_vae_stats(vae, latents)
    return (latents - mean) / std


@torch.no_grad()
def wan_vae_decode(vae: torch.nn.Module, latents: torch.Tensor) -> torch.Tensor:
    """Pixels (B, 3, F, H, W) in [-1, 1] for latents `wan_vae_encode` normalised."""
    latents = latents.to(module_device(vae), module_dtype(vae))
    mean, std = _wan_vae_stats(vae, latents)
    return vae.decode(latents * std + mean).sample


def tied_aliases(state_dict: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """alias key -> the first key holding the same tensor (tied weights, e.g. T5's `shared.weight`
    and `encoder.embed_tokens.weight`). safetensors refuses to write shared tensors, and the
    model re-ties them on load, so only the first key is written."""
    first: dict[tuple[int, tuple[int, ...], tuple[int, ...]], str] = {}
    aliases: dict[str, str] = {}
    for key, tensor in state_dict.items():
        if tensor.numel() == 0:
            continue
        ident = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
        if ident in first:
            aliases[key] = first[ident]
        else:
            first[ident] = key
    return aliases


def without_aliases(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    aliases = tied_aliases(state_dict)
    return {k: v for k, v in state_dict.items() if k not in aliases}


def plain_state_dict(module: torch.nn.Module, name: str) -> dict[str, torch.Tensor]:
    """The weights of a part without adapters and without tied aliases, its quantized layers
    (FLOAT_8 / INT_8 / NFLOAT_4 / INT_W8A8 / FLOAT_W8A8) as plain float32 weights; an error if LoRA layers are still in it."""
    root = base_module(module)
    state_dict = root.state_dict()
    if any(".base_layer." in k or ".lora_" in k for k in state_dict):
        raise ValueError(f"The {name} still has LoRA layers in it; merge or remove them before saving the full model.")
    return without_aliases(dequantized(root, state_dict))


def _dense_weight(layer: torch.nn.Module) -> torch.Tensor | None:
    """A quantized Linear layer's weight as float32 (None: the layer is not quantized), with the
    low-rank part SVDQuant keeps beside it (its `svd_up` @ `svd_down`, training/svd_quant.py) added."""
    weight = _dequantized_weight(layer)
    up, down = getattr(layer, "svd_up", None), getattr(layer, "svd_down", None)
    if weight is None or not isinstance(up, torch.Tensor) or not isinstance(down, torch.Tensor):
        return weight
    return weight + up.float() @ down.float()


def _dequantized_weight(layer: torch.nn.Module) -> torch.Tensor | None:
    if callable(getattr(layer, "dequantized_weight", None)):  # our FLOAT_8 / W8A8 layers (training/quantize.py)
        return layer.dequantized_weight(torch.float32)
    kind = type(layer).__name__
    weight = getattr(layer, "weight", None)
    if kind == "Linear8bitLt" and weight is not None and weight.dtype == torch.int8:
        scale = getattr(weight, "SCB", None)
        if scale is None:
            scale = layer.state.SCB
        return weight.data.float() * scale.float().unsqueeze(1) / 127.0
    if kind == "Linear4bit" and getattr(weight, "quant_state", None) is not None:
        import bitsandbytes.functional as bnbf

        return bnbf.dequantize_4bit(weight.data, weight.quant_state).float()
    return None


def float_state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """`module.state_dict()` with its quantized layers as float32 weights (`dequantized`)."""
    return dequantized(module, module.state_dict())


def dequantized(root: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state_dict` of `root` with each quantized Linear layer's entries (its 8-bit or packed
    4-bit weight and the scales beside it) replaced by the float32 weight they stand for: the
    layout the model class loads. A part quantized for training (its weight_dtype) is saved whole."""
    out = dict(state_dict)
    for prefix, layer in root.named_modules():
        weight = _dense_weight(layer)
        if weight is None:
            continue
        p = f"{prefix}." if prefix else ""
        for key in [k for k in out if k.startswith(p) and k != p + "bias"]:
            del out[key]
        out[p + "weight"] = weight.detach()
    return out


def weights_fingerprint(module: torch.nn.Module, extra: str = "") -> str:
    """Identity of a module for caches: its config, and the type and first values of every
    tensor, so a different model (or other weights under the same name) never reuses cached
    outputs, nor the same weights in another type: a float16 VAE's latents differ from its float32
    twin's (SDXL's own VAE makes NaN in float16), though a float16 file reads the same in both."""
    h = hashlib.sha256(extra.encode())
    config = getattr(module, "config", None)
    if config is not None:
        h.update(json.dumps(dict(config), sort_keys=True, default=str).encode())
    with torch.no_grad():
        for name, tensor in sorted(base_module(module).state_dict().items()):
            h.update(f"{name}:{tensor.dtype}".encode())
            h.update(tensor.detach().flatten()[:256].float().cpu().numpy().tobytes())
    return h.hexdigest()[:20]


def save_safetensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
    """Temp file in the same folder, fsync, rename: a crash never leaves a half-written file."""
    from safetensors.torch import save_file

    atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))


class FullPrecisionLinear(torch.nn.Linear):
    """A Linear layer the quantizer leaves alone (training/quantize.py converts plain nn.Linear
    only): Z-Image's timestep embedder casts its input to its first weight's dtype, which would
    be float8 (diffusers lists t_embedder and cap_embedder as precision-sensitive)."""


def keep_embedders_unquantized(transformer: torch.nn.Module) -> None:
    """The layers under diffusers' `_skip_layerwise_casting_patterns` (t_embedder, cap_embedder:
    under 0.1% of the weights) stay in the compute type when the transformer is FLOAT_8 / INT_8 /
    NFLOAT_4, as OneTrainer's Z-Image presets quantize the main blocks only."""
    model = base_module(transformer)
    patterns = tuple(getattr(model, "_skip_layerwise_casting_patterns", None) or ("t_embedder", "cap_embedder"))
    for name, child in model.named_modules():
        if type(child) is torch.nn.Linear and name.split(".")[0] in patterns:
            child.__class__ = FullPrecisionLinear


def save_diffusers_folder(
    directory: str | os.PathLike,
    parts: Mapping[str, torch.nn.Module],
    dtype: DataType | torch.dtype | None,
    write_rest: Callable[[Path], None],
) -> Path:
    """A diffusers folder: each part in its subfolder (diffusers models as config +
    `diffusion_pytorch_model.safetensors`, transformers models as config with the saved dtype +
    `model.safetensors`), then `write_rest(folder)` for tokenizers, scheduler and
    `model_index.json`. Weights are cast copy by copy, so the live model keeps its dtype; the
    folder is written next to `directory` and swapped in atomically."""
    from safetensors.torch import save_file
    from transformers import PreTrainedModel

    dt = torch_dtype(dtype)
    state = {name: cast_state_dict(plain_state_dict(module, name), dt) for name, module in parts.items()}

    def write(tmp: Path) -> None:
        for name, module in parts.items():
            module = base_module(module)
            folder = tmp / name
            if isinstance(module, PreTrainedModel):
                config = copy.deepcopy(module.config)
                config.dtype = str(dt).removeprefix("torch.")
                config.save_pretrained(folder)
                save_file(state[name], str(folder / "model.safetensors"), metadata={"format": "pt"})
            else:  # a diffusers model
                folder.mkdir()
                module.save_config(folder)
                save_file(state[name], str(folder / "diffusion_pytorch_model.safetensors"), metadata={"format": "pt"})
        write_rest(tmp)

    return atomic_write_dir(directory, write)


def conditioning_image_latents(model: Any, batch: Any, blank: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:
    """An inpainting family's conditioning-image latents [B, C, h, w]: a sample's `-condlabel`
    image where it has one (custom_conditioning_image, `batch.custom_conditioning`), else its
    masked image, `blank` where its latent mask is all white (`whole`, bool [B]); cached
    (`batch.conditioning_latents`) or encoded now from `batch.pixels` / `batch.condlabel_pixels`."""
    device = blank.device
    custom = getattr(batch, "custom_conditioning", None)
    custom = torch.zeros_like(whole) if custom is None else custom.to(whole.device)
    use_blank = whole & ~custom
    # on meta tensors (the memory planner's probe) the masks cannot be read: the masked path holds more
    if use_blank.device.type != "meta" and bool(use_blank.all()):
        return blank
    latents = getattr(batch, "conditioning_latents", None)
    if latents is None:
        pixels, mask = getattr(batch, "pixels", None), getattr(batch, "mask", None)
        if pixels is None:
            raise ValueError("an inpainting step has masks but neither cached masked-image latents nor pixels; "
                             "turn latent caching off and on again to rebuild the cache")
        condlabel = getattr(batch, "condlabel_pixels", None)
        if condlabel is not None:  # those samples' own image, with nothing masked
            rows = custom.to(pixels.device)[:, None, None, None]
            pixels = torch.where(rows, condlabel.to(pixels.device, pixels.dtype), pixels)
            mask = torch.ones_like(pixels[:, :1]) if mask is None else mask.to(pixels.device, torch.float32)
            mask = torch.where(rows, torch.zeros_like(mask), mask)
        latents = model.encode_conditioning(pixels, mask)
    return torch.where(use_blank.to(device)[:, None, None, None], blank, latents.to(device, torch.float32))


def first_frame_conditioning(model: Any, batch: Any, stand_in: torch.Tensor) -> torch.Tensor:
    """An image-to-video family's first-frame latents: cached (`batch.conditioning_latents`), else
    encoded now from `batch.pixels` by `model.encode_conditioning`; without either (the memory
    planner's probe) `stand_in`."""
    cached = getattr(batch, "conditioning_latents", None)
    if cached is not None:
        return cached
    pixels = getattr(batch, "pixels", None)
    return stand_in if pixels is None else model.encode_conditioning(pixels)


def inpainting_images(height: int, width: int, image=None, mask=None) -> dict:
    """The inpainting pipelines' `image`, `mask_image` and `strength` for a sample: the image to
    inpaint and its mask (white = repaint), as PIL images or file paths, resized to the sample's
    size; neither = repaint a blank image entirely (text-to-image, as OneTrainer samples
    inpainting models without a base image). The mask reads as training reads one: a transparent
    pixel is black (kept)."""
    from PIL import Image  # noqa: PLC0415

    from ot_gradio.data.images import load_mask, load_rgb, to_mask, to_rgb  # noqa: PLC0415

    if (image is None) != (mask is None):
        raise ValueError("an inpainting sample needs both an image and a mask (white = repaint), or neither")
    if image is None:
        return {"image": Image.new("RGB", (width, height)), "mask_image": Image.new("L", (width, height), 255), "strength": 1.0}
    loaded = []
    # files as training reads them: turned upright by their EXIF orientation (a phone's photo and the
    # mask painted over it line up), transparency onto white for the image and black for the mask
    for what, value, read, convert in (("base image", image, load_rgb, to_rgb), ("mask", mask, load_mask, to_mask)):
        if isinstance(value, (str, os.PathLike)):
            try:
                value = read(Path(value).expanduser())
            except (OSError, ValueError) as err:
                raise ValueError(f"the sample's {what} {value} cannot be read ({err})") from None
        loaded.append(convert(value).resize((width, height)))
    return {"image": loaded[0], "mask_image": loaded[1], "strength": 1.0}


def config_keywords(hub: Mapping) -> dict:
    """The loading keywords (`hub`) that reading a config file takes: where the hub cache is, the
    token, offline or not, the revision."""
    return {k: v for k, v in dict(hub).items() if k in ("cache_dir", "token", "local_files_only", "revision")}


def part_file(value: str, field: str, *, cache_dir: str | None, offline: bool, token: str | None,
              model_type: str | None = None, kind: str = "model") -> Path:
    """The local file a part's own model name points at (OneTrainer's per-part `model_name`): a
    file, or a Hugging Face file address (https://huggingface.co/<owner>/<repo>/blob/<revision>/<file>,
    as OneTrainer's DeTurbo presets give) downloaded once into the hub cache, or read from it
    offline, or a Civitai model's address (its file, the same way). `kind` "lora" is the file of a
    LoRA to start from or apply, "embedding" of an embedding to continue or use (a Civitai address
    must then be one, for `model_type`). Anything else is a ModelLoadError naming `field` and what to do."""
    value = str(value or "").strip()
    path = Path(value).expanduser()
    if path.is_file():
        return path
    hub = hub_file_address(value)
    if hub is None and civitai_address(value) is not None:
        from .civitai_download import civitai_file  # noqa: PLC0415

        return civitai_file(value, field, cache_dir=cache_dir, offline=offline, model_type=model_type, kind=kind)
    what = {"lora": "LoRA", "embedding": "embedding"}.get(kind)
    if hub is None and is_web_address(value):
        raise ModelLoadError(f"{field}: {value} is a web address but not of a Hugging Face file or a Civitai "
                             f"{what or 'model'}; download the file and give its path instead.")
    if hub is None:
        raise ModelLoadError(f"{field}: {value} does not exist; " + {
            "lora": "give a LoRA .safetensors file, a Hugging Face file address or a Civitai LoRA's address",
            "embedding": "give an embedding .safetensors (or .pt) file, a Hugging Face file address or a Civitai "
                         "embedding's address, or leave it blank for a new embedding"}.get(
            kind, f"give a .safetensors file or a Hugging Face file address ({HUB_FILE_EXAMPLE}), or leave it blank."))
    return hub_file(value, hub, field, cache_dir=cache_dir, offline=offline, token=token)


def lora_file(value: str, field: str, *, cache_dir: str | None, offline: bool, token: str | None,
              model_type: str | None = None) -> Path:
    """The local file of a LoRA to start from or apply (`part_file` of kind "lora")."""
    return part_file(value, field, cache_dir=cache_dir, offline=offline, token=token, model_type=model_type, kind="lora")


def embedding_file(value: str, field: str, *, cache_dir: str | None, offline: bool, token: str | None,
                   model_type: str | None = None) -> Path:
    """The local file of an embedding to continue or use (`part_file` of kind "embedding")."""
    return part_file(value, field, cache_dir=cache_dir, offline=offline, token=token, model_type=model_type, kind="embedding")


def gated_repo(error: BaseException) -> str | None:
    """The hub repo a download was refused for because it is gated (the account has not accepted
    its terms, or no token was given), from `error`'s chain; None for any other failure."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if type(error).__name__ == "GatedRepoError":  # huggingface_hub's, however a loader wrapped it
            path = urlsplit(str(getattr(getattr(error, "response", None), "url", "") or "")).path
            found = re.match(r"/(?:api/models/)?([^/]+/[^/]+)/", path)
            return found[1] if found else ""
        error = error.__cause__ or error.__context__
    return None


def gated_message(repo: str) -> str:
    """What to do about a gated hub repo (`repo` "" when unknown)."""
    page = f"https://huggingface.co/{repo}" if repo else "the model's page on huggingface.co"
    return (f"the Hugging Face repo {repo + ' ' if repo else ''}is gated: signed in on huggingface.co, open {page} and "
            "accept its terms, then give a read token of that account as General → Hugging Face token (if a token is "
            "set, its account has no access to the repo yet)")


def base_model_source(name: str, *, cache_dir: str | None, offline: bool, token: str | None,
                      model_type: str | None = None) -> str:
    """What a family's `load` takes for the base model `name`: `name` itself, or for a Hugging Face
    file address (a single-file checkpoint on the hub, as diffusers' from_single_file takes one)
    the file it downloads to, once, in the hub cache (offline: read from it); for a repo's page
    address (https://huggingface.co/<owner>/<repo>) the repo's id; for a Civitai model's address
    its file, downloaded once (models/civitai_download.py; a version made for another model than
    `model_type` is refused before it downloads)."""
    hub = hub_file_address(name)
    if hub is None and civitai_address(name) is not None:
        from .civitai_download import civitai_file  # noqa: PLC0415

        return str(civitai_file(name.strip(), "base_model_name", cache_dir=cache_dir, offline=offline, model_type=model_type))
    if hub is None:
        return hub_repo_address(name) or name  # a repo's page address: its id
    return str(hub_file(name.strip(), hub, "base_model_name", cache_dir=cache_dir, offline=offline, token=token))


def hub_file(value: str, hub: tuple[str, str, str], field: str, *, cache_dir: str | None, offline: bool, token: str | None) -> Path:
    """The file at the Hugging Face file address `value` ((repo, revision, file): `hub`), from the hub cache."""
    from huggingface_hub import constants, hf_hub_download

    offline = offline or bool(constants.HF_HUB_OFFLINE)
    repo, revision, filename = hub
    try:
        return Path(hf_hub_download(repo, filename, revision=revision, cache_dir=cache_dir, token=token, local_files_only=offline))
    except Exception as e:  # offline and not cached, no network, gated, missing: each ends in the same advice
        if gated_repo(e) is not None:
            raise ModelLoadError(f"{field}: could not download {value}: {gated_message(gated_repo(e) or repo)}.") from e
        if offline:
            raise ModelLoadError(
                f"{field}: {value} is not in the local Hugging Face cache{f' ({cache_dir})' if cache_dir else ''} and offline "
                "mode is on; turn offline mode off to download it once, or download the file and give its path."
            ) from e
        raise ModelLoadError(f"{field}: could not download {value} ({str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}); "
                             "check the address, your network and access token, or download the file and give its path.") from e
