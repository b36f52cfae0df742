"""max_token_length past CLIP's 75 tokens (SD 1.x/2.x, SDXL): a caption read in 75-token windows,
each encoded as a prompt of its own and joined, as A1111 and ComfyUI read a long prompt."""

from __future__ import annotations

import contextlib

import pytest
import torch

from ot_gradio.config.schema import TrainConfig
from ot_gradio.models.long_captions import window_ids, windows_for
from ot_gradio.models.sdxl import StableDiffusionXL
from ot_gradio.models.tiny.sd15 import tiny_clip_tokenizer
from tests.models.family_checks import family_fixtures

tiny_sdxl_paths, sdxl = family_fixtures("sdxl", StableDiffusionXL, "tiny_sdxl_paths", "sdxl")

# the tiny tokenizer reads a one-letter word as one token: 100 of text
HEAD, TAIL = "a " * 75, "b " * 25
OTHER_TAIL = "c " * 25


@contextlib.contextmanager
def windows(model, count):
    model.caption_windows = count
    try:
        yield model
    finally:
        model.caption_windows = 1


def test_windows_are_whole_prompts_of_75_tokens():
    tokenizer = tiny_clip_tokenizer()
    bos, eos, pad = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    ids = window_ids(tokenizer, [HEAD + TAIL, "hi"], 3)
    assert ids.shape == (6, 77)
    a, b = tokenizer(HEAD, add_special_tokens=False).input_ids, tokenizer(TAIL, add_special_tokens=False).input_ids
    assert ids[0].tolist() == [bos, *a, eos]
    assert ids[1].tolist() == [bos, *b, eos] + [pad] * 50
    assert ids[2].tolist() == [bos, eos] + [pad] * 75  # an unused window: the empty prompt
    assert ids[3].tolist()[:4] == [bos, *tokenizer("hi", add_special_tokens=False).input_ids, eos]
    one = window_ids(tokenizer, [HEAD + TAIL], 1)  # CLIP's own window: cut at 75, as before
    assert torch.equal(one, tokenizer([HEAD + TAIL], padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids)
    assert [windows_for(n) for n in (None, 75, 150, 225)] == [1, 1, 2, 3]


def test_the_option_takes_whole_windows_only():
    assert TrainConfig(text_encoder_max_token_length=225).text_encoder_max_token_length == 225
    with pytest.raises(ValueError, match="75-token windows"):
        TrainConfig(text_encoder_max_token_length=100)


def test_sd15_reads_the_words_past_75_tokens(sd15):
    with torch.no_grad():
        cut = sd15.encode_text([HEAD + TAIL, HEAD + OTHER_TAIL])["encoder_hidden_states"]
        assert cut.shape[1] == 77 and torch.equal(cut[0], cut[1])  # CLIP's window: the tails are lost
        with windows(sd15, 2):
            long = sd15.encode_text([HEAD + TAIL, HEAD + OTHER_TAIL])["encoder_hidden_states"]
            assert long.shape == (2, 154, cut.shape[-1]) and not torch.equal(long[0], long[1])
            alone = sd15.encode_text([TAIL])["encoder_hidden_states"]
        # each window as its own prompt: the first is the cut caption's, the second the tail's alone
        assert torch.allclose(long[0, :77], cut[0], atol=1e-6)
        assert torch.allclose(long[0, 77:], sd15.encode_text([TAIL])["encoder_hidden_states"][0], atol=1e-6)
        assert alone.shape[1] == 154


def test_sdxl_joins_both_encoders_windows_and_pools_the_first(sdxl):
    with torch.no_grad():
        cut = sdxl.encode_text([HEAD + TAIL])
        with windows(sdxl, 3):
            long = sdxl.encode_text([HEAD + TAIL, HEAD + OTHER_TAIL])
            conditioning = {k: v[:1] for k, v in long.items()}
            out = sdxl.predict(torch.zeros(1, 4, 8, 8), torch.tensor([10]), conditioning)
    width = cut["encoder_hidden_states"].shape[-1]
    assert long["encoder_hidden_states"].shape == (2, 231, width)
    assert torch.allclose(long["encoder_hidden_states"][0, :77], cut["encoder_hidden_states"][0], atol=1e-6)
    assert not torch.equal(long["encoder_hidden_states"][0, 77:154], long["encoder_hidden_states"][1, 77:154])
    assert torch.allclose(long["text_embeds"][0], cut["text_embeds"][0], atol=1e-6)  # bigG's pooled: the first window's
    assert out.shape == (1, 4, 8, 8) and torch.isfinite(out).all()  # the UNet takes the longer sequence
