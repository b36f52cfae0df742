"""Model conversion: checkpoints between a diffusers folder and a single file (and dtypes), LoRA
files between kohya and diffusers/PEFT keys, and merging a LoRA into a base checkpoint.

Everything goes through the project's own readers and writers (the family classes of
`ot_gradio.models`, `training.lora_format`), so a converted file is exactly what training would
have saved. Each operation is one function in `OPERATIONS`; `run_job` dispatches on
`params["operation"]`. Outputs are written atomically by those writers; an output that would
replace (or sit inside) its input is refused before anything loads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from ot_gradio.tools.jobs import Job, JobError

from .. import jsontext

FORMATS = ("diffusers", "single")
LORA_TARGETS = ("kohya", "diffusers")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_DTYPE_ALIASES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "float_32": "float32", "float_16": "float16",
                  "bfloat_16": "bfloat16"}
# metadata the LoRA writer sets itself for the target format; everything else in a file is kept
_WRITER_METADATA = ("format", "lora_adapter_metadata", "ss_network_module", "ss_network_args", "ss_network_dim",
                    "ss_network_alpha", "ss_base_model_version", "ss_v2", "ss_output_name", "ot_gradio_folded_alpha")
# the SDXL base UNet's layout, for naming kohya SDXL LoRA layers when no base model is given
SDXL_UNET_CONFIG = {
    "sample_size": 128, "layers_per_block": 2, "block_out_channels": [320, 640, 1280], "cross_attention_dim": 2048,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"], "attention_head_dim": [5, 10, 20],
    "transformer_layers_per_block": [1, 2, 10], "use_linear_projection": True, "addition_embed_type": "text_time",
    "addition_embed_type_num_heads": 64, "addition_time_embed_dim": 256, "projection_class_embeddings_input_dim": 2816,
}

Operation = Callable[[dict[str, Any], Job], dict[str, Any]]
OPERATIONS: dict[str, Operation] = {}


def operation(name: str) -> Callable[[Operation], Operation]:
    def register(fn: Operation) -> Operation:
        OPERATIONS[name] = fn
        return fn

    return register


def run_job(params: dict[str, Any], job: Job) -> dict[str, Any]:
    """The "convert" job: `params["operation"]` is checkpoint, lora or merge."""
    name = str(params.get("operation") or "").strip().lower()
    if name not in OPERATIONS:
        raise JobError(f"operation: '{name}' is not one of {', '.join(OPERATIONS)}")
    return OPERATIONS[name](params, job)


# ---------------------------------------------------------------- parameters


def _text(params: Mapping[str, Any], field: str) -> str:
    value = str(params.get(field) or "").strip()
    if not value:
        raise JobError(f"{field}: empty; it is required")
    return value


def _existing(params: Mapping[str, Any], field: str, *, hub_id_ok: bool = False) -> str:
    """A path that must exist (or, where allowed, a Hugging Face id such as 'org/model')."""
    value = _text(params, field)
    path = Path(value).expanduser()
    if path.exists():
        return str(path.resolve())
    if hub_id_ok and is_model_address(value):
        return value
    raise JobError(f"{field}: '{value}' was not found (no such file or folder)")


def _looks_like_hub_id(value: str) -> bool:
    parts = value.split("/")
    return len(parts) == 2 and all(parts) and not value.startswith((".", "~")) and not value.endswith(".safetensors")


def is_model_address(value: str) -> bool:
    """A model that downloads: a Hugging Face id, file or repo page address, or a Civitai model's address."""
    from ot_gradio.config.hub_files import downloads_model

    return _looks_like_hub_id(value) or downloads_model(value)


def _output(params: Mapping[str, Any], field: str, *inputs: str) -> Path:
    """The output path, refused when it is an input, holds an input, or lies inside an input folder."""
    out = Path(_text(params, field)).expanduser().resolve()
    for value in inputs:
        src = Path(value).expanduser()
        if not src.exists():
            continue  # a hub id
        src = src.resolve()
        if out == src or out in src.parents or src in out.parents:
            raise JobError(f"{field}: '{out}' would overwrite the input '{src}'; choose another output path")
    return out


def _dtype(params: Mapping[str, Any], field: str = "dtype", default: str = "float32") -> torch.dtype:
    raw = str(params.get(field) or default).strip().lower().removeprefix("torch.")
    name = _DTYPE_ALIASES.get(raw, raw)
    if name not in DTYPES:
        raise JobError(f"{field}: '{params.get(field)}' is not one of {', '.join(DTYPES)}")
    return DTYPES[name]


def _format(params: Mapping[str, Any], out: Path, field: str = "format") -> str:
    fmt = str(params.get(field) or "").strip().lower() or ("single" if out.suffix.lower() == ".safetensors" else "diffusers")
    if fmt not in FORMATS:
        raise JobError(f"{field}: '{fmt}' is not one of {', '.join(FORMATS)}")
    if fmt == "single" and out.suffix.lower() != ".safetensors":
        raise JobError(f"output: a single file must end in .safetensors, got '{out.name}'")
    if fmt == "diffusers" and out.suffix:
        raise JobError(f"output: a diffusers model is a folder; '{out.name}' looks like a file name")
    return fmt


def _family(params: Mapping[str, Any]) -> type:
    from ot_gradio.models.registry import UnsupportedModelTypeError, get_family

    try:
        return get_family(_text(params, "model_type"))
    except UnsupportedModelTypeError as err:
        raise JobError(f"model_type: {err}") from None


def _offline(params: Mapping[str, Any]) -> bool:
    if "offline" in params:
        return bool(params["offline"])
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes")


def _load_model(family: type, params: Mapping[str, Any], field: str, source: str):
    """The family's real loader; `config` is the diffusers folder a single file takes its configs from."""
    from ot_gradio.models.common import ModelLoadError, base_model_source

    config = str(params.get("config") or "").strip() or None
    if config and not Path(config).expanduser().is_dir():
        raise JobError(f"config: folder '{config}' was not found")
    try:
        hub = _hub(params)
        source = base_model_source(source, model_type=str(params.get("model_type") or "") or None, **hub)
        return family.load(source, config_dir=config, **hub)
    except ModelLoadError as err:
        raise JobError(f"{field}: {err}") from None


def _hub(params: Mapping[str, Any]) -> dict[str, Any]:
    """How a job's models download: offline or not, the cache folder, and the page's tokens (the
    workspace's secrets.json; the Civitai key is set for this process)."""
    from ot_gradio.models.civitai_download import use_token
    from ot_gradio.secrets import read_secrets

    stored = read_secrets(params["workspace"]) if params.get("workspace") else {}
    use_token(stored.get("civitai_token"))
    return {"offline": _offline(params), "cache_dir": params.get("cache_dir") or None, "token": stored.get("huggingface_token") or None}


def _lora_source(params: Mapping[str, Any], field: str) -> str:
    """A LoRA file here, or the file of a Hugging Face file's or Civitai LoRA's address (downloaded once)."""
    from ot_gradio.config.civitai import civitai_address
    from ot_gradio.config.hub_files import hub_file_address
    from ot_gradio.models.common import ModelLoadError, lora_file

    value = _text(params, field)
    if Path(value).expanduser().exists() or (hub_file_address(value) is None and civitai_address(value) is None):
        return _existing(params, field)
    try:
        return str(lora_file(value, field, model_type=str(params.get("model_type") or "") or None, **_hub(params)))
    except ModelLoadError as err:
        raise JobError(str(err)) from None


def _save_model(model, out: Path, fmt: str, dtype: torch.dtype) -> Path:
    try:
        if fmt == "single":
            return Path(model.save_single_file(out, dtype))
        return Path(model.save_diffusers(out, dtype))
    except (ValueError, NotImplementedError) as err:  # e.g. a family without a single-file layout
        raise JobError(f"format: {str(err).removeprefix('output_model_format: ')}") from None


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _result(op: str, out: Path, **extra: Any) -> dict[str, Any]:
    size = _size(out)
    return {"operation": op, "output": str(out), "size_bytes": size,
            "message": f"wrote {out} ({size / 2**20:.1f} MiB)", **extra}


# ---------------------------------------------------------------- checkpoint


@operation("checkpoint")
def convert_checkpoint(params: dict[str, Any], job: Job) -> dict[str, Any]:
    """A base model (folder, single file or hub id) saved as a folder or a single file, in a dtype."""
    family = _family(params)
    source = _existing(params, "input", hub_id_ok=True)
    out = _output(params, "output", source)
    fmt, dtype = _format(params, out), _dtype(params)
    job.progress(0, 2, f"loading {source}")
    model = _load_model(family, params, "input", source)
    job.check()
    job.progress(1, 2, f"saving {fmt} ({str(dtype).removeprefix('torch.')})")
    path = _save_model(model, out, fmt, dtype)
    job.progress(2, 2, "saved")
    alone = fmt == "single" and bool(getattr(family, "transformer_file", False))
    if alone:  # Flux, PixArt: the layout people download holds the transformer only
        job.log(f"{path.name} holds the transformer alone; the text encoders and the VAE stay those of {source}")
    return _result("checkpoint", path, format=fmt, dtype=str(dtype).removeprefix("torch."), transformer_only=alone)


# ---------------------------------------------------------------- LoRA keys


def _meta_unet(base: str | None, offline: bool) -> torch.nn.Module:
    """The base model's UNet built on the meta device (no weights), only to name its layers."""

    from diffusers import UNet2DConditionModel

    config = dict(SDXL_UNET_CONFIG)
    if base:
        folder = Path(base).expanduser()
        if folder.is_dir():
            file = folder / "unet" / "config.json"
            if not file.is_file():
                raise JobError(f"base: '{base}' has no unet/config.json; give the base model's diffusers folder")
        elif folder.is_file():
            file = None  # a single file: the standard layout
        else:
            from huggingface_hub import hf_hub_download

            try:
                file = Path(hf_hub_download(base, "unet/config.json", local_files_only=offline))
            except Exception as err:  # noqa: BLE001 - network, auth, missing repo
                raise JobError(f"base: could not read the UNet config of '{base}' ({err})") from None
        if file is not None:
            config = {k: v for k, v in jsontext.loads(file.read_text(encoding="utf-8")).items() if not k.startswith("_")}
    with torch.device("meta"):
        return UNet2DConditionModel.from_config(config)


def _module_names(family: type, params: Mapping[str, Any], source: str) -> tuple[dict[str, dict[str, str]], dict[str, Any]]:
    """The family's kohya layer renames (SDXL: the original UNet names), and the names other tools
    give its layers in its original layout (models/original_lora_names.py: ComfyUI's `diffusion_model.`,
    sd-scripts' Flux.1 `double_blocks`, ...). A UNet's are found without loading weights; a
    transformer's from the base model, loaded where the family has either."""
    from ot_gradio.models.family import Family
    from ot_gradio.models.original_lora_names import LAYOUTS, original_lora_names

    renames = family.lora_module_names is not Family.lora_module_names
    base = str(params.get("base") or "").strip() or None
    if family.denoiser == "unet":  # without a base, the standard SDXL UNet's layout (_meta_unet)
        view = SimpleNamespace(unet=_meta_unet(base, _offline(params)), denoiser="unet")
        sdxl_layout = base is not None or str(family.lora_base_model_version).startswith("sdxl")
        if sdxl_layout:
            return (family.lora_module_names(view) if renames else {}), original_lora_names(view)
        names, layout = (family.lora_module_names(view) if renames else {}), True
    else:
        layout = getattr(family, "transformer_class_name", None) in LAYOUTS
        if base and (renames or layout):
            model = _load_model(family, params, "base", _existing(params, "base", hub_id_ok=True))
            return (model.lora_module_names() if renames else {}), original_lora_names(model)
        if renames:
            raise JobError("base: this model type names its kohya LoRA layers after the model; give the base model")
        names = {}
    if layout and (key := _original_layout_key(source)):
        raise JobError(f"base: the file names its layers in the model's original layout ({key.split('.')[0]}...), as ComfyUI "
                       "and sd-scripts write them; give the base model, whose layout they are read by")
    return names, {}


def _original_layout_key(path: str) -> str | None:
    """A key of the file in another tool's original-layout names (ComfyUI's `diffusion_model.`,
    sd-scripts' Flux.1 / Flux.2 blocks), if it has one."""
    import re

    from safetensors import safe_open

    try:
        with safe_open(path, framework="pt") as f:
            keys = list(f.keys())
    except Exception:  # noqa: BLE001 - unreadable: the reader says why
        return None
    return next((k for k in keys if k.startswith("diffusion_model.") or re.match(r"lora_unet_(double|single)_blocks_", k)), None)


def _base_model_version(family: type, metadata: Mapping[str, str]) -> str:
    version = family.lora_base_model_version
    if not isinstance(version, str):  # SD 2 decides by its prediction type
        version = metadata.get("ss_base_model_version", "sd_v2")
    return version


def _lora_dtype(parts: Mapping[str, Mapping[str, torch.Tensor]]) -> torch.dtype:
    from collections import Counter

    from ot_gradio.training.lora_format import OUTPUT_DTYPES

    found = Counter(t.dtype for sd in parts.values() for t in sd.values() if t.dtype in OUTPUT_DTYPES)
    return found.most_common(1)[0][0] if found else torch.float32


def _denoiser(family: type) -> str:
    """The part `lora_unet_` layers belong to (config/families.py's denoiser of the model type)."""
    from ot_gradio.config.families import family_info

    info = family_info(family.model_type)
    return info.denoiser if info else "unet"


def _read_lora(path: str, field: str, module_names: Mapping[str, Mapping[str, str]], denoiser: str = "unet",
               read_names: Mapping[str, Any] | None = None, version: str = ""):
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from ot_gradio.training.lora_format import load_lora_file, read_lora_metadata

    try:
        lora = load_lora_file(path, module_names, denoiser, read_names=read_names, base_model_version=version)
        metadata = read_lora_metadata(path)
        extra = {k: v for k, v in load_file(path).items() if k.startswith("bundle_emb.")}
    except (ValueError, SafetensorError, OSError) as err:
        raise JobError(f"{field}: {err}") from None
    return lora, metadata, extra


@operation("lora")
def convert_lora(params: dict[str, Any], job: Job) -> dict[str, Any]:
    """kohya <-> diffusers/PEFT keys; rank, alpha (so the scale), dtype and metadata are kept."""
    from ot_gradio.training.lora_format import save_lora_parts

    family = _family(params)
    source = _lora_source(params, "input")
    out = _output(params, "output", source)
    target = str(params.get("to") or "").strip().lower()
    if target not in LORA_TARGETS:
        raise JobError(f"to: '{target}' is not one of {', '.join(LORA_TARGETS)}")
    if out.suffix.lower() != ".safetensors":
        raise JobError(f"output: a LoRA file must end in .safetensors, got '{out.name}'")
    job.progress(0, 2, f"reading {Path(source).name}")
    names, read_names = _module_names(family, params, source)
    version = family.lora_base_model_version if isinstance(family.lora_base_model_version, str) else ""
    lora, metadata, extra = _read_lora(source, "input", names, _denoiser(family), read_names, version)
    job.check()
    version = _base_model_version(family, metadata)
    if "ss_base_model_version" in metadata and metadata["ss_base_model_version"].startswith("sdxl") != version.startswith("sdxl"):
        job.log(f"warning: the file says it is for '{metadata['ss_base_model_version']}', converting it as {family.model_type.value}")
    if extra and target == "diffusers":
        job.log("warning: the bundled embeddings are kept, but diffusers' load_lora_weights refuses files that hold them")
    kept = {k: v for k, v in metadata.items() if k not in _WRITER_METADATA}
    job.progress(1, 2, f"writing {target} keys")
    try:
        save_lora_parts(out, lora.parts, lora.rank, lora.alpha, lora_format=target, dtype=_lora_dtype(lora.parts),
                        base_model_version=version, module_names=names, extra_metadata=kept, extra_tensors=extra)
    except ValueError as err:
        raise JobError(f"to: {err}") from None
    job.progress(2, 2, "saved")
    layers = sum(len({k.rsplit(".", 2)[0] for k in sd}) for sd in lora.parts.values())
    return _result("lora", out, to=target, rank=lora.rank, alpha=lora.alpha, parts=sorted(lora.parts), layers=layers)


# ---------------------------------------------------------------- merge


def _lora_layers(sd: Mapping[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    from ot_gradio.training.lora_layer_entries import group_layers

    return group_layers(sd, "LoRA key")


def _lora_delta(tensors: Mapping[str, torch.Tensor], shape: torch.Size) -> torch.Tensor:
    """One peft-form layer's weight change before scaling (alpha / rank), as peft computes it in
    training: LoRA up @ down, LoHa (w1a w1b) * (w2a w2b) (Tucker form with hada_t1/t2), LoKr
    kron(w1, w2) with each factor full or a product (w2 Tucker form with lokr_t2)."""
    from ot_gradio.training.lora_layer_entries import layer_type
    from ot_gradio.training.lora_variants import LOHA, LOKR

    t = {k: v.float() for k, v in tensors.items()}
    kind = layer_type(t)
    if kind == LOHA:
        if "hada_t1" in t:
            one = torch.einsum("ijkl,jr,ip->prkl", t["hada_t1"], t["hada_w1_b"], t["hada_w1_a"])
            two = torch.einsum("ijkl,jr,ip->prkl", t["hada_t2"], t["hada_w2_b"], t["hada_w2_a"])
        else:
            one, two = t["hada_w1_a"] @ t["hada_w1_b"], t["hada_w2_a"] @ t["hada_w2_b"]
        return (one * two).reshape(shape)
    if kind == LOKR:
        w1 = t["lokr_w1"] if "lokr_w1" in t else t["lokr_w1_a"] @ t["lokr_w1_b"]
        if "lokr_w2" in t:
            w2 = t["lokr_w2"]
        elif "lokr_t2" in t:
            # contiguous: torch.kron of einsum's strided result fails (rank > 1), as peft's and LyCORIS' make_kron know
            w2 = torch.einsum("ijkl,ip,jr->prkl", t["lokr_t2"], t["lokr_w2_a"], t["lokr_w2_b"]).contiguous()
        else:
            w2 = t["lokr_w2_a"] @ t["lokr_w2_b"]
        if w2.dim() == 4:
            w1 = w1[:, :, None, None]
        return torch.kron(w1, w2).reshape(shape)
    return (t["lora_B.weight"].flatten(1) @ t["lora_A.weight"].flatten(1)).reshape(shape)


def merged_weight(weight: torch.Tensor, tensors: Mapping[str, torch.Tensor], scale: float, strength: float) -> torch.Tensor:
    """The layer's weight as training applied it, at `strength`: W + strength * (W' - W), with
    W' = W + scale * delta, or for DoRA W' = (W + scale * delta) * magnitude / norm, the norm
    taken over each input column (`dora_scale`) or each output row (`lora_magnitude_vector`),
    as lora_variants.DecomposedVariant trains it. An OFT v2 layer is rotated (oft.merged_weight)."""
    from ot_gradio.training import oft
    from ot_gradio.training.lora_variants import DORA_IN, DORA_OUT, _axis_norm

    if oft.OFT_WEIGHT in tensors:
        return oft.merged_weight(weight, tensors, strength)

    w = weight.float()
    adapted = w + scale * _lora_delta(tensors, w.shape)
    for key, output_axis in ((DORA_IN, False), (DORA_OUT, True)):
        if key in tensors:
            factor = tensors[key].float().reshape(-1) / _axis_norm(adapted, output_axis)
            view = (-1, *[1] * (w.dim() - 1)) if output_axis else (1, -1, *[1] * (w.dim() - 2))
            adapted = adapted * factor.reshape(view)
    return w + strength * (adapted - w)


def merge_into(model, parts: Mapping[str, Mapping[str, torch.Tensor]], rank: int, alpha: float, weight: float) -> tuple[int, int]:
    """Merge every layer of `parts` (peft form: LoRA, DoRA on either axis, LoHa, LoKr, OFT v2) into its
    module's weight at strength `weight` (see `merged_weight`); returns (matched layers, all
    layers). Nothing is changed unless every layer has its module."""
    from ot_gradio.training.lora_layer_entries import check_layer

    plan = []
    total = 0
    for part, sd in parts.items():
        module = model.parts.get(part)
        modules = dict(module.named_modules()) if module is not None else {}
        # kohya names lose the dots: a path read back wrongly still finds its module by its `_`-joined name
        flat = {name.replace(".", "_"): m for name, m in modules.items()}
        for path, tensors in _lora_layers(sd).items():
            total += 1
            try:
                check_layer(f"{part}.{path}", tensors)
            except ValueError as err:
                raise JobError(f"lora: {err}") from None
            target = next((m for m in (modules.get(path), modules.get("text_model." + path), flat.get(path.replace(".", "_")))
                           if m is not None), None)
            if target is not None and isinstance(getattr(target, "weight", None), torch.Tensor):
                plan.append((target, tensors))
    if len(plan) != total:
        return len(plan), total
    scale = float(alpha) / float(rank)
    with torch.no_grad():
        for target, tensors in plan:
            target.weight.copy_(merged_weight(target.weight, tensors, scale, float(weight)).to(target.weight.dtype))
    return len(plan), total


@operation("merge")
def merge_lora(params: dict[str, Any], job: Job) -> dict[str, Any]:
    """A LoRA file (either format, or another tool's original layer names) merged into a base
    checkpoint at `weight`, saved as folder or single file."""
    from ot_gradio.models.original_lora_names import original_lora_names

    family = _family(params)
    base = _existing(params, "base", hub_id_ok=True)
    lora_path = _lora_source(params, "lora")
    out = _output(params, "output", base, lora_path)
    fmt, dtype = _format(params, out), _dtype(params)
    try:
        weight = float(params.get("weight", 1.0))
    except (TypeError, ValueError):
        raise JobError(f"weight: '{params.get('weight')}' is not a number") from None
    job.progress(0, 3, f"loading {base}")
    model = _load_model(family, params, "base", base)
    job.check()
    version = model.lora_base_model_version if isinstance(model.lora_base_model_version, str) else ""
    lora, _, _ = _read_lora(lora_path, "lora", model.lora_module_names(), model.denoiser, original_lora_names(model), version)
    job.progress(1, 3, f"merging at weight {weight:g}")
    matched, total = merge_into(model, lora.parts, lora.rank, lora.alpha, weight)
    if matched != total:
        raise JobError(
            f"lora: only {matched} of {total} LoRA layers match a layer of the {family.model_type.value} base model; "
            "is the LoRA made for this model type?"
        )
    job.check()
    job.progress(2, 3, f"saving {fmt}")
    path = _save_model(model, out, fmt, dtype)
    job.progress(3, 3, "saved")
    return _result("merge", path, format=fmt, dtype=str(dtype).removeprefix("torch."), weight=weight, layers=matched)
