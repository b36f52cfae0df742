"""A text encoder from a single `.safetensors` file of its own (`text_encoder*.model_name`), as
ComfyUI and kohya's sd-scripts keep them beside a transformer file: `clip_l.safetensors`,
`t5xxl_fp16.safetensors`, `t5xxl_fp8_e4m3fn.safetensors`, `umt5_xxl_fp16.safetensors`,
`qwen_3_4b.safetensors`, `qwen_2.5_vl_7b.safetensors`, `llava_llama3_fp16.safetensors`,
`mistral_3_small_flux2_bf16.safetensors`, `qwen_3_06b_base.safetensors`, `gemma_2_2b_fp16.safetensors`...

The encoder's class and config come from the base model (its folder, hub repo or, for a single
file, its config folder), so only its small config is read there; the pipeline then loads around
the encoder, and diffusers fetches no weights of that part (a hub repo's T5 is 9.5 GB). The file
loads as transformers loads a checkpoint of the class: CLIP with or without `text_model.`, a causal
LM's file for its base model (`model.` around Qwen3's or Llama's names), Qwen2.5-VL's older layout
(`model.layers`, `visual.`), tied weights under either name, T5's `wo` kept in float32 at float16.
ComfyUI's Mistral for Flux.2 dev holds the language model alone, under its own names: they go under
Mistral3's `model.language_model.`, and its vision tower, which encoding text never reads, is left
as transformers initialises it. A file cut after the last layer encoding reads (ComfyUI's pruned
30-layer Mistral) loads as that many layers, its last hidden state not normalised, so encoding
reads what it reads from the whole model (`layers_read`, the family's).
ComfyUI's scaled FP8 files and its mixed-precision FP8 / INT8 ones are read back to their values
(models/comfy_quant.py); its block-scaled and rotated formats are refused. llama.cpp's `.gguf`
files are read back to their values under transformers' names (models/gguf_text_encoder.py); a
vision-language model's file without its vision tower is refused where the encoder reads images.
A local folder of the encoder in transformers' layout (kijai's llava-llama-3-8b-text-encoder-tokenizer,
a downloaded repo's text_encoder/) is read the same way, its .safetensors shards together. A file that lacks a
weight the encoder needs (but a causal LM's output layer, which encoding never reads) or holds one
of another shape is a ModelLoadError naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import torch

from .comfy_quant import UnreadQuantization, tensors_of
from .common import ModelLoadError, config_keywords, part_file
from .errors import first_line
from .gguf_text_encoder import QUANT_SUFFIX, GGUFTextEncoderError, gguf_weights, mmproj_beside, mmproj_weights

SUFFIXES = (".safetensors", ".sft", ".gguf")
# keys a text encoder file may hold that no encoder does: CLIP's logit scale and position ids, a
# whole T5's decoder (ComfyUI's scales: comfy_quant.is_scale); any other key the encoder lacks is
# left out by transformers' loading
_IGNORED_PREFIXES = ("decoder.",)
_IGNORED_SUFFIXES = ("position_ids", "logit_scale")
# weights an encoder's file may lack that encoding never reads (a causal LM's output layer)
_UNUSED = ("lm_head.",)
# the prefix ComfyUI's file of a wrapped language model lacks (it holds `model.layers`, `model.norm`...)
_LANGUAGE_MODEL = {"Mistral3ForConditionalGeneration": "model.language_model."}
# what a text-only file of a vision-language model lacks (ComfyUI's Mistral, llama.cpp's .gguf files):
# the vision tower and its projector, which encoding a prompt without an image never reads
_VISION = {"Mistral3ForConditionalGeneration": ("model.vision_tower.", "model.multi_modal_projector."),
           "Qwen2_5_VLForConditionalGeneration": ("model.visual.",)}
# keys of ComfyUI's files that are no weights: the tokenizer it serialises into Mistral's file
_NOT_WEIGHTS = ("tekken_model",)
_LAYER = re.compile(r"^(.*?)layers\.(\d+)\.")
# what the usual file of each encoder class is called, for messages
_EXAMPLES = {"CLIPTextModel": "clip_l.safetensors", "CLIPTextModelWithProjection": "clip_g.safetensors",
             "T5EncoderModel": "t5xxl_fp16.safetensors", "UMT5EncoderModel": "umt5_xxl_fp16.safetensors",
             "Qwen3Model": "qwen_3_4b.safetensors", "LlamaModel": "llava_llama3_fp16.safetensors",
             "Qwen2_5_VLForConditionalGeneration": "qwen_2.5_vl_7b.safetensors",
             "Mistral3ForConditionalGeneration": "mistral_3_small_flux2_bf16.safetensors",
             "Qwen3ForCausalLM": "qwen_3_4b.safetensors", "Gemma2Model": "gemma_2_2b_fp16.safetensors"}


def text_encoder_files(part_models: Mapping[str, str] | None, parts: tuple[str, ...], *, cache_dir: str | None,
                       offline: bool, token: str | None) -> dict[str, Path]:
    """The local files of the text encoders among `parts` that `part_models` names (a file, a
    Hugging Face file address or a Civitai address, downloaded once), or a local folder of the
    encoder in transformers' layout (its .safetensors shards)."""
    out = {}
    for part in parts:
        value = str(dict(part_models or {}).get(part) or "").strip()
        if not value:
            continue
        folder = Path(value).expanduser()
        if folder.is_dir():
            if not any(folder.glob("*.safetensors")):
                raise ModelLoadError(f"{part}.model_name: the folder {folder.name} holds no .safetensors weights; give the text "
                                     "encoder's folder (config.json and its .safetensors files) or file, or leave it blank.")
            out[part] = folder
            continue
        path = part_file(value, f"{part}.model_name", cache_dir=cache_dir, offline=offline, token=token)
        if path.suffix.lower() not in SUFFIXES:
            raise ModelLoadError(f"{part}.model_name: {path.name} is not a .safetensors or .gguf file; give the text encoder's "
                                 "file, or leave it blank.")
        out[part] = path
    return out


def parts_from_files(files: Mapping[str, Path], source: str | Path, hub: Mapping, dtypes: Mapping[str, torch.dtype], *,
                     classes: Mapping[str, tuple[str, str]] | None = None,
                     layers_read: Mapping[str, int] | None = None, reads_images: bool = False) -> dict[str, torch.nn.Module]:
    """Each file's encoder, of the class and config the pipeline at `source` (folder or hub repo,
    read with `hub`'s keywords) has for that part, in the part's dtype; a "vae" file's VAE
    (models/vae_override.py, in float32). `classes`: each part's (library, class) where the base
    model has no model_index.json to say so (Anima's modular pipeline); `layers_read`: per encoder
    class, how many of its layers the family's encoding reads (a file may stop after them);
    `reads_images`: the family's encoder reads images (Qwen-Image-Edit's), so a file must hold its
    vision tower."""
    if not files:
        return {}
    from .vae_override import vae_from_file

    if classes is None:
        from diffusers import DiffusionPipeline

        index = DiffusionPipeline.load_config(str(source), **config_keywords(hub))
    else:
        index = dict(classes)
    out = {}
    for part, path in files.items():
        library, class_name = (list(index.get(part) or []) + [None, None])[:2]
        if part == "vae":
            out[part] = vae_from_file(path, source, hub, class_name)
            continue
        if library != "transformers" or not class_name:
            raise ModelLoadError(f"{part}.model_name: the base model has no transformers text encoder '{part}' to replace.")
        out[part] = load_text_encoder(path, class_name, source, part, hub, dtypes.get(part, dtypes.get("default", torch.float32)),
                                      layers_read=dict(layers_read or {}).get(class_name), reads_images=reads_images)
    return out


def load_text_encoder(path: Path, class_name: str, source: str | Path, part: str, hub: Mapping,
                      dtype: torch.dtype, *, layers_read: int | None = None, reads_images: bool = False) -> torch.nn.Module:
    """The `class_name` encoder with the config of `source`'s `part` folder and the weights of
    `path`, loaded as transformers loads a checkpoint (its renames of older layouts, tied weights,
    the modules it keeps in float32). With `layers_read`, a file with fewer layers than the config
    but at least those loads as that many layers. Without `reads_images`, a vision-language model's
    file may lack its vision tower, which stays as transformers initialises it (never read)."""
    import transformers

    field = f"{part}.model_name"
    cls = getattr(transformers, class_name)
    example = _EXAMPLES.get(class_name, "the encoder its model card names")
    try:
        config = cls.config_class.from_pretrained(str(source), subfolder=part, **config_keywords(hub))
    except Exception as e:
        raise ModelLoadError(f"{field}: the config of the base model's {part} could not be read ({first_line(e)}); "
                             "the text encoder file is read with it.") from e
    # the modules transformers keeps in float32 at this dtype (T5's and UMT5's `wo` at float16) are read so
    keep = set(getattr(cls, "_keep_in_fp32_modules", None) or ()) if dtype == torch.float16 else set()
    if dtype in (torch.float16, torch.bfloat16):
        keep |= set(getattr(cls, "_keep_in_fp32_modules_strict", None) or ())
    weights = _wrapped_language_model(read_weights(path, field, class_name, dtype, keep), class_name)
    if reads_images and path.suffix.lower() == ".gguf" and class_name in _VISION and (mmproj := mmproj_beside(path)):
        try:
            weights.update(mmproj_weights(mmproj, dtype))
        except GGUFTextEncoderError as e:
            raise ModelLoadError(f"{field}: {e}; give the mmproj file made for {path.name} beside it.") from e
        except Exception as e:
            raise ModelLoadError(f"{field}: {mmproj.name} could not be read as a .gguf file ({first_line(e)}).") from e
    unused = _UNUSED
    text_only = class_name in _VISION and not any(k.startswith(_VISION[class_name]) or k.startswith("visual.") for k in weights)
    if text_only and reads_images:
        beside = (" and no mmproj file is beside it (put its vision tower's .gguf, e.g. "
                  f"{QUANT_SUFFIX.sub('', path.stem)}-mmproj-BF16.gguf, in the same folder, as ComfyUI-GGUF reads it"
                  + ("; a Hugging Face file address fetches that one file: download both into a folder of yours and give "
                     "its path" if "snapshots" in path.parts else "") + ")" if path.suffix.lower() == ".gguf" else "")
        raise ModelLoadError(f"{field}: {path.name} holds the language model alone (no vision tower){beside}, and this model's "
                             f"text encoder reads the control images with it. Give the whole encoder's .safetensors file (like "
                             f"{example}), or leave it blank.")
    if text_only:
        unused += _VISION[class_name]  # the vision tower stays as initialised, never read
    if layers_read is not None:
        _fit_layers(config, weights, layers_read, field, path.name)
    try:
        encoder, info = cls.from_pretrained(None, config=config, state_dict=weights, dtype=dtype, output_loading_info=True,
                                            ignore_mismatched_sizes=True)  # a weight of another shape: named below
    except Exception as e:
        raise ModelLoadError(f"{field}: {path.name} could not be loaded as the base model's {part}, a {class_name} "
                             f"({first_line(e)}). Give its file (like {example}), or leave it blank.") from e
    expected = len(encoder.state_dict())
    missing = sorted(k for k in info["missing_keys"] if not k.startswith(unused))
    wrong = sorted(info["mismatched_keys"], key=str)  # (name, its shape in the file, the shape needed)
    if missing or wrong:
        what = (f"{len(missing)} of the {expected} weights it needs are not in it (e.g. {missing[0]})" if missing else
                f"{len(wrong)} weights have other shapes (e.g. {_shapes(wrong[0])})")
        raise ModelLoadError(f"{field}: {path.name} is not the {class_name} this model's {part} is: {what}. Give its file "
                             f"(like {example}), or leave it blank.")
    return encoder.eval()


def _wrapped_language_model(weights: dict[str, torch.Tensor], class_name: str) -> dict[str, torch.Tensor]:
    """A wrapped language model's weights under the wrapper's names where the file holds them under
    the language model's own (`model.layers.0...` for `model.language_model.layers.0...`)."""
    prefix = _LANGUAGE_MODEL.get(class_name)
    if prefix is None or any(k.startswith(prefix) for k in weights):
        return weights
    return {prefix + k.removeprefix("model.") if k.startswith("model.") else k: v for k, v in weights.items()}


def _fit_layers(config, weights: Mapping[str, torch.Tensor], layers_read: int, field: str, name: str) -> None:
    """A file that stops after the layers encoding reads (ComfyUI's pruned Mistral): the config
    takes its layer count, and the last hidden state stays as that layer gives it (not through the
    final norm), as the whole model's is at that depth. One that stops before them is refused."""
    text = getattr(config, "text_config", None) or config
    found = {int(m.group(2)) for k in weights if (m := _LAYER.match(k)) and "vision" not in m.group(1) and "visual" not in m.group(1)}
    layers, needed = getattr(text, "num_hidden_layers", None), int(layers_read)
    if not found or layers is None or max(found) + 1 >= layers:
        return
    count = max(found) + 1
    if count < needed or found != set(range(count)):
        raise ModelLoadError(f"{field}: {name} holds {len(found)} of the {layers} layers of the base model's text encoder; this "
                             f"model reads its first {needed}. Give the whole encoder's file, or leave it blank.")
    text.num_hidden_layers = count
    text.tie_last_hidden_states = False
    for key in ("layer_types",):  # per-layer lists (sliding or full attention) follow the count
        if isinstance(getattr(text, key, None), list):
            setattr(text, key, getattr(text, key)[:count])


def read_weights(path: Path, field: str, class_name: str, dtype: torch.dtype, keep: set[str] = frozenset()) -> dict[str, torch.Tensor]:
    """The file's tensors, floats in `dtype` (in float32 those of a module named in `keep`), without
    what no encoder holds (CLIP's logit scale and position ids, a whole T5's decoder, ComfyUI's
    quantization scales, applied to their weights: models/comfy_quant.py)."""
    def unused(key: str) -> bool:
        return key in _NOT_WEIGHTS or key.startswith(_IGNORED_PREFIXES) or key.endswith(_IGNORED_SUFFIXES)

    try:
        if path.suffix.lower() == ".gguf":
            out = dict(gguf_weights(path, dtype, keep, unused))
        else:
            out = {}
            for file in sorted(path.glob("*.safetensors")) if path.is_dir() else [path]:  # a folder: its shards
                for key, tensor, _ in tensors_of(file, unused):
                    target = torch.float32 if keep & set(key.split(".")) else dtype
                    out[key] = tensor.to(target) if tensor.is_floating_point() else tensor
    except GGUFTextEncoderError as e:
        raise ModelLoadError(f"{field}: {path.name} is not read as a text encoder: {e}. Give the encoder's .safetensors "
                             "file, or leave it blank.") from e
    except UnreadQuantization as e:
        raise ModelLoadError(f"{field}: {path.name} holds weights quantized in a layout not read here ({e}); give the "
                             "encoder's fp16, bf16, fp8 or ComfyUI's fp8 / int8 file, and set its Weight data type to quantize "
                             "it.") from e
    except ModelLoadError:
        raise
    except Exception as e:
        kind = ".gguf" if path.suffix.lower() == ".gguf" else ".safetensors"
        raise ModelLoadError(f"{field}: {path.name} could not be read as a {kind} file ({first_line(e)}).") from e
    if not out:
        raise ModelLoadError(f"{field}: {path.name} holds no weights; give the text encoder's own file "
                             f"(like {_EXAMPLES.get(class_name, 'the encoder its model card names')}), or leave it blank.")
    return out


def _shapes(entry) -> str:
    if isinstance(entry, tuple) and len(entry) == 3:
        return f"{entry[0]}: {tuple(entry[1])}, needed {tuple(entry[2])}"
    return str(entry)
