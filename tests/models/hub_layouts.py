"""The tiny models rewritten into the layout their real repos have on the Hugging Face hub, so
the loading tests read what users download: the hub's model_index.json entries (pipeline,
component classes and library names, the optional components it lists) and the tokenizer files
under the names the hub ships them (CLIP's vocab.json + merges.txt, Qwen's vocab.json +
merges.txt + added_tokens.json, Flux.2 dev's PixtralProcessor files, ...), made from the tiny
model's own tokenizer, so the tokens are the same and only the layout differs.

Where each layout comes from is noted per entry: "catalog" is a public project's list of each hub
repo's files (it pins and downloads them file by file); "inferred" marks what no source showed
(then the repo's known pipeline and the layout of its siblings). The tiny tokenizers keep their
own small vocabularies and special tokens; the file kinds and config classes are the hub's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

# tiny name (or a label, with the tiny model under "tiny") -> the real repo it stands for, the hub's model_index.json entries that differ from
# what save_pretrained writes, {tokenizer folder: the kind of files the hub ships there}, and
# optional parts the hub folder has that the loaders must leave alone
SD15_INDEX = {
    "_diffusers_version": "0.6.0", "feature_extractor": ["transformers", "CLIPImageProcessor"],
    "safety_checker": ["stable_diffusion", "StableDiffusionSafetyChecker"], "requires_safety_checker": True,
}
FLUX1_INDEX = {"_diffusers_version": "0.30.0.dev0", "tokenizer_2": ["transformers", "T5TokenizerFast"]}
SD3_INDEX = {"tokenizer_3": ["transformers", "T5TokenizerFast"]}
HUB_LAYOUTS: dict[str, dict] = {
    "tiny:sd15": {  # files: catalog of hub file lists; index: the repo's pipeline of diffusers 0.6 (inferred)
        "repo": "stable-diffusion-v1-5/stable-diffusion-v1-5", "model_index": {**SD15_INDEX, "scheduler": ["diffusers", "PNDMScheduler"]},
        "tokenizers": {"tokenizer": "clip"}, "extras": ("feature_extractor", "safety_checker"), "scheduler": "PNDMScheduler",
    },
    "tiny:sd15-inpainting": {  # inferred: the SD 1.5 layout
        "repo": "stable-diffusion-v1-5/stable-diffusion-inpainting", "model_index": SD15_INDEX,
        "tokenizers": {"tokenizer": "clip"}, "extras": ("feature_extractor", "safety_checker"),
    },
    "tiny:sd2": {  # inferred: a feature extractor, no safety checker
        "repo": "stabilityai/stable-diffusion-2-1",
        "model_index": {"feature_extractor": ["transformers", "CLIPImageProcessor"], "scheduler": ["diffusers", "DDIMScheduler"]},
        "tokenizers": {"tokenizer": "clip"}, "extras": ("feature_extractor",), "scheduler": "DDIMScheduler",
    },
    "tiny:sd2-base": {  # inferred: SD 2's layout, epsilon with PNDM; SD 2 repos list the safety checker as [null, null]
        "repo": "stabilityai/stable-diffusion-2-base",
        "model_index": {"feature_extractor": ["transformers", "CLIPImageProcessor"], "scheduler": ["diffusers", "PNDMScheduler"],
                        "safety_checker": [None, None], "requires_safety_checker": False},
        "tokenizers": {"tokenizer": "clip"}, "extras": ("feature_extractor",), "scheduler": "PNDMScheduler",
    },
    "tiny:sd2-inpainting": {  # inferred: as SD 2 base
        "repo": "stabilityai/stable-diffusion-2-inpainting",
        "model_index": {"feature_extractor": ["transformers", "CLIPImageProcessor"], "scheduler": ["diffusers", "PNDMScheduler"],
                        "safety_checker": [None, None], "requires_safety_checker": False},
        "tokenizers": {"tokenizer": "clip"}, "extras": ("feature_extractor",), "scheduler": "PNDMScheduler",
    },
    "tiny:sd2-depth": {  # inferred: SD 2 base's layout with the DPT depth estimator and its image processor, no safety checker
        "repo": "stabilityai/stable-diffusion-2-depth",
        "model_index": {"_diffusers_version": "0.8.0", "scheduler": ["diffusers", "PNDMScheduler"]},
        "tokenizers": {"tokenizer": "clip"}, "scheduler": "PNDMScheduler",
    },
    "tiny:sdxl": {  # files: catalog (fp16 variant names aside)
        "repo": "stabilityai/stable-diffusion-xl-base-1.0", "model_index": {"_diffusers_version": "0.19.0.dev0"},
        "tokenizers": {"tokenizer": "clip", "tokenizer_2": "clip"},
    },
    "tiny:sdxl-inpainting": {  # inferred: the SDXL layout
        "repo": "diffusers/stable-diffusion-xl-1.0-inpainting-0.1", "model_index": {},
        "tokenizers": {"tokenizer": "clip", "tokenizer_2": "clip"},
    },
    "tiny:sd3": {  # inferred: CLIP files twice, T5 with tokenizer.json
        "repo": "stabilityai/stable-diffusion-3-medium-diffusers", "model_index": SD3_INDEX,
        "tokenizers": {"tokenizer": "clip", "tokenizer_2": "clip", "tokenizer_3": "t5"},
    },
    "tiny:sd35": {  # inferred: as SD 3
        "repo": "stabilityai/stable-diffusion-3.5-medium", "model_index": SD3_INDEX,
        "tokenizers": {"tokenizer": "clip", "tokenizer_2": "clip", "tokenizer_3": "t5"},
    },
    "sd35-large": {  # inferred: as SD 3.5 Medium (the same pipeline and tokenizers, a larger transformer)
        "tiny": "tiny:sd35", "repo": "stabilityai/stable-diffusion-3.5-large", "model_index": SD3_INDEX,
        "tokenizers": {"tokenizer": "clip", "tokenizer_2": "clip", "tokenizer_3": "t5"},
    },
    "tiny:flux": {  # files: catalog; index: inferred
        "repo": "black-forest-labs/FLUX.1-dev", "model_index": FLUX1_INDEX, "tokenizers": {"tokenizer": "clip", "tokenizer_2": "t5"},
    },
    "tiny:flux-fill": {  # files: catalog (as FLUX.1-dev)
        "repo": "black-forest-labs/FLUX.1-Fill-dev", "model_index": FLUX1_INDEX, "tokenizers": {"tokenizer": "clip", "tokenizer_2": "t5"},
    },
    "tiny:chroma": {  # files: catalog (spiece.model only, added_tokens.json); index: a copy of Chroma1-Base's
        "repo": "lodestones/Chroma1-HD", "model_index": {}, "tokenizers": {"tokenizer": "t5-spm-only"},
    },
    "chroma1-base": {  # inferred: the earlier Chroma repo, its T5 tokenizer with tokenizer.json beside spiece.model (as Flux's)
        "tiny": "tiny:chroma", "repo": "lodestones/Chroma1-Base", "model_index": {}, "tokenizers": {"tokenizer": "t5"},
    },
    "tiny:pixart": {  # inferred: as PixArt-Sigma
        "repo": "PixArt-alpha/PixArt-XL-2-1024-MS", "model_index": {}, "tokenizers": {"tokenizer": "t5-spm-only"},
    },
    "tiny:pixart-sigma": {  # files: catalog (spiece.model only)
        "repo": "PixArt-alpha/PixArt-Sigma-XL-2-1024-MS", "model_index": {}, "tokenizers": {"tokenizer": "t5-spm-only"},
    },
    "tiny:sana": {  # files: catalog (Sana 600M's: tokenizer.json and tokenizer.model)
        "repo": "Efficient-Large-Model/Sana_1600M_1024px_diffusers", "model_index": {"tokenizer": ["transformers", "GemmaTokenizerFast"]},
        "tokenizers": {"tokenizer": "gemma"},
    },
    "tiny:wan": {  # inferred: umt5-xxl's tokenizer (tokenizer.json beside spiece.model); index: T5TokenizerFast as the repo's
        "repo": "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", "model_index": {"tokenizer": ["transformers", "T5TokenizerFast"]},
        "tokenizers": {"tokenizer": "t5"},
    },
    "tiny:wan22-5b": {  # inferred: the same umt5-xxl tokenizer; index: T5TokenizerFast, expand_timesteps true, no transformer_2
        "repo": "Wan-AI/Wan2.2-TI2V-5B-Diffusers", "model_index": {"tokenizer": ["transformers", "T5TokenizerFast"]},
        "tokenizers": {"tokenizer": "t5"},
    },
    "tiny:wan22-a14b": {  # inferred: the same umt5-xxl tokenizer; index: T5TokenizerFast, transformer_2, boundary_ratio 0.875
        "repo": "Wan-AI/Wan2.2-T2V-A14B-Diffusers", "model_index": {"tokenizer": ["transformers", "T5TokenizerFast"]},
        "tokenizers": {"tokenizer": "t5"},
    },
    "tiny:wan22-i2v-a14b": {  # inferred: the same umt5-xxl tokenizer; index: WanImageToVideoPipeline, null image encoder and processor
        "repo": "Wan-AI/Wan2.2-I2V-A14B-Diffusers", "model_index": {"tokenizer": ["transformers", "T5TokenizerFast"]},
        "tokenizers": {"tokenizer": "t5"},
    },
    "tiny:wan21-i2v": {  # inferred: the same umt5-xxl tokenizer; index: WanImageToVideoPipeline, CLIPVisionModel, CLIPImageProcessor
        "repo": "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers", "model_index": {"tokenizer": ["transformers", "T5TokenizerFast"]},
        "tokenizers": {"tokenizer": "t5"},
    },
    "tiny:hunyuan_video": {  # inferred: llava-llama-3-8b's Llama 3 tokenizer (tokenizer.json, PreTrainedTokenizerFast), CLIP-L's files
        "repo": "hunyuanvideo-community/HunyuanVideo", "model_index": {"tokenizer": ["transformers", "LlamaTokenizerFast"]},
        "tokenizers": {"tokenizer": "llama3", "tokenizer_2": "clip"},
    },
    "tiny:ltx2": {  # inferred: Gemma 3's tokenizer (tokenizer.json and tokenizer.model); index: GemmaTokenizerFast
        "repo": "Lightricks/LTX-2", "model_index": {"tokenizer": ["transformers", "GemmaTokenizerFast"]},
        "tokenizers": {"tokenizer": "gemma"},
    },
    "tiny:ernie": {  # files: a duplicate of baidu/ERNIE-Image (tokenizer.json + tokenizer_config.json); index: the repo's
        "repo": "baidu/ERNIE-Image",
        "model_index": {"_diffusers_version": "0.36.0", "tokenizer": ["transformers", "TokenizersBackend"],
                        "pe": ["transformers", "Ministral3ForCausalLM"], "pe_tokenizer": ["transformers", "TokenizersBackend"]},
        "tokenizers": {"tokenizer": "tokenizers-backend"}, "extras": ("pe",),
    },
    "tiny:ideogram4": {  # inferred: Qwen3-VL's tokenizer files (tokenizer.json, vocab.json, merges.txt); index: Qwen2TokenizerFast
        "repo": "CalamitousFelicitousness/Ideogram-4-bf16-Diffusers", "model_index": {"tokenizer": ["transformers", "Qwen2TokenizerFast"]},
        "tokenizers": {"tokenizer": "qwen-with-json"},
    },
    "tiny:qwen-image": {  # files: catalog (Qwen-Image-2512: vocab.json + merges.txt, no tokenizer.json); index: InvokeAI's copy
        "repo": "Qwen/Qwen-Image", "model_index": {}, "tokenizers": {"tokenizer": "qwen"},
    },
    "tiny:qwen-image-edit": {  # inferred: Qwen-Image's tokenizer files, and its Qwen2VLProcessor folder (preprocessor_config.json, the tokenizer's files)
        "repo": "Qwen/Qwen-Image-Edit", "model_index": {"processor": ["transformers", "Qwen2VLProcessor"]},
        "tokenizers": {"tokenizer": "qwen"}, "other_tokenizers": {"processor": "qwen"},
    },
    "tiny:krea2": {  # inferred (no file list of the repo seen): Qwen3-VL-4B's tokenizer files (vocab.json, merges.txt, tokenizer.json); index: Qwen2TokenizerFast
        "repo": "krea/Krea-2-Raw", "model_index": {"tokenizer": ["transformers", "Qwen2TokenizerFast"]},
        "tokenizers": {"tokenizer": "qwen-with-json"},
    },
    "tiny:anima": {  # inferred: Qwen3-0.6B's files (tokenizer.json, vocab.json, merges.txt), T5's; a modular index
        "repo": "circlestone-labs/Anima-Base-v1.0-Diffusers", "index": "modular_model_index.json", "model_index": {},
        "tokenizers": {"tokenizer": "qwen-with-json"}, "other_tokenizers": {"t5_tokenizer": "t5"},
    },
    "tiny:z-image": {  # files: catalog (tokenizer.json, vocab.json, merges.txt); index: a copy of the repo's
        "repo": "Tongyi-MAI/Z-Image-Turbo", "model_index": {}, "tokenizers": {"tokenizer": "qwen-with-json"},
    },
    "tiny:flux2-klein": {  # files: catalog (FLUX.2-klein-4B); index: copies of the repo's
        "repo": "black-forest-labs/FLUX.2-klein-4B",
        "model_index": {"is_distilled": True, "tokenizer": ["transformers", "Qwen2TokenizerFast"]},
        "tokenizers": {"tokenizer": "qwen-with-json"},
    },
    "tiny:cascade": {  # inferred: the prior repo with its image encoder; the decoder repo with the EffNet file on top
        "repo": "stabilityai/stable-cascade-prior",
        "model_index": {"feature_extractor": ["transformers", "CLIPImageProcessor"],
                        "image_encoder": ["transformers", "CLIPVisionModelWithProjection"]},
        "tokenizers": {"tokenizer": "clip"}, "extras": ("feature_extractor", "image_encoder"),
        "decoder": {"model_index": {}, "tokenizers": {"tokenizer": "clip"}},
        "part_models": {"decoder": "decoder", "effnet_encoder": "decoder/effnet_encoder.safetensors"},
    },
    "tiny:wuerstchen2": {  # inferred: warp-ai/wuerstchen-prior and warp-ai/wuerstchen, CLIP tokenizer files
        "repo": "warp-ai/wuerstchen-prior", "model_index": {}, "tokenizers": {"tokenizer": "clip"},
        "decoder": {"model_index": {}, "tokenizers": {"tokenizer": "clip"}},
        "part_models": {"decoder": "decoder", "effnet_encoder": "effnet"},
    },
    "tiny:flux2-dev": {  # files: catalog; index: several projects' copies of it
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


def _read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def _special_tokens(config: dict) -> dict:
    return {k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token") if config.get(k)}


def _hub_config(folder: Path, tokenizer_class: str, **extra) -> dict:
    """tokenizer_config.json as the hub's (saved by transformers 4.x: the class, the special
    tokens, no `backend`) and special_tokens_map.json; returns the tiny tokenizer's config."""
    config = _read_json(folder / "tokenizer_config.json")
    specials = _special_tokens(config)
    _write_json(folder / "tokenizer_config.json", {
        **specials, "model_max_length": config["model_max_length"], "tokenizer_class": tokenizer_class, **extra,
    })
    _write_json(folder / "special_tokens_map.json", specials)
    return config


def _bpe_files(folder: Path, keep_json: bool) -> dict:
    """vocab.json and merges.txt from tokenizer.json (the added tokens left out of the vocabulary,
    as the hub's files have them); returns {added token: id}."""
    data = _read_json(folder / "tokenizer.json")
    added = {t["content"]: t["id"] for t in data["added_tokens"]}
    vocab = {token: i for token, i in data["model"]["vocab"].items() if token not in added}
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    _write_json(folder / "vocab.json", vocab)
    (folder / "merges.txt").write_text("\n".join(["#version: 0.2", *merges]) + "\n", encoding="utf-8")
    if not keep_json:
        (folder / "tokenizer.json").unlink()
    return added


def _added_tokens_decoder(added: dict) -> dict:
    return {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
            for t, i in added.items()}


def _clip(folder: Path) -> None:
    """vocab.json, merges.txt, special_tokens_map.json, tokenizer_config.json (no tokenizer.json)."""
    _bpe_files(folder, keep_json=False)
    _hub_config(folder, "CLIPTokenizer", do_lower_case=True, errors="replace", add_prefix_space=False)


def _qwen(folder: Path, keep_json: bool = False) -> None:
    """vocab.json, merges.txt, added_tokens.json, special_tokens_map.json, tokenizer_config.json
    (with its added_tokens_decoder), the chat template; tokenizer.json only where the repo has it."""
    added = _bpe_files(folder, keep_json)
    _write_json(folder / "added_tokens.json", added)
    _hub_config(folder, "Qwen2Tokenizer", added_tokens_decoder=_added_tokens_decoder(added), errors="replace",
                split_special_tokens=False, clean_up_tokenization_spaces=False)


def _spm_model(path: Path, pieces: list[tuple[str, float]], model_type: int, unk: str, control: set[str]) -> None:
    """A SentencePiece model file (the protobuf that spiece.model / tokenizer.model hold)."""
    from transformers.utils import sentencepiece_model_pb2_new as spm

    model = spm.ModelProto()
    for piece, score in pieces:
        entry = model.pieces.add()
        entry.piece, entry.score = piece, score
        entry.type = 2 if piece == unk else 3 if piece in control else 1
    names = [p for p, _ in pieces]
    model.trainer_spec.model_type = model_type
    model.trainer_spec.unk_id = names.index(unk)
    for field, token in (("pad_id", "<pad>"), ("eos_id", "</s>"), ("bos_id", "<s>")):
        setattr(model.trainer_spec, field, names.index(token) if token in names else -1)
    model.normalizer_spec.name = "identity"
    model.normalizer_spec.add_dummy_prefix = True
    path.write_bytes(model.SerializeToString())


def _t5(folder: Path, keep_json: bool = True) -> None:
    """spiece.model, special_tokens_map.json, tokenizer_config.json; tokenizer.json where the repo has it."""
    data = _read_json(folder / "tokenizer.json")
    pieces = [(p, s) for p, s in data["model"]["vocab"]]
    _spm_model(folder / "spiece.model", pieces, 1, "<unk>", {"<pad>", "</s>"})
    _hub_config(folder, "T5Tokenizer", extra_ids=0, legacy=True, clean_up_tokenization_spaces=True)
    if not keep_json:
        _write_json(folder / "added_tokens.json", {})
        (folder / "tokenizer.json").unlink()


def _gemma(folder: Path) -> None:
    """tokenizer.json, tokenizer.model, special_tokens_map.json, tokenizer_config.json."""
    data = _read_json(folder / "tokenizer.json")
    order = sorted(data["model"]["vocab"].items(), key=lambda item: item[1])
    _spm_model(folder / "tokenizer.model", [(p, -float(i)) for p, i in order], 2, "<unk>", {"<pad>", "<eos>", "<bos>", "<mask>"})
    _hub_config(folder, "GemmaTokenizer", add_bos_token=True, add_eos_token=False, padding_side="right")


def _llama3(folder: Path) -> None:
    """tokenizer.json, special_tokens_map.json, tokenizer_config.json (Llama 3's: PreTrainedTokenizerFast)."""
    _hub_config(folder, "PreTrainedTokenizerFast", padding_side="right", clean_up_tokenization_spaces=True,
                model_input_names=["input_ids", "attention_mask"])


def _pixtral(folder: Path) -> None:
    """tokenizer.json, tokenizer_config.json (the tokenizer class the hub names, with the
    processor class), special_tokens_map.json, chat_template.jinja, processor_config.json and
    preprocessor_config.json."""
    _hub_config(folder, "LlamaTokenizerFast", add_bos_token=True, add_eos_token=False, clean_up_tokenization_spaces=False,
                legacy=True, processor_class="PixtralProcessor")
    config = _read_json(folder / "tokenizer_config.json")
    config["model_max_length"] = 1000000000000000019884624838656
    _write_json(folder / "tokenizer_config.json", config)
    _write_json(folder / "processor_config.json", PIXTRAL_PROCESSOR)
    _write_json(folder / "preprocessor_config.json", PIXTRAL_IMAGE_PROCESSOR)


def _tokenizers_backend(folder: Path) -> None:
    """tokenizer.json, tokenizer_config.json as transformers 5 writes it (`backend`, TokenizersBackend;
    ERNIE-Image's names the Pixtral processor it came from)."""
    config = _read_json(folder / "tokenizer_config.json")
    _write_json(folder / "tokenizer_config.json", {
        **_special_tokens(config), "add_prefix_space": None, "backend": "tokenizers", "clean_up_tokenization_spaces": False,
        "is_local": True, "legacy": True, "model_max_length": 2048, "processor_class": "PixtralProcessor",
        "tokenizer_class": "TokenizersBackend", "use_default_system_prompt": False,
    })


def _save_prompt_enhancer(dest: Path) -> None:
    """ERNIE-Image's prompt enhancer folders (pe: a Ministral3ForCausalLM, pe_tokenizer), the model as
    a config with no weights: a loader that reads it fails, so loading must leave it alone."""
    from transformers import Ministral3Config

    (dest / "pe").mkdir()
    Ministral3Config(vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=8).save_pretrained(dest / "pe")
    shutil.copytree(dest / "tokenizer", dest / "pe_tokenizer")


_TOKENIZER_KINDS = {
    "clip": _clip, "qwen": _qwen, "qwen-with-json": lambda f: _qwen(f, keep_json=True), "t5": _t5,
    "t5-spm-only": lambda f: _t5(f, keep_json=False), "gemma": _gemma, "pixtral": _pixtral, "llama3": _llama3,
    "tokenizers-backend": _tokenizers_backend,
}

CLIP_IMAGE_PROCESSOR = {
    "crop_size": 224, "do_center_crop": True, "do_convert_rgb": True, "do_normalize": True, "do_resize": True,
    "feature_extractor_type": "CLIPFeatureExtractor", "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3, "size": 224,
}


def _save_safety_checker(folder: Path) -> None:
    """A tiny StableDiffusionSafetyChecker (a CLIP vision tower), saved as the hub's is."""
    from diffusers.pipelines.stable_diffusion.safety_checker import StableDiffusionSafetyChecker
    from transformers import CLIPConfig

    config = CLIPConfig(
        text_config={"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2},
        vision_config={"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 16},
        projection_dim=8,
    )
    StableDiffusionSafetyChecker(config).save_pretrained(folder)


def _save_image_encoder(folder: Path) -> None:
    """A tiny CLIPVisionModelWithProjection (Stable Cascade's prior repo ships one)."""
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    CLIPVisionModelWithProjection(CLIPVisionConfig(
        hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=16,
        projection_dim=8,
    )).save_pretrained(folder)


def _rewrite(dest: Path, layout: dict) -> None:
    for folder, kind in {**layout["tokenizers"], **layout.get("other_tokenizers", {})}.items():
        _TOKENIZER_KINDS[kind](dest / folder)
    extras = layout.get("extras", ())
    if "feature_extractor" in extras:
        (dest / "feature_extractor").mkdir()
        _write_json(dest / "feature_extractor" / "preprocessor_config.json", CLIP_IMAGE_PROCESSOR)
    if "safety_checker" in extras:
        _save_safety_checker(dest / "safety_checker")
    if "pe" in extras:
        _save_prompt_enhancer(dest)
    if "image_encoder" in extras:
        _save_image_encoder(dest / "image_encoder")
    if layout.get("scheduler"):
        config = _read_json(dest / "scheduler" / "scheduler_config.json")
        _write_json(dest / "scheduler" / "scheduler_config.json", {**config, "_class_name": layout["scheduler"]})
    index_file = dest / layout.get("index", "model_index.json")
    _write_json(index_file, {**_read_json(index_file), **layout["model_index"]})


def save_hub_layout(tiny_folder: str | Path, name: str, dest: str | Path) -> Path:
    """A copy of the tiny model's diffusers folder at `dest` in the hub layout of `name`'s repo;
    the folder to load. Würstchen and Stable Cascade: `dest` holds the prior and the decoder
    folders (and the EffNet file) as the tiny model does; the prior is returned."""
    layout = HUB_LAYOUTS[name]
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    if "decoder" not in layout:
        shutil.copytree(tiny_folder, dest)
        _rewrite(dest, layout)
        return dest
    shutil.copytree(Path(tiny_folder).parent, dest)
    _rewrite(dest / "prior", layout)
    _rewrite(dest / "decoder", layout["decoder"])
    return dest / "prior"
