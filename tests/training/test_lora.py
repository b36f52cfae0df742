"""LoRA layers on the tiny SD 1.5: layer presets, filters, freezing, and loading weights back."""

from __future__ import annotations

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from ot_gradio.training.lora import (  # noqa: E402
    add_lora,
    load_lora_state_dict,
    lora_layers,
    lora_rank_alpha,
    lora_state_dict,
    select_lora_targets,
)


@pytest.fixture(scope="module")
def pipe():
    """Read-only: only target selection, which does not change the model."""
    from ot_gradio.models.tiny.sd15 import tiny_sd15_pipeline

    return tiny_sd15_pipeline(seed=0)


def _fresh(seed: int = 0):
    from ot_gradio.models.tiny.sd15 import tiny_sd15_pipeline

    return tiny_sd15_pipeline(seed=seed)


def _fresh_unet():
    from ot_gradio.models.tiny.sd15 import tiny_sd15_unet

    return tiny_sd15_unet(seed=0)


def _layers_of(module: nn.Module, types) -> set[str]:
    return {n for n, m in module.named_modules() if n and isinstance(m, types)}


def test_full_preset_takes_every_linear_and_conv_of_the_unet(pipe):
    selected = set(select_lora_targets(pipe.unet, kind="unet", layer_preset="full"))
    assert selected == _layers_of(pipe.unet, (nn.Linear, nn.Conv2d))
    for name in (
        "conv_in",
        "conv_out",
        "time_embedding.linear_1",
        "down_blocks.0.resnets.0.conv1",
        "down_blocks.0.resnets.0.time_emb_proj",
        "down_blocks.2.resnets.0.conv_shortcut",
        "down_blocks.0.downsamplers.0.conv",
        "up_blocks.0.upsamplers.0.conv",
        "mid_block.attentions.0.proj_in",
        "up_blocks.3.attentions.2.transformer_blocks.0.ff.net.2",
    ):
        assert name in selected


def test_attn_mlp_preset_is_onetrainers_attentions_filter(pipe):
    selected = set(select_lora_targets(pipe.unet, kind="unet", layer_preset="attn-mlp"))
    assert selected == {n for n in _layers_of(pipe.unet, (nn.Linear, nn.Conv2d)) if ".attentions." in n}
    assert "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k" in selected
    assert "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj" in selected
    assert "down_blocks.0.attentions.0.proj_in" in selected
    assert not any("resnets" in n or "time_embedding" in n or n in ("conv_in", "conv_out") for n in selected)


def test_attn_only_preset_takes_q_k_v_out_of_both_attentions(pipe):
    selected = select_lora_targets(pipe.unet, kind="unet", layer_preset="attn-only")
    leaves = {n.split(".attn", 1)[1] for n in selected}
    assert leaves == {f"{i}.{p}" for i in (1, 2) for p in ("to_q", "to_k", "to_v", "to_out.0")}
    # 16 transformer blocks in the tiny SD 1.5 layout (2+2+2 down, 1 mid, 3+3+3 up), 8 layers each
    assert len(selected) == 16 * 8


def test_text_encoder_presets(pipe):
    te = pipe.text_encoder
    full = set(select_lora_targets(te, kind="text_encoder", layer_preset="full"))
    assert full == _layers_of(te, nn.Linear)
    assert len(full) == 2 * 6
    assert set(select_lora_targets(te, kind="text_encoder", layer_preset="attn-mlp")) == full
    attn = select_lora_targets(te, kind="text_encoder", layer_preset="attn-only")
    assert len(attn) == 2 * 4 and all(".self_attn." in n for n in attn)


def test_custom_substrings_and_regex(pipe):
    selected = select_lora_targets(pipe.unet, kind="unet", layer_preset="custom", layer_filter="attn2, time_emb_proj,")
    assert selected and all(".attn2." in n or n.endswith("time_emb_proj") for n in selected)
    assert any(n.endswith("time_emb_proj") for n in selected)

    regex = select_lora_targets(
        pipe.unet, kind="unet", layer_preset="custom", layer_filter=r"^up_blocks\.1\..*to_[qk]$", layer_filter_regex=True
    )
    assert len(regex) == 3 * 2 * 2 and all(n.startswith("up_blocks.1.") for n in regex)

    # CLIP layers match under their single-file name `text_model.encoder...` whatever transformers does
    te = select_lora_targets(
        pipe.text_encoder,
        kind="text_encoder",
        layer_preset="custom",
        layer_filter=r"^text_model\.encoder\.layers\.1\.",
        layer_filter_regex=True,
    )
    assert len(te) == 6 and all("layers.1." in n for n in te)


def test_filters_that_match_nothing_are_named(pipe):
    with pytest.raises(ValueError, match="attn3"):
        select_lora_targets(pipe.unet, kind="unet", layer_preset="custom", layer_filter="attn1,attn3")
    with pytest.raises(ValueError, match="Invalid layer filter regex"):
        select_lora_targets(pipe.unet, kind="unet", layer_preset="custom", layer_filter="attn(", layer_filter_regex=True)
    with pytest.raises(ValueError, match="preset"):
        select_lora_targets(pipe.unet, kind="unet", layer_preset="everything")
    with pytest.raises(ValueError, match="attentions"):
        select_lora_targets(pipe.text_encoder, kind="text_encoder", layer_preset="custom", layer_filter="attentions")


def test_add_lora_freezes_the_model_and_starts_as_a_no_op():
    pipe = _fresh()
    te = pipe.text_encoder
    ids = torch.arange(10).unsqueeze(0)
    with torch.no_grad():
        before = te(ids).last_hidden_state
    params = add_lora(te, kind="text_encoder", rank=4, alpha=2.0, dropout=0.1, layer_preset="attn-only", dtype=torch.bfloat16)
    assert len(lora_layers(te)) == 8 and len(params) == 16
    assert {id(p) for p in te.parameters() if p.requires_grad} == {id(p) for p in params}
    assert all(p.dtype == torch.bfloat16 for p in params)
    assert lora_rank_alpha(te) == (4, 2.0)
    te.eval()
    with torch.no_grad():
        assert torch.equal(te(ids).last_hidden_state, before)

    te.train()
    te(ids).last_hidden_state.square().mean().backward()
    b_grads = [p.grad for n, p in te.named_parameters() if "lora_B" in n]
    assert all(g is not None and g.abs().sum() > 0 for g in b_grads)
    assert all(p.grad is None for p in te.parameters() if not p.requires_grad)

    with pytest.raises(ValueError, match="already"):
        add_lora(te, kind="text_encoder", rank=4, alpha=1.0, dropout=0.0, layer_preset="full")


def test_lora_state_dict_loads_into_a_fresh_model():
    a, b = _fresh_unet(), _fresh_unet()
    for unet in (a, b):
        add_lora(unet, kind="unet", rank=2, alpha=1.0, dropout=0.0, layer_preset="attn-mlp")
    with torch.no_grad():
        for n, p in a.named_parameters():
            if "lora_B" in n:
                p.normal_()
    sd = lora_state_dict(a)
    assert all(k.endswith((".lora_A.weight", ".lora_B.weight")) for k in sd)
    load_lora_state_dict(b, sd, kind="unet")
    assert all(torch.equal(sd[k], v) for k, v in lora_state_dict(b).items())

    # a file made for other layers: strict refuses, non-strict loads what fits
    c = _fresh_unet()
    add_lora(c, kind="unet", rank=2, alpha=1.0, dropout=0.0, layer_preset="attn-only")
    with pytest.raises(ValueError, match="unknown key"):
        load_lora_state_dict(c, sd, kind="unet")
    load_lora_state_dict(c, sd, kind="unet", strict=False)
    assert all(torch.equal(sd[k], v) for k, v in lora_state_dict(c).items())

    d = _fresh_unet()
    add_lora(d, kind="unet", rank=3, alpha=1.0, dropout=0.0, layer_preset="attn-mlp")
    with pytest.raises(ValueError, match="different rank"):
        load_lora_state_dict(d, sd, kind="unet")


def test_grouped_convolutions_get_no_lora():
    """A depthwise conv (Sana's ff.conv_depth) has no LoRA form; a filter naming its block still works."""
    from ot_gradio.training.lora import select_lora_targets

    net = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, groups=8), torch.nn.Conv2d(8, 8, 1), torch.nn.Linear(8, 8))
    assert select_lora_targets(net, kind="unet", layer_preset="full") == ["1", "2"]
