"""A transformer from a file of its own (`transformer.model_name`), as OneTrainer reads it: its
Z-Image DeTurbo presets (stored unchanged in tests/config/data) give a Hugging Face file address,
which is downloaded once into the hub cache and read from there offline; a local file works too.
The base model's other parts and the transformer config stay the base model's."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from ot_gradio.config.io import load_config
from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.z_image import ZImage

PRESET = Path(__file__).parents[1] / "config" / "data" / "onetrainer-training-presets" / "Z-Image" / "#z-image DeTurbo LoRA 16GB.json"
URL = "https://huggingface.co/ostris/Z-Image-De-Turbo/blob/main/z_image_de_turbo_v1_bf16.safetensors"


def hub_cached(cache: Path, url: str, file: Path) -> Path:
    """`file` put where the hub cache keeps `url`'s file: models--owner--repo/snapshots/<commit>/,
    with refs/main naming that commit (what hf_hub_download reads offline)."""
    owner, repo, name = re.fullmatch(r"https://huggingface\.co/([^/]+)/([^/]+)/blob/main/(.+)", url).groups()
    folder, commit = cache / f"models--{owner}--{repo}", "0123456789abcdef0123456789abcdef01234567"
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    target = folder / "snapshots" / commit / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(file, target)
    return cache


@pytest.fixture(scope="module")
def other_transformer(tiny_dir, tmp_path_factory):
    """The tiny Z-Image's transformer with other weights, saved alone in the original layout
    (what the DeTurbo file is), and those weights."""
    model = ZImage.load("tiny:z-image", offline=True)
    with torch.no_grad():
        for p in model.transformer.parameters():
            p.add_(0.25)
    path = model.save_single_file(tmp_path_factory.mktemp("deturbo") / "t.safetensors", None)
    return path, {k: v.clone() for k, v in model.transformer.state_dict().items()}, model.text_encoder.state_dict()


def _same(module: torch.nn.Module, expected: dict) -> bool:
    got = module.state_dict()
    return got.keys() == expected.keys() and all(torch.equal(got[k], expected[k].to(got[k].dtype)) for k in got)


def test_the_deturbo_presets_transformer_address_is_kept_and_read_not_warned_as_ignored():
    loaded = load_config(PRESET)
    assert loaded.config.transformer.model_name == URL
    assert not [w for w in loaded.warnings if "transformer.model_name" in w], loaded.warnings


def test_the_presets_address_loads_from_the_hub_cache_offline(other_transformer, tmp_path):
    path, weights, text_encoder = other_transformer
    cache = hub_cached(tmp_path / "hub", load_config(PRESET).config.transformer.model_name, path)
    model = ZImage.load("tiny:z-image", offline=True, cache_dir=str(cache), part_models={"transformer": URL, "vae": ""})
    assert _same(model.transformer, weights)
    assert _same(model.text_encoder, text_encoder)  # the other parts are the base model's


def test_a_local_transformer_file_replaces_the_base_models(other_transformer):
    path, weights, _ = other_transformer
    assert _same(ZImage.load("tiny:z-image", offline=True, part_models={"transformer": str(path)}).transformer, weights)
    assert not _same(ZImage.load("tiny:z-image", offline=True, part_models={"transformer": " "}).transformer, weights)


@pytest.mark.parametrize(("value", "said"), [
    (URL, r"^transformer\.model_name: https://huggingface\.co/ostris/\S+ is not in the local Hugging Face cache .*offline"),
    ("https://example.com/t.safetensors", r"^transformer\.model_name: .* not of a Hugging Face file or a Civitai model; download the file"),
    ("https://civitai.com/models/1?modelVersionId=2", r"^transformer\.model_name: \S+ has not been downloaded to .* offline mode is on"),
    ("/nowhere/t.safetensors", r"^transformer\.model_name: /nowhere/t\.safetensors does not exist"),
], ids=["hub-address-offline-not-cached", "other-address", "civitai-offline-not-downloaded", "missing-file"])
def test_a_transformer_file_that_cannot_be_had_is_one_clear_line_before_loading(value, said, tmp_path):
    with pytest.raises(ModelLoadError, match=said):
        ZImage.load("tiny:z-image", offline=True, cache_dir=str(tmp_path), part_models={"transformer": value})


# Ideogram 4 writes one (OneTrainer's), which nothing reads; a Wan 2.2 A14B file would not say which expert it is
@pytest.mark.parametrize("family", ["sd3", "pixart", "ideogram4", "wan22-a14b"])
def test_a_family_that_reads_no_transformer_file_says_so(family):
    from ot_gradio.models.ideogram4 import Ideogram4
    from ot_gradio.models.pixart import PixArtAlpha
    from ot_gradio.models.sd3 import StableDiffusion3
    from ot_gradio.models.wan import Wan22T2VA14B

    cls = {"sd3": StableDiffusion3, "pixart": PixArtAlpha, "ideogram4": Ideogram4, "wan22-a14b": Wan22T2VA14B}[family]
    with pytest.raises(ModelLoadError, match=r"^transformer\.model_name: .*base model only; leave it blank"):
        cls.load(f"tiny:{family}", part_models={"transformer": "t.safetensors"})
