"""The tiny models rewritten into the layout their real repos have on the Hugging Face hub, so
the loading tests read what users download: the hub's model_index.json entries (pipeline,
component classes and library names, the optional components it lists) and the tokenizer files
under the names the hub ships them (CLIP's vocab.json + merges.txt, Qwen's vocab.json +
merges.txt + added_tokens.json, Flux.2 dev's PixtralProcessor files, ...), made from the tiny
model's own tokenizer, so the tokens are the same and only the layout differs.

Sources of the layouts (file lists of the repos, model_index.json entries as their pipelines
declare them) are named per entry in HUB_LAYOUTS; `inferred` marks what no source showed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

# tiny name -> (the real repo it stands for, the hub's model_index.json entries that differ from
# what save_pretrained writes, {tokenizer folder: the kind of files the hub ships there})
HUB_LAYOUTS: dict[str, dict] = {
    "tiny:flux2-dev": {
        "repo": "black-forest-labs/FLUX.2-dev",
        "model_index": {
            "_diffusers_version": "0.36.0.dev0",
            "tokenizer": ["transformers", "PixtralProcessor"],
        },
        "tokenizers": {"tokenizer": "pixtral"},
    },
}

# the Pixtral processor of Mistral Small 3.1 (which FLUX.2 dev's text encoder is), as the hub has it
PIXTRAL_PROCESSOR = {
    "image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]", "image_token": "[IMG]", "patch_size": 14,
    "processor_class": "PixtralProcessor", "spatial_merge_size": 2,
}
PIXTRAL_IMAGE_PROCESSOR = {
    "crop_size": None, "data_format": "channels_first", "default_to_square": True, "device": None, "do_center_crop": None,
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_processor_type": "PixtralImageProcessorFast",
    "image_std": [0.26862954, 0.26130258, 0.27577711], "input_data_format": None, "patch_size": {"height": 14, "width": 14},
    "processor_class": "PixtralProcessor", "resample": 3, "rescale_factor": 0.00392156862745098, "return_tensors": None,
    "size": {"longest_edge": 1540},
}


def _write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _special_tokens(config: dict) -> dict:
    return {k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token") if config.get(k)}


def _pixtral(folder: Path) -> None:
    """tokenizer.json, tokenizer_config.json (the tokenizer class the hub names, with the
    processor class), special_tokens_map.json, chat_template.jinja, processor_config.json and
    preprocessor_config.json."""
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    specials = _special_tokens(config)
    _write_json(folder / "tokenizer_config.json", {
        **specials, "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False, "legacy": True,
        "model_max_length": 1000000000000000019884624838656, "processor_class": "PixtralProcessor",
        "tokenizer_class": "LlamaTokenizerFast",
    })
    _write_json(folder / "special_tokens_map.json", specials)
    _write_json(folder / "processor_config.json", PIXTRAL_PROCESSOR)
    _write_json(folder / "preprocessor_config.json", PIXTRAL_IMAGE_PROCESSOR)


_TOKENIZER_KINDS = {"pixtral": _pixtral}


def save_hub_layout(tiny_folder: str | Path, name: str, dest: str | Path) -> Path:
    """A copy of the tiny model's diffusers folder at `dest` in the hub layout of `name`'s repo."""
    layout = HUB_LAYOUTS[name]
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(tiny_folder, dest)
    for folder, kind in layout["tokenizers"].items():
        _TOKENIZER_KINDS[kind](dest / folder)
    index = json.loads((dest / "model_index.json").read_text(encoding="utf-8"))
    _write_json(dest / "model_index.json", {**index, **layout["model_index"]})
    return dest
