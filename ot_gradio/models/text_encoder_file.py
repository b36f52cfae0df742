"""A text encoder from a single `.safetensors` file of its own (`text_encoder*.model_name`), as
ComfyUI and kohya's sd-scripts keep them beside a transformer file: `clip_l.safetensors`,
`t5xxl_fp16.safetensors`, `t5xxl_fp8_e4m3fn.safetensors`, `umt5_xxl_fp16.safetensors`,
`qwen_3_4b.safetensors`, `llava_llama3_fp16.safetensors`, ...

The encoder's class and config come from the base model (its folder, hub repo or, for a single
file, its config folder), so only its small config is read there: the file's weights go into
the encoder built empty, and the pipeline loads around it, so diffusers fetches no weights of
that part (a hub repo's T5 is 9.5 GB). The file's keys are Hugging Face transformers' names
(ComfyUI's and BFL's files), with or without CLIP's `text_model.` prefix, or a causal LM's `model.`
around an LLM encoder's (its `lm_head` and vision tower are left out); ComfyUI's scaled FP8
files (`scaled_fp8`, a `scale_weight` per layer) are read back to their values. Anything that is
not this encoder's weights is a ModelLoadError naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from .common import ModelLoadError, part_file

SUFFIXES = (".safetensors", ".sft")
# keys a text encoder file may hold that the encoder does not: CLIP's logit scale and position
# ids, a T5 file's decoder (a whole T5 model), ComfyUI's FP8 scale markers
_IGNORED_PREFIXES = ("decoder.", "lm_head.")
_IGNORED_SUFFIXES = ("position_ids", "logit_scale", ".scale_input")
_CLIP_PREFIX = "text_model."
_LLM_PREFIX = "model."  # a causal LM's file (ComfyUI's qwen_3_4b, llava_llama3) around the encoder's own names
# what the usual file of each encoder class is called, for messages
_EXAMPLES = {"CLIPTextModel": "clip_l.safetensors", "CLIPTextModelWithProjection": "clip_g.safetensors",
             "T5EncoderModel": "t5xxl_fp16.safetensors", "UMT5EncoderModel": "umt5_xxl_fp16.safetensors",
             "Qwen3Model": "qwen_3_4b.safetensors", "LlamaModel": "llava_llama3_fp16.safetensors"}


def text_encoder_files(part_models: Mapping[str, str] | None, parts: tuple[str, ...], *, cache_dir: str | None,
                       offline: bool, token: str | None) -> dict[str, Path]:
    """The local files of the text encoders among `parts` that `part_models` names (a file, a
    Hugging Face file address or a Civitai address, downloaded once)."""
    out = {}
    for part in parts:
        value = str(dict(part_models or {}).get(part) or "").strip()
        if not value:
            continue
        path = part_file(value, f"{part}.model_name", cache_dir=cache_dir, offline=offline, token=token)
        if path.suffix.lower() not in SUFFIXES:
            raise ModelLoadError(f"{part}.model_name: {path.name} is not a .safetensors file; give the text encoder as a "
                                 ".safetensors file (a .gguf text encoder is not read), or leave it blank.")
        out[part] = path
    return out


def text_encoders_from_files(files: Mapping[str, Path], source: str | Path, hub: Mapping,
                             dtypes: Mapping[str, torch.dtype]) -> dict[str, torch.nn.Module]:
    """Each file's encoder, of the class and config the pipeline at `source` (folder or hub repo,
    read with `hub`'s keywords) has for that part, in the part's dtype."""
    if not files:
        return {}
    from diffusers import DiffusionPipeline

    index = DiffusionPipeline.load_config(str(source), **_config_keywords(hub))
    out = {}
    for part, path in files.items():
        library, class_name = (list(index.get(part) or []) + [None, None])[:2]
        if library != "transformers" or not class_name:
            raise ModelLoadError(f"{part}.model_name: the base model has no transformers text encoder '{part}' to replace.")
        out[part] = load_text_encoder(path, class_name, source, part, hub, dtypes.get(part, dtypes.get("default", torch.float32)))
    return out


def _config_keywords(hub: Mapping) -> dict:
    return {k: v for k, v in hub.items() if k in ("cache_dir", "token", "local_files_only", "revision")}


def load_text_encoder(path: Path, class_name: str, source: str | Path, part: str, hub: Mapping,
                      dtype: torch.dtype) -> torch.nn.Module:
    """The `class_name` encoder with the config of `source`'s `part` folder and the weights of `path`."""
    import transformers
    from accelerate import init_empty_weights

    field = f"{part}.model_name"
    cls = getattr(transformers, class_name)
    try:
        config = cls.config_class.from_pretrained(str(source), subfolder=part, **_config_keywords(hub))
    except Exception as e:
        raise ModelLoadError(f"{field}: the config of the base model's {part} could not be read ({_first_line(e)}); "
                             "the text encoder file is read with it.") from e
    with init_empty_weights():  # parameters on the meta device, buffers (CLIP's position ids) made
        encoder = cls(config)
    expected = encoder.state_dict()
    tied = dict(getattr(encoder, "all_tied_weights_keys", None) or {})  # copy -> the weight it is tied to
    weights = read_weights(path, expected, field, class_name, dtype)
    for copy, source in tied.items():  # a file may hold a tied weight under its copy's name only (T5's embed_tokens)
        if copy in weights:
            weights.setdefault(source, weights[copy])
            del weights[copy]
    missing = sorted(k for k in expected if k not in weights and k not in tied and expected[k].is_meta)
    wrong = sorted(k for k in weights if tuple(weights[k].shape) != tuple(expected[k].shape))
    if missing or wrong:
        what = (f"{len(missing)} of the {len(expected)} weights it needs are not in it (e.g. {missing[0]})" if missing else
                f"{len(wrong)} weights have other shapes (e.g. {wrong[0]}: {tuple(weights[wrong[0]].shape)}, needed "
                f"{tuple(expected[wrong[0]].shape)})")
        raise ModelLoadError(f"{field}: {path.name} is not the {class_name} this model's {part} is: {what}. Give its file "
                             f"(like {_EXAMPLES.get(class_name, 'the encoder its model card names')}), or leave it blank.")
    encoder.load_state_dict(weights, strict=False, assign=True)
    encoder.tie_weights()
    left = [name for name, p in encoder.named_parameters() if p.is_meta]
    if left:
        raise ModelLoadError(f"{field}: {path.name} has no weights for {left[0]}; give the whole text encoder's file.")
    # the modules transformers keeps in float32 at this dtype (T5's and UMT5's `wo` in float16), as from_pretrained does
    keep = set(encoder._get_dtype_plan(dtype)) if hasattr(encoder, "_get_dtype_plan") else set()
    for name, module in encoder.named_modules():
        if keep & set(name.split(".")):
            module.to(torch.float32)
    return encoder.eval()


def read_weights(path: Path, expected: Mapping[str, torch.Tensor], field: str, class_name: str,
                 dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The file's tensors under the encoder's names (`expected`), floats in `dtype`; a key the
    encoder lacks is left out, after CLIP's prefix is tried both ways."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            keys = list(f.keys())
            scaled = "scaled_fp8" in keys
            # ComfyUI's newer quantized layouts (a `weight_scale` per layer, `comfy_quant` entries), or scales
            # without the scaled FP8 marker: read as they are, the weights would be wrong
            unread = [k for k in keys if k.endswith(".weight_scale") or "comfy_quant" in k or (k.endswith(".scale_weight") and not scaled)]
            if unread or "_quantization_metadata" in (f.metadata() or {}):
                raise ModelLoadError(f"{field}: {path.name} holds weights quantized in a layout not read here "
                                     f"({unread[0] if unread else '_quantization_metadata'}); give the encoder's fp16, bf16, "
                                     "fp8 or ComfyUI's scaled fp8 (`scaled_fp8`) file, and set its Weight data type to "
                                     "quantize it.")
            out = {}
            for key in keys:
                name = _encoder_name(key, expected)
                if name is None:
                    continue
                tensor = f.get_tensor(key)
                if scaled and key.endswith(".weight") and f"{key[:-len('weight')]}scale_weight" in keys:
                    scale = f.get_tensor(f"{key[:-len('weight')]}scale_weight").float()
                    tensor = tensor.float() * (scale.reshape(-1, 1) if scale.numel() > 1 else scale)
                out[name] = tensor.to(dtype) if tensor.is_floating_point() else tensor
    except ModelLoadError:
        raise
    except Exception as e:
        raise ModelLoadError(f"{field}: {path.name} could not be read as a .safetensors file ({_first_line(e)}).") from e
    if not out:
        raise ModelLoadError(f"{field}: {path.name} holds none of a {class_name}'s weights (its keys start "
                             f"{keys[0] if keys else 'nowhere: it is empty'}); give the text encoder's own file "
                             f"(like {_EXAMPLES.get(class_name, 'the encoder its model card names')}), or leave it blank.")
    return out


def _encoder_name(key: str, expected: Mapping[str, torch.Tensor]) -> str | None:
    """The encoder's name for a file key, None for a key it does not hold."""
    if key.startswith(_IGNORED_PREFIXES) or key.endswith(_IGNORED_SUFFIXES) or key.endswith(".scale_weight"):
        return None
    for name in (key, _CLIP_PREFIX + key, key.removeprefix(_CLIP_PREFIX), key.removeprefix(_LLM_PREFIX)):
        if name in expected:
            return name
    return None


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
