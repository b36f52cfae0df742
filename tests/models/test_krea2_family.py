"""What only Krea 2 does: prompts encoded as Krea2Pipeline encodes them (the suffix after the
padding, the pipeline config's layer taps) and kept pruned to their real tokens, which the
transformer reads as it reads the pipeline's padded block; the native transformer file."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from ot_gradio.models.krea2 import SUFFIX, Krea2
from tests.models.family_checks import assert_sample_uses_cfg_and_the_negative_prompt, family_fixtures

tiny_krea2_paths, krea2 = family_fixtures("krea2", Krea2, "tiny_krea2_paths", "krea2")
PROMPTS = ["a red circle", "  two blue squares in a row, drawn fast "]


def test_prompts_are_the_pipelines_real_tokens_in_order_first_in_the_window(krea2):
    assert krea2.select_layers == (1, 2, 3, 4)  # the tiny folder's model_index.json, not the pipeline's default
    embeds, mask = krea2.pipeline().encode_prompt(PROMPTS, device="cpu")
    ours = krea2.encode_text(PROMPTS)
    hidden, kept = ours["encoder_hidden_states"], ours["attention_mask"]
    assert hidden.shape == embeds.shape and hidden.shape[2] == 4
    suffix = len(krea2.tokenizer(SUFFIX).input_ids)  # 5 with Qwen3-VL's tokenizer, more with the tiny one's bytes
    assert not mask[:, -suffix - 1].any() and mask[:, -suffix:].all()  # the pipeline's block: padding, then the suffix
    for i in range(len(PROMPTS)):
        n = int(mask[i].sum())
        torch.testing.assert_close(hidden[i, :n], embeds[i][mask[i]])
        assert kept[i, :n].all() and not kept[i, n:].any() and not hidden[i, n:].any()


def test_the_transformer_reads_the_pruned_prompts_as_the_pipelines_padded_block(krea2):
    from ot_gradio.models.flow_family import pack_latents, unpack_latents

    pipe = krea2.pipeline()
    embeds, mask = pipe.encode_prompt(PROMPTS, device="cpu")
    latents, t = torch.randn(2, 4, 8, 6, generator=torch.Generator().manual_seed(0)), torch.tensor([0.3, 0.8])
    with torch.no_grad():
        ours = krea2.predict(latents, t, krea2.encode_text(PROMPTS))
        theirs = krea2.transformer(hidden_states=pack_latents(latents), encoder_hidden_states=embeds, timestep=t,
                                   position_ids=pipe.prepare_position_ids(embeds.shape[1], 4, 3, "cpu"),
                                   encoder_attention_mask=mask, return_dict=False)[0]
    torch.testing.assert_close(ours, unpack_latents(theirs, 8, 6), atol=1e-5, rtol=1e-4)


def test_sample_uses_cfg_and_the_negative_prompt(krea2):
    assert_sample_uses_cfg_and_the_negative_prompt(krea2, "a red circle", plain_cfg=0.0)


def test_the_native_transformer_file_reads_back_through_from_single_file(krea2, tiny_krea2_paths, tmp_path):
    out = krea2.save_single_file(tmp_path / "krea2.safetensors", torch.float32)
    with safe_open(str(out), "pt") as f:
        assert {"blocks.0.mod.lin", "blocks.0.attn.wq.weight", "txtfusion.projector.weight", "last.modulation.lin"} <= set(f.keys())
        assert f.get_tensor("blocks.0.mod.lin").ndim == 1 and f.metadata()["ot_gradio.model_type"] == "KREA_2"
    again = Krea2.load(str(out), config_dir=str(tiny_krea2_paths.diffusers_dir), offline=True)
    a, b = krea2.transformer.state_dict(), again.transformer.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_layer_skip_is_refused_naming_the_layers_read(krea2):
    with pytest.raises(ValueError, match="text_encoder_layer_skip: Krea 2 reads fixed layers of its text encoder"):
        krea2.layer_skips = {"text_encoder": 1}
