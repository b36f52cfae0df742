"""A VAE of the user's choice in place of the base model's (OneTrainer's `vae.model_name`), e.g.
SDXL's fp16-fix VAE or a fine-tuned SD 1.5 VAE.

As OneTrainer does, the VAE comes from a diffusers VAE folder or hub repo (its `config.json` and
weights at the top; a whole pipeline's folder or repo also works: its `vae/` is read). Beyond it, a
single VAE file as A1111 and ComfyUI users keep them (`.safetensors`, `.ckpt`/`.pt`, diffusers or
original key names, also a whole checkpoint whose `first_stage_model.` part is read; a Hugging Face
file address too) is read with the base model's VAE config; so are ComfyUI's files of the Wan
VAEs in Wan's original layout (wan_2.1_vae, qwen_image_vae, wan2.2_vae) and BFL's Flux.2 VAE (flux2-vae). The new VAE must make latents of the
shape the denoiser takes; anything else is a ModelLoadError that names the field.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from ..config.civitai import civitai_address
from .common import HUB_ID, ModelLoadError, config_keywords, part_file
from .errors import first_line
from .weight_variants import hub_variant, variant_keywords

FIELD = "vae.model_name"
# VAEs of Wan's architecture, whose original layout ComfyUI's files keep (wan_2.1_vae, qwen_image_vae:
# Wan 2.1 and 2.2 A14B, Qwen-Image and its Edit, Anima, Krea 2; wan2.2_vae: Wan 2.2 TI2V 5B)
WAN_VAES = ("AutoencoderKLWan", "AutoencoderKLQwenImage")
# VAEs whose original files use the LDM names (SD's, Flux.1's ae.safetensors, Flux.2's flux2-vae)
LDM_VAES = ("AutoencoderKL", "AutoencoderKLFlux2")
_FILE_SUFFIXES = (".safetensors", ".sft", ".ckpt", ".pt", ".pth", ".bin")


def apply_vae_override(model, part_models, *, cache_dir: str | None, offline: bool, token: str | None) -> None:
    """Replaces `model.vae` by the VAE `part_models["vae"]` names (blank: the base model's stays)."""
    value = str(dict(part_models or {}).get("vae") or "").strip()
    if value:
        model.vae = load_vae_override(value, model.vae, cache_dir=cache_dir, offline=offline, token=token)


def load_vae_override(value: str, base_vae: torch.nn.Module, *, cache_dir: str | None, offline: bool,
                      token: str | None) -> torch.nn.Module:
    """The VAE `value` names, of the base VAE's class, on the CPU in float32."""
    value = str(value).strip()
    cls = type(base_vae)
    path = Path(value).expanduser()
    if path.is_dir():
        vae = _from_folder(cls, path)
    elif path.is_file() or value.startswith(("http://", "https://")) or civitai_address(value) is not None:
        vae = _from_file(cls, part_file(value, FIELD, cache_dir=cache_dir, offline=offline, token=token), base_vae)
    elif HUB_ID.fullmatch(value) and not value.startswith((".", "/", "~")):
        vae = _from_hub(cls, value, cache_dir=cache_dir, offline=offline, token=token)
    else:
        raise ModelLoadError(f"{FIELD}: {value} does not exist; give a VAE folder (config.json and weights), a .safetensors "
                             "file, a Hugging Face id (like madebyollin/sdxl-vae-fp16-fix), or leave it blank.")
    _check_latents(vae, base_vae, value)
    return vae.to(dtype=torch.float32)


def vae_file(part_models, *, cache_dir: str | None, offline: bool, token: str | None) -> Path | None:
    """The local file of a VAE that `part_models["vae"]` names as a file, a Hugging Face file
    address or a Civitai address (downloaded once); None for none, a folder or a hub id."""
    value = str(dict(part_models or {}).get("vae") or "").strip()
    if not value or Path(value).expanduser().is_dir():
        return None
    if Path(value).expanduser().is_file() or value.startswith(("http://", "https://")) or civitai_address(value) is not None:
        return part_file(value, FIELD, cache_dir=cache_dir, offline=offline, token=token)
    return None


def vae_from_file(file: Path, source: str | Path, hub, class_name: str | None) -> torch.nn.Module:
    """The VAE in `file`, of the class (`class_name`, from the pipeline's model_index.json) and
    config the pipeline at `source` (folder or hub repo, read with `hub`'s keywords) has, on the
    CPU in float32: given to the pipeline's loader, which then fetches no VAE weights."""
    import diffusers
    from accelerate import init_empty_weights

    cls = getattr(diffusers, str(class_name or ""), None)
    if cls is None:
        raise ModelLoadError(f"{FIELD}: the base model has no VAE to replace.")
    with init_empty_weights():  # only its config is read
        base = cls.from_config(cls.load_config(str(source), subfolder="vae", **config_keywords(hub)))
    vae = _from_file(cls, file, base)
    _check_latents(vae, base, file.name)
    return vae.to(dtype=torch.float32)


def _from_folder(cls, path: Path):
    for sub in (None, "vae"):
        folder = path if sub is None else path / sub
        if (folder / "config.json").is_file():
            try:
                return cls.from_pretrained(str(path), subfolder=sub, local_files_only=True, **variant_keywords(folder, part=True))
            except Exception as e:  # a config of another VAE class, missing or broken weights
                raise ModelLoadError(f"{FIELD}: {folder} could not be loaded as a {cls.__name__} ({first_line(e)}).") from e
    raise ModelLoadError(f"{FIELD}: {path} has no config.json (nor vae/config.json); give a diffusers VAE folder or a VAE "
                         ".safetensors file.")


def _from_hub(cls, repo: str, *, cache_dir, offline, token):
    errors = []
    for sub in (None, "vae"):  # a VAE repo, or a pipeline repo with its VAE in vae/
        try:
            return cls.from_pretrained(repo, subfolder=sub, cache_dir=cache_dir, token=token, local_files_only=offline,
                                       **hub_variant(repo, sub or "", cache_dir=cache_dir, token=token, offline=offline))
        except Exception as e:  # not there, offline and not cached, no network, gated
            errors.append(first_line(e))
    hint = ("offline mode is on and it is not in the local Hugging Face cache; turn offline mode off to download it once"
            if offline else "check the id, your network and, for gated or private models, the access token")
    raise ModelLoadError(f"{FIELD}: could not load the VAE {repo} ({errors[0]}); {hint}, or give a local folder or file.")


def _read_weights(file: Path) -> dict[str, torch.Tensor]:
    if file.suffix.lower() not in _FILE_SUFFIXES:
        raise ModelLoadError(f"{FIELD}: {file} is not a weights file; give a .safetensors (or .ckpt/.pt) VAE file.")
    try:
        if file.suffix.lower() in (".safetensors", ".sft"):  # (.sft: BFL's name for the same format)
            from .comfy_quant import load_values

            tensors = load_values(file, torch.float32)  # (ComfyUI's scaled FP8 VAE: its weights read back to their values)
        else:  # weights only: a pickled file runs no code here
            tensors = torch.load(str(file), map_location="cpu", weights_only=True)
            tensors = tensors.get("state_dict", tensors) if isinstance(tensors, dict) else tensors
    except Exception as e:
        raise ModelLoadError(f"{FIELD}: {file} could not be read ({first_line(e)}).") from e
    if not isinstance(tensors, dict) or not tensors:
        raise ModelLoadError(f"{FIELD}: {file} holds no tensors.")
    for prefix in ("first_stage_model.", "vae."):  # a whole checkpoint, or a file of ComfyUI's
        if any(k.startswith(prefix) for k in tensors):
            tensors = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    return {k: v for k, v in tensors.items() if isinstance(v, torch.Tensor)}


def _from_file(cls, file: Path, base_vae):
    tensors = _read_weights(file)
    vae = cls.from_config(base_vae.config)
    expected = vae.state_dict()
    if not set(expected) <= set(tensors) and hasattr(vae.config, "down_block_types") and cls.__name__ in LDM_VAES:
        from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

        try:  # the original (LDM) names A1111 and ComfyUI files use (Flux.2's: below)
            extra = _flux2_layout(tensors, expected) if cls.__name__ == "AutoencoderKLFlux2" else {}
            tensors = {**convert_ldm_vae_checkpoint(tensors, dict(vae.config)), **extra}
        except Exception as e:
            raise ModelLoadError(f"{FIELD}: {file} is not a VAE of this model's kind ({first_line(e)}).") from e
    if not set(expected) <= set(tensors) and cls.__name__ in WAN_VAES and any(k.startswith("decoder.upsamples.") for k in tensors):
        tensors = _from_wan_layout(tensors, vae, file)
    missing = sorted(set(expected) - set(tensors))
    wrong = sorted(k for k in set(expected) & set(tensors) if tuple(tensors[k].shape) != tuple(expected[k].shape))
    if missing or wrong:
        what = f"{len(missing)} of its {len(expected)} weights are missing (e.g. {missing[0]})" if missing else (
            f"{len(wrong)} weights have other shapes (e.g. {wrong[0]}: {tuple(tensors[wrong[0]].shape)}, "
            f"needed {tuple(expected[wrong[0]].shape)})")
        raise ModelLoadError(f"{FIELD}: {file} is not a VAE of this model's kind ({cls.__name__}): {what}. Give the VAE made "
                             "for this base model.")
    vae.load_state_dict({k: tensors[k] for k in expected}, strict=True)
    return vae


def _flux2_layout(tensors: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """BFL's Flux.2 VAE file (flux2-vae.safetensors, as ComfyUI keeps it): LDM names with the
    quantization convolutions inside the encoder and decoder, moved out here for diffusers' LDM
    converter (in place); its latent batch norm's statistics returned, as diffusers names them (a
    file without `num_batches_tracked`, which nothing reads, takes the fresh model's)."""
    for inner, outer in (("encoder.quant_conv.", "quant_conv."), ("decoder.post_quant_conv.", "post_quant_conv.")):
        for key in [k for k in tensors if k.startswith(inner)]:
            tensors[outer + key[len(inner):]] = tensors.pop(key)
    norm = {k: v for k, v in tensors.items() if k.startswith("bn.")}
    return {k: norm.get(k, expected[k]) for k in expected if k.startswith("bn.")}


def _from_wan_layout(tensors: dict[str, torch.Tensor], vae, file: Path) -> dict[str, torch.Tensor]:
    """A Wan VAE's original names (`encoder.downsamples`, `decoder.upsamples`, `head`, `conv1`), as
    ComfyUI's wan_2.1_vae, qwen_image_vae and wan2.2_vae files have them, in diffusers'. Wan 2.1's
    architecture (4 stages of 2 residual blocks) goes through diffusers' single-file converter;
    Wan 2.2's own (the TI2V 5B's: residual stages with a patch) through `_from_wan22_layout`."""
    config = vae.config
    if getattr(config, "is_residual", False):
        return _from_wan22_layout(tensors)
    if int(config.num_res_blocks) != 2 or len(config.dim_mult) != 4:
        raise ModelLoadError(f"{FIELD}: {file} holds a VAE in Wan's original layout, which is read for the published Wan "
                             "VAEs only; give this model's VAE as a diffusers folder or file, or leave the field blank.")
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers

    return convert_wan_vae_to_diffusers(tensors)


_WAN_RESNET = {"residual.0": "norm1", "residual.2": "conv1", "residual.3": "norm2", "residual.6": "conv2",
               "shortcut": "conv_shortcut"}
_WAN_FIXED = {"conv1": "quant_conv", "conv2": "post_quant_conv", "encoder.conv1": "encoder.conv_in",
              "decoder.conv1": "decoder.conv_in", "encoder.head.0": "encoder.norm_out", "encoder.head.2": "encoder.conv_out",
              "decoder.head.0": "decoder.norm_out", "decoder.head.2": "decoder.conv_out"}


def _from_wan22_layout(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Wan 2.2's VAE (Wan2.2_VAE.pth, ComfyUI's wan2.2_vae.safetensors) in diffusers' names: each
    stage `{encoder.downsamples|decoder.upsamples}.i.{down|up}samples.j` holds its residual blocks
    and, last, its resampler (the only module there with `resample` / `time_conv`); the middle,
    head and the two 1x1 convolutions as in Wan 2.1. A name it does not know is kept as it is, so
    that the shape check names it."""
    out = {}
    for key, value in tensors.items():
        module, _, leaf = key.rpartition(".")
        if module in _WAN_FIXED:
            module = _WAN_FIXED[module]
        elif m := re.fullmatch(r"(encoder|decoder)\.middle\.1\.(.+)", module):
            module = f"{m[1]}.mid_block.attentions.0.{m[2]}"
        elif (m := re.fullmatch(r"(encoder|decoder)\.middle\.([02])\.(residual\.\d|shortcut)", module)) and m[3] in _WAN_RESNET:
            module = f"{m[1]}.mid_block.resnets.{int(m[2]) // 2}.{_WAN_RESNET[m[3]]}"
        elif m := re.fullmatch(r"(encoder\.down|decoder\.up)samples\.(\d+)\.(?:down|up)samples\.(\d+)\.(.+)", module):
            side, stage, index, rest = m[1], m[2], m[3], m[4]
            if rest in _WAN_RESNET:
                module = f"{side}_blocks.{stage}.resnets.{index}.{_WAN_RESNET[rest]}"
            elif rest.startswith(("resample.", "time_conv")):
                module = f"{side}_blocks.{stage}.{side.split('.')[1]}sampler.{rest}"
        out[f"{module}.{leaf}"] = value
    return out


def _latent_channels(vae) -> int | None:
    config = vae.config
    return getattr(config, "latent_channels", None) or getattr(config, "z_dim", None)


def _check_latents(vae, base_vae, value: str) -> None:
    if type(vae) is not type(base_vae):
        raise ModelLoadError(f"{FIELD}: {value} is a {type(vae).__name__}; this model needs a {type(base_vae).__name__}.")
    have, need = _latent_channels(vae), _latent_channels(base_vae)
    if have != need:
        raise ModelLoadError(f"{FIELD}: {value} makes latents of {have} channels; this model's denoiser takes {need}. "
                             "Give the VAE made for this base model.")
