"""Continuing a LoRA file (*Base LoRA*, `lora_model_name`) that another layer preset trained, as
most shared LoRAs are (kohya's layer set is none of ours): the run trains the file's own layers,
a part the run does not train keeps the file's layers as they are, and nothing of the file is lost
in what the run saves. Before, any preset other than the file's own refused the file at setup."""

import pytest
import torch
from safetensors.torch import load_file, save_file

from ot_gradio.config.io import load_config
from ot_gradio.models.registry import get_family
from ot_gradio.models.tiny import resolve_tiny
from ot_gradio.training.methods import get_method
from tests.tools.lora_files import random_lora_files

SD15 = "STABLE_DIFFUSION_15"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A LoRA of the tiny SD 1.5 on its attention layers alone (UNet and CLIP), weights off zero,
    with diffusers/PEFT keys and with kohya's (what Civitai's files mostly have)."""
    base = resolve_tiny("tiny:sd15").diffusers_dir
    return base, random_lora_files(SD15, base, ("DIFFUSERS_LORA", "KOHYA_LORA"), tmp_path_factory.mktemp("lora"),
                                   layer_filter_preset="attn-only")


@pytest.fixture
def attn_only(files):
    return files[0], files[1]["DIFFUSERS_LORA"]


def _setup(base, start, **options):
    config = load_config({"model_type": SD15, "training_method": "LORA", "base_model_name": str(base), "lora_model_name": str(start),
                          **options}).config
    model, method = get_family(SD15).load(str(base)), get_method(config.training_method)
    return config, model, method, method.setup(model, config, torch.device("cpu"))


@pytest.mark.parametrize(("preset", "keys"), [("full", "DIFFUSERS_LORA"), ("attn-mlp", "KOHYA_LORA")])
def test_a_lora_continues_on_its_own_layers_whatever_the_preset(files, tmp_path, preset, keys):
    base, start = files[0], files[1][keys]
    config, model, method, groups = _setup(base, start, layer_filter_preset=preset, lora_rank=16, output_model_format=keys)
    _, _, _, own = _setup(base, start, layer_filter_preset="attn-only")
    assert [g.name for g in groups] == ["unet", "text_encoder"]
    assert [sum(p.numel() for p in g.params) for g in groups] == [sum(p.numel() for p in g.params) for g in own]  # rank 4, not 16
    saved, original = load_file(str(method.save(model, config, tmp_path / "out.safetensors", {}))), load_file(str(start))
    assert saved.keys() == original.keys()
    assert all(torch.equal(saved[k].float(), original[k].float()) for k in original)


def test_a_part_not_trained_keeps_the_files_layers_frozen(attn_only, tmp_path):
    base, start = attn_only
    config, model, method, groups = _setup(base, start, text_encoder={"train": False}, output_model_format="DIFFUSERS_LORA")
    assert [g.name for g in groups] == ["unet"]
    te_lora = [p for n, p in model.text_encoder.named_parameters() if "lora_" in n]
    assert te_lora and not any(p.requires_grad for p in te_lora)
    saved, original = load_file(str(method.save(model, config, tmp_path / "out.safetensors", {}))), load_file(str(start))
    te_keys = [k for k in original if k.startswith("text_encoder.")]
    assert te_keys and all(torch.equal(saved[k].float(), original[k].float()) for k in te_keys)  # not dropped


def test_layers_the_model_does_not_have_are_named(attn_only, tmp_path):
    base, start = attn_only
    tensors = load_file(str(start))
    tensors["unet.down_blocks.9.attentions.0.proj_in.lora_A.weight"] = torch.zeros(4, 32)
    tensors["unet.down_blocks.9.attentions.0.proj_in.lora_B.weight"] = torch.zeros(32, 4)
    save_file(tensors, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match=r"^lora_model_name: .*other.safetensors: 1 unet layer\(s\) this STABLE_DIFFUSION_15 "
                                         r"model does not have \(e.g. down_blocks.9"):
        _setup(base, tmp_path / "other.safetensors")
