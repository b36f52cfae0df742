"""Chroma's own transformer file (Flux's BFL names without modulation layers, with the approximator
as `distilled_guidance_layer`): the layout we write is exactly what diffusers' Chroma converter
reads at the real model's size, and the tiny model's file loads back through the family loader
with every weight equal; ORIGINAL_TRANSFORMER saves it."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from ot_gradio.models.chroma import Chroma1
from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.tiny import resolve_tiny


@pytest.fixture(scope="module")
def tiny_chroma(tiny_dir):
    return resolve_tiny("tiny:chroma")


def test_our_layout_is_what_diffusers_chroma_converter_reads_at_full_size():
    from diffusers import ChromaTransformer2DModel
    from diffusers.loaders.single_file_utils import convert_chroma_transformer_checkpoint_to_diffusers

    from ot_gradio.models.flux_keys import to_bfl

    with torch.device("meta"):
        full = ChromaTransformer2DModel()  # Chroma1-HD: 19 double and 38 single blocks of 3072, a 5-layer approximator
    ours = full.state_dict()
    original = to_bfl(full, ours, None, "Chroma")
    assert "distilled_guidance_layer.norms.0.scale" in original and "double_blocks.18.img_attn.qkv.weight" in original
    assert not any(".modulation." in k or "_mod." in k or "adaLN" in k for k in original)  # Chroma has none
    back = convert_chroma_transformer_checkpoint_to_diffusers({f"model.diffusion_model.{k}": v for k, v in original.items()})
    assert back.keys() == ours.keys()
    assert all(back[k].shape == ours[k].shape for k in ours)


def test_tiny_transformer_file_loads_and_saves_round_trip(tiny_chroma, tmp_path):
    model = Chroma1.load(str(tiny_chroma.diffusers_dir))
    from_file = Chroma1.load(str(tiny_chroma.single_file), config_dir=str(tiny_chroma.diffusers_dir), offline=True)
    a, b = from_file.transformer.state_dict(), model.transformer.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    out = model.save_single_file(tmp_path / "chroma.safetensors", "BFLOAT_16")
    with safe_open(str(out), "pt") as f:
        assert f.metadata()["modelspec.architecture"] == "chroma" and f.metadata()["ot_gradio.model_type"] == "CHROMA_1"
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    again = Chroma1.load(str(out), config_dir=str(tiny_chroma.diffusers_dir), offline=True).transformer.state_dict()
    assert all(torch.equal(again[k], b[k].to(torch.bfloat16).to(again[k].dtype)) for k in b)
    flux_folder = str(resolve_tiny("tiny:flux").diffusers_dir)  # another family's configs: the error says what to check
    with pytest.raises(ModelLoadError, match="check that it is a Chroma diffusers folder.*is it a Chroma transformer"):
        Chroma1.load(str(tiny_chroma.single_file), config_dir=flux_folder, offline=True)
