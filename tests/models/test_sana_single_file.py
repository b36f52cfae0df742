"""Sana's original transformer checkpoint (the `Sana_1600M_1024px.pth` layout) loads through the
family loader with diffusers' converter, the other parts from the config folder; the file is
built here from the tiny model's weights under the original names (with the position table and
null caption embedding the original keeps and diffusers drops)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.sana import Sana
from ot_gradio.models.tiny import resolve_tiny


def _original_layout(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tiny diffusers transformer's weights under Sana's own names (what its repo's .pth holds)."""
    out = {"pos_embed": torch.zeros(1, 4, 8), "y_embedder.y_embedding": torch.zeros(4, 8)}
    top = {"patch_embed.proj": "x_embedder.proj", "time_embed.emb.timestep_embedder.linear_1": "t_embedder.mlp.0",
           "time_embed.emb.timestep_embedder.linear_2": "t_embedder.mlp.2", "time_embed.linear": "t_block.1",
           "caption_projection.linear_1": "y_embedder.y_proj.fc1", "caption_projection.linear_2": "y_embedder.y_proj.fc2",
           "caption_norm": "attention_y_norm", "proj_out": "final_layer.linear"}
    block = {"attn1.to_out.0": "attn.proj", "attn2.to_q": "cross_attn.q_linear", "attn2.to_out.0": "cross_attn.proj",
             "ff.conv_inverted": "mlp.inverted_conv.conv", "ff.conv_depth": "mlp.depth_conv.conv", "ff.conv_point": "mlp.point_conv.conv"}
    layers = {int(k.split(".")[1]) for k in sd if k.startswith("transformer_blocks.")}
    for old, new in top.items():
        for param in ("weight", "bias"):
            if f"{old}.{param}" in sd:
                out[f"{new}.{param}"] = sd[f"{old}.{param}"]
    out["final_layer.scale_shift_table"] = sd["scale_shift_table"]
    for i in layers:
        src, dst = f"transformer_blocks.{i}", f"blocks.{i}"
        out[f"{dst}.scale_shift_table"] = sd[f"{src}.scale_shift_table"]
        out[f"{dst}.attn.qkv.weight"] = torch.cat([sd[f"{src}.attn1.to_{x}.weight"] for x in "qkv"])
        for param in ("weight", "bias"):
            out[f"{dst}.cross_attn.kv_linear.{param}"] = torch.cat([sd[f"{src}.attn2.to_{x}.{param}"] for x in "kv"])
            for old, new in block.items():
                if f"{src}.{old}.{param}" in sd:
                    out[f"{dst}.{new}.{param}"] = sd[f"{src}.{old}.{param}"]
    return {k: v.contiguous() for k, v in out.items()}


def test_the_original_checkpoint_loads_weight_for_weight(tmp_path):
    folder = resolve_tiny("tiny:sana").diffusers_dir
    model = Sana.load(str(folder))
    ours = model.transformer.state_dict()
    original = _original_layout(ours)
    save_file(original, str(tmp_path / "sana.safetensors"))
    torch.save({"state_dict": original}, tmp_path / "Sana_tiny.pth")  # the published checkpoints' container
    for name in ("sana.safetensors", "Sana_tiny.pth"):
        loaded = Sana.load(str(tmp_path / name), config_dir=str(folder), offline=True).transformer.state_dict()
        assert loaded.keys() == ours.keys() and all(torch.equal(loaded[k], ours[k]) for k in ours), name
    with pytest.raises(ValueError, match="output_model_format: Sana is saved as a diffusers folder"):
        model.save_single_file(tmp_path / "out.safetensors", None)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelLoadError, match="not a checkpoint; use a .safetensors / .pth / .pt"):
        Sana.load(str(tmp_path / "notes.txt"), config_dir=str(folder))
