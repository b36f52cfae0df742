"""OFT v2 (`peft_type` OFT_2) as OneTrainer trains it. Training, file round trips and the
parameters' shapes are covered with the other variants in test_lora_variants.py (VARIANTS "oft",
"oft_scaled_shared"), the convert tool's merge in tests/tools/test_convert_merge_variants.py; here:
OneTrainer's file entries, the rotation formula of a merged weight (the one ComfyUI's OFT v2 node
applies), block dropout and the config checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from ot_gradio.config.io import load_config
from ot_gradio.training import oft
from ot_gradio.training.lora import add_lora, load_lora_state_dict, lora_state_dict
from ot_gradio.training.lora_format import load_lora_file, read_lora_metadata, save_lora
from ot_gradio.training.lora_layer_entries import check_start_file
from ot_gradio.training.lora_variants import AdapterSpec
from tests.training.test_lora_variants import _pipeline, _trained

FULL = Path(__file__).parents[1] / "config" / "data" / "onetrainer-full" / "config.json"
TO_Q = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q"


@pytest.mark.parametrize("variant", ["oft", "oft_scaled_shared"])
def test_kohya_file_holds_onetrainers_entries(variant, tmp_path):
    t = _trained(variant)
    path = save_lora(tmp_path / "o.safetensors", unet=t.pipe.unet, text_encoder=t.pipe.text_encoder)
    tensors = load_file(str(path))
    scaled = variant == "oft_scaled_shared"
    # 16 inputs: 2 blocks of 8 (28 entries each), or one shared block of 4 (6 entries)
    assert tensors[f"{TO_Q}.oft_R.weight"].shape == ((1, 6) if scaled else (2, 28))
    assert tensors["lora_unet_conv_in.oft_R.weight"].shape == ((1, 6) if scaled else (4, 36))  # 4·3·3 inputs: blocks of 9
    assert {k.split(".", 1)[1] for k in tensors} == ({"oft_R.weight", "oft_R.scaled_oft"} if scaled else {"oft_R.weight"})
    if scaled:  # OneTrainer's marker buffer: a bool True
        assert tensors[f"{TO_Q}.oft_R.scaled_oft"].dtype == torch.bool and bool(tensors[f"{TO_Q}.oft_R.scaled_oft"])
    assert any(k.startswith("lora_te_text_model_encoder_layers_0_") for k in tensors)
    assert "lycoris" not in read_lora_metadata(path).get("ss_network_module", "")


def test_merge_strength_and_the_rotation_formula():
    """W' = W + s·(W·Rᵀ - W) for a linear layer, R = I + 2Q + 2Q² + 2Q³ + Q⁴ per block (peft's
    Cayley-Neumann series), Q skew-symmetric from the upper triangle, divided by 2·sqrt(b-1) when scaled."""
    torch.manual_seed(0)
    weight, vec = torch.randn(3, 4), torch.randn(2, 1) * 0.3  # two blocks of 2: one entry each
    for scaled in (False, True):
        q = torch.zeros(2, 2, 2)
        q[:, 0, 1] = vec[:, 0] / (2.0 if scaled else 1.0)
        q = q - q.transpose(1, 2)
        r = torch.eye(2) + 2 * q + 2 * q @ q + 2 * q @ q @ q + q @ q @ q @ q
        expected = weight @ torch.block_diag(*r).T
        tensors = {oft.OFT_WEIGHT: vec, **({oft.OFT_SCALED: torch.tensor(True)} if scaled else {})}
        torch.testing.assert_close(oft.merged_weight(weight, tensors), expected)
        torch.testing.assert_close(oft.merged_weight(weight, tensors, 0.5), weight + 0.5 * (expected - weight))
        conv = weight.reshape(3, 1, 2, 2)  # a convolution rotates by R, not Rᵀ
        torch.testing.assert_close(oft.merged_weight(conv, tensors), (weight @ torch.block_diag(*r)).reshape(conv.shape))


def _oft_linear(dropout, share=False):
    torch.manual_seed(0)
    layer = nn.Sequential(nn.Linear(16, 4))
    params = add_lora(layer, kind="unet", rank=1, alpha=1.0, dropout=dropout, layer_preset="full",
                      spec=AdapterSpec(peft_type="OFT_2", oft_block_size=4, oft_block_share=share))
    with torch.no_grad():
        params[0].normal_(0, 0.5)
    return layer


def test_dropout_restores_whole_blocks_while_training():
    layer, x = _oft_linear(dropout=0.5), torch.randn(1, 16)
    base = layer[0].get_base_layer()
    layer.eval()
    rotated = layer(x)
    layer.train()
    torch.manual_seed(3)
    outs = {tuple(layer(x).flatten().tolist()) for _ in range(100)}
    assert len(outs) > 2  # blocks dropped at random
    layer.eval()
    torch.testing.assert_close(layer(x), rotated)  # evaluation: no dropout
    # every block dropped: the base layer's output
    assert any(torch.allclose(torch.tensor(o), base(x).flatten(), atol=1e-6) for o in outs)
    shared = _oft_linear(dropout=0.5, share=True)
    shared.eval()
    plain = shared(x)
    shared.train()
    torch.testing.assert_close(shared(x), plain)  # one shared block: never dropped, as in OneTrainer


def test_a_file_trained_with_other_oft_settings_is_refused(tmp_path):
    path = save_lora(tmp_path / "s.safetensors", unet=_trained("oft_scaled_shared").pipe.unet)
    parts = load_lora_file(path).parts
    # the block layout is the file's, as a LoRA file's rank is (the config's default of 32 unshared here)
    spec = check_start_file(AdapterSpec(peft_type="OFT_2", oft_scaled=True), parts, path)
    assert (spec.oft_block_size, spec.oft_block_share, spec.oft_scaled) == (4, True, True)
    fresh = _pipeline()
    add_lora(fresh.unet, kind="unet", rank=1, alpha=1.0, dropout=0.0, layer_preset="full", spec=spec)
    load_lora_state_dict(fresh.unet, parts["unet"], kind="unet")
    with pytest.raises(ValueError, match="^lora_model_name: .* turn oft_scaled on"):
        check_start_file(AdapterSpec(peft_type="OFT_2"), parts, path)
    with pytest.raises(ValueError, match="^lora_model_name: .* set peft_type to OFT_2"):
        check_start_file(AdapterSpec(peft_type="LOHA"), parts, path)
    assert oft.spec_fields(_layers(parts["unet"])) == {
        "oft_block_size": 4, "oft_block_share": True, "oft_scaled": True}


def _layers(sd):
    from ot_gradio.training.lora_layer_entries import group_layers

    return group_layers(sd).values()


def test_onetrainer_config_with_oft_imports_unchanged(tmp_path):
    raw = json.loads(FULL.read_text())
    (tmp_path / "lora.json").write_text(json.dumps(raw))
    raw.update(peft_type="OFT_2", oft_block_size=16, oft_block_share=True, oft_scaled=True, dropout_probability=0.25)
    (tmp_path / "oft.json").write_text(json.dumps(raw))
    result = load_config(tmp_path / "oft.json")
    config = result.config
    assert (config.peft_type.value, config.oft_block_size, config.oft_block_share, config.oft_scaled) == ("OFT_2", 16, True, True)
    assert config.dropout_probability == 0.25
    # no warning about any OFT option: the same as the LoRA config's
    assert [w.replace("oft.json", "lora.json") for w in result.warnings] == load_config(tmp_path / "lora.json").warnings
    spec = AdapterSpec.from_config(config)
    assert (spec.peft_type, spec.oft_block_size, spec.oft_block_share, spec.oft_scaled) == ("OFT_2", 16, True, True)
    pipe = _pipeline()
    add_lora(pipe.unet, kind="unet", rank=spec.rank(config), alpha=config.lora_alpha, dropout=config.dropout_probability,
             layer_preset="attn-only", spec=spec)
    assert {tuple(v.shape) for k, v in lora_state_dict(pipe.unet).items() if k.endswith("oft_R.weight")} == {(1, 120)}
