"""Every family loads a folder in its real repo's hub layout (tests/models/hub_layouts.py: the
hub's model_index.json entries, optional parts and tokenizer file names) through the real loading
code, given as the base model like a user's download, and tokenizes as the tiny model it was made from."""

from __future__ import annotations

import importlib

import pytest

from ot_gradio.config.enums import ModelType
from tests.models.hub_layouts import HUB_LAYOUTS, save_hub_layout

MODEL_TYPES = {
    "tiny:sd15": ModelType.STABLE_DIFFUSION_15,
    "tiny:sd15-inpainting": ModelType.STABLE_DIFFUSION_15_INPAINTING,
    "tiny:sd2": ModelType.STABLE_DIFFUSION_21,
    "tiny:sd2-base": ModelType.STABLE_DIFFUSION_20_BASE,
    "tiny:sd2-inpainting": ModelType.STABLE_DIFFUSION_20_INPAINTING,
    "tiny:sd2-depth": ModelType.STABLE_DIFFUSION_20_DEPTH,
    "sd35-large": ModelType.STABLE_DIFFUSION_35,
    "chroma1-base": ModelType.CHROMA_1,
    "tiny:sdxl": ModelType.STABLE_DIFFUSION_XL_10_BASE,
    "tiny:sdxl-inpainting": ModelType.STABLE_DIFFUSION_XL_10_BASE_INPAINTING,
    "tiny:sd3": ModelType.STABLE_DIFFUSION_3,
    "tiny:sd35": ModelType.STABLE_DIFFUSION_35,
    "tiny:flux": ModelType.FLUX_DEV_1,
    "tiny:wan": ModelType.WAN_2_1,
    "tiny:wan22-5b": ModelType.WAN_2_2_TI2V_5B,
    "tiny:wan22-a14b": ModelType.WAN_2_2_T2V_A14B,
    "tiny:wan22-i2v-a14b": ModelType.WAN_2_2_I2V_A14B,
    "tiny:wan21-i2v": ModelType.WAN_2_1_I2V,
    "tiny:hunyuan_video": ModelType.HUNYUAN_VIDEO,
    "tiny:ltx2": ModelType.LTX_2,
    "tiny:ernie": ModelType.ERNIE,
    "tiny:ideogram4": ModelType.IDEOGRAM_4,
    "tiny:flux-fill": ModelType.FLUX_FILL_DEV_1,
    "tiny:chroma": ModelType.CHROMA_1,
    "tiny:pixart": ModelType.PIXART_ALPHA,
    "tiny:pixart-sigma": ModelType.PIXART_SIGMA,
    "tiny:sana": ModelType.SANA,
    "tiny:qwen-image": ModelType.QWEN,
    "tiny:qwen-image-edit": ModelType.QWEN_IMAGE_EDIT,
    "tiny:krea2": ModelType.KREA_2,
    "tiny:anima": ModelType.ANIMA,
    "tiny:z-image": ModelType.Z_IMAGE,
    "tiny:flux2-klein": ModelType.FLUX_2,
    "tiny:flux2-dev": ModelType.FLUX_2,
    "tiny:cascade": ModelType.STABLE_CASCADE_1,
    "tiny:wuerstchen2": ModelType.WUERSTCHEN_2,
}
PROMPT = "a red circle, two blue squares"


def test_every_layout_names_a_family():
    assert set(MODEL_TYPES) == set(HUB_LAYOUTS)


@pytest.mark.parametrize("name", sorted(HUB_LAYOUTS))
def test_a_hub_layout_folder_loads_with_the_tiny_models_tokens(name, tiny_dir, tmp_path):
    """Loaded by the family from the folder's path (as `base_model_name`), each text encoder's
    tokenizer gives the tiny model's tokens, special tokens and chat template."""
    from transformers import AutoTokenizer

    from ot_gradio.models.family_parts import sentencepiece_files_readable
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny

    tiny = resolve_tiny(HUB_LAYOUTS[name].get("tiny", name)).diffusers_dir
    folder = save_hub_layout(tiny, name, tmp_path / HUB_LAYOUTS[name]["repo"].split("/")[1])
    parts = {part: str(folder.parent / path) for part, path in HUB_LAYOUTS[name].get("part_models", {}).items()}
    model = get_family(MODEL_TYPES[name]).load(str(folder), offline=True, **({"part_models": parts} if parts else {}))
    convert = importlib.import_module("transformers.convert_slow_tokenizer")
    assert convert.SentencePieceExtractor.__module__ == convert.__name__  # the library's own again after loading
    assert set(model.tokenizers) == {f"text_encoder{f.removeprefix('tokenizer')}" for f in HUB_LAYOUTS[name]["tokenizers"]}
    for part, tokenizer in model.tokenizers.items():
        with sentencepiece_files_readable():
            reference = AutoTokenizer.from_pretrained(tiny / f"tokenizer{part.removeprefix('text_encoder')}")
        assert tokenizer(PROMPT).input_ids == reference(PROMPT).input_ids, part
        specials = reference.all_special_tokens
        assert tokenizer.convert_tokens_to_ids(specials) == reference.convert_tokens_to_ids(specials), part
        assert tokenizer.chat_template == reference.chat_template, part
        if reference.chat_template:
            chat = reference.apply_chat_template([{"role": "user", "content": PROMPT}], tokenize=False)
            assert tokenizer(chat, add_special_tokens=False).input_ids == reference(chat, add_special_tokens=False).input_ids


def test_flux2_dev_samples_with_the_tokenizer_of_its_pixtral_processor(tiny_dir, tmp_path):
    """FLUX.2 dev's `tokenizer` is a PixtralProcessor, whose image side needs torchvision: the
    tokenizer part loads alone, and the pipeline built for samples renders prompts with it; so
    does a BFL-layout transformer file whose other parts come from the hub-layout folder."""
    from ot_gradio.models.flux2 import Flux2
    from ot_gradio.models.tiny import resolve_tiny

    folder = save_hub_layout(resolve_tiny("tiny:flux2-dev").diffusers_dir, "tiny:flux2-dev", tmp_path / "FLUX.2-dev")
    model = Flux2.load(str(folder), offline=True)
    assert model.variant == "dev" and not hasattr(model.tokenizer, "image_processor")
    image = model.sample("a red circle", height=32, width=32, steps=1, seed=1)
    assert image.size == (32, 32)
    file = model.save_single_file(tmp_path / "flux2-dev.safetensors", None)
    from_file = Flux2.load(str(file), offline=True, config_dir=str(folder))
    assert type(from_file.tokenizer) is type(model.tokenizer) and from_file.variant == "dev"


def hub_cached(folder, repo: str, cache):
    """`folder` as the hub client keeps a download: cache/models--owner--name/blobs/<sha256> and
    snapshots/<commit>/<path> as relative links to those blobs, refs/main naming the commit.
    The snapshot folder is returned."""
    import hashlib
    import os
    from pathlib import Path

    root, commit = Path(cache) / f"models--{repo.replace('/', '--')}", "a" * 40
    snapshot = root / "snapshots" / commit
    for file in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        data = file.read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / file.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    return snapshot


@pytest.mark.parametrize("name", ["tiny:sd15", "tiny:sdxl", "tiny:flux", "tiny:z-image"])
def test_a_model_in_the_hub_cache_loads_by_its_snapshot_path_and_by_its_id_offline(name, tiny_dir, tmp_path):
    """What the hub client downloads: the files are links into blobs/ named by their hash (the
    tokenizers' and configs' suffixes are only on the links). Given as the snapshot folder's
    path, and as the hub id with that cache offline, the model loads with the same weights."""
    import torch

    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny

    layout = HUB_LAYOUTS[name]
    folder = save_hub_layout(resolve_tiny(name).diffusers_dir, name, tmp_path / "download")
    snapshot = hub_cached(folder, layout["repo"], tmp_path / "hub")
    family = get_family(MODEL_TYPES[name])
    by_path = family.load(str(snapshot), offline=True)
    by_id = family.load(layout["repo"], offline=True, cache_dir=str(tmp_path / "hub"))
    for part, module in by_path.parts.items():
        a, b = module.state_dict(), by_id.parts[part].state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), part
    assert by_path.tokenizers.keys() == by_id.tokenizers.keys()
