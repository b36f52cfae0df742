"""Captions past CLIP's 77-token window: the words after the cut are not trained, and the run says
so (a WD14 tag list, a captioning model's paragraph); nothing is said where a long-window encoder
(T5, an LLM) reads the caption too."""

from pathlib import Path

from ot_gradio.models.tiny.sd15 import tiny_clip_tokenizer
from ot_gradio.training.caption_window import window_warnings

SHORT = "a photo of <cat>"  # the tiny tokenizer reads one token per byte: 75 bytes of text fit
LONG = "masterpiece, best quality, a cat sitting on a red sofa in a sunny room, looking at the viewer, <cat>"


def test_captions_past_the_clip_window_are_named_with_what_they_lose():
    clip = tiny_clip_tokenizer()
    captions = [(Path("/d/a.png"), SHORT), (Path("/d/b.png"), LONG), (Path("/d/c.png"), "<cat>, " + LONG.removesuffix(", <cat>"))]
    over, placeholder = window_warnings({"text_encoder": clip}, captions, lambda t: t, ["<cat>"])
    assert over.startswith("2 of 3 captions are longer than the text encoder's 77-token window (75 of text): the words past "
                           "it are not trained (b.png loses '")
    assert "c.png loses 'e viewer'" in over  # (the tiny tokenizer reads bytes: the cut falls inside a word) and "put what matters (the trigger word) first" in over
    assert placeholder.startswith("1 caption(s) have an embedding's placeholder past the text encoder's 77-token window") and "b.png" in placeholder
    # an embedding's placeholder counts as the tokens it becomes
    assert window_warnings({"text_encoder": clip}, [(Path("a.png"), SHORT)], lambda t: t.replace("<cat>", "x" * 70), []) != []
    assert window_warnings({"text_encoder": clip}, captions[:1], lambda t: t, ["<cat>"]) == []


def test_a_long_window_encoder_beside_clip_reads_the_whole_caption():
    t5_like = tiny_clip_tokenizer(model_max_length=512)
    captions = [(Path("b.png"), LONG)]
    assert window_warnings({"text_encoder": tiny_clip_tokenizer(), "text_encoder_2": t5_like}, captions, lambda t: t) == []


def test_with_more_windows_the_limit_is_theirs_and_the_warning_says_how_to_read_more():
    clip = tiny_clip_tokenizer()
    longer = (Path("d.png"), LONG + ", " + LONG)  # ~200 tokens
    sd = window_warnings({"text_encoder": clip}, [(Path("b.png"), LONG)], lambda t: t, can_widen=True)
    assert len(sd) == 1 and "read more with Training → Text encoder → Max caption tokens (150 or 225)" in sd[0]
    assert window_warnings({"text_encoder": clip}, [(Path("b.png"), LONG)], lambda t: t, windows=2, can_widen=True) == []
    (two,) = window_warnings({"text_encoder": clip}, [longer], lambda t: t, windows=2, can_widen=True)
    assert two.startswith("1 of 1 captions are longer than the 150 tokens of text read (Max caption tokens)")
    assert "Max caption tokens (150 or 225)" in two
    assert window_warnings({"text_encoder": clip}, [longer], lambda t: t, windows=3, can_widen=True) == []
    assert "Max caption tokens" not in window_warnings({"text_encoder": clip}, [longer], lambda t: t)[0]  # Würstchen, Cascade
