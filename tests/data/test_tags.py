from collections import Counter
from types import SimpleNamespace

import pytest

from ot_gradio.config.concept import ConceptTextConfig
from ot_gradio.data import DataError
from ot_gradio.data.seeding import Streams
from ot_gradio.data.tags import TextAugment

CAPTION = "sks, red hair, blue eyes, smile, outdoors"
TAIL = ["red hair", "blue eyes", "smile", "outdoors"]


def _augment(folder=None, **text) -> TextAugment:
    return TextAugment.from_config(ConceptTextConfig(**text), folder)


def _runs(augment: TextAugment, caption: str = CAPTION, n: int = 400) -> list[str]:
    return [augment.apply(caption, Streams("test", i)) for i in range(n)]


def _tags(caption: str) -> list[str]:
    return caption.split(", ")


def test_nothing_enabled_leaves_caption_alone():
    augment = _augment()
    assert not augment.active
    assert augment.apply("a,b ,  c", Streams(0)) == "a,b ,  c"


def test_full_dropout_drops_all_but_kept_tags_at_once():
    out = _runs(_augment(tag_dropout_enable=True, tag_dropout_mode="FULL", tag_dropout_probability=0.5))
    assert set(out) == {"sks", CAPTION}
    assert 120 < out.count("sks") < 280
    kept_two = _runs(_augment(tag_dropout_enable=True, tag_dropout_probability=1.0, keep_tags_count=2))
    assert set(kept_two) == {"sks, red hair"}


def test_random_dropout_drops_each_tag_independently():
    out = _runs(_augment(tag_dropout_enable=True, tag_dropout_mode="RANDOM", tag_dropout_probability=0.5))
    assert all(c.startswith("sks") for c in out)
    dropped = Counter(t for c in out for t in TAIL if t not in _tags(c))
    assert all(140 < dropped[t] < 260 for t in TAIL), dropped
    assert len(set(out)) > 10
    assert all([t for t in _tags(c)[1:]] == [t for t in TAIL if t in _tags(c)] for c in out)  # order kept


def test_random_weighted_dropout_favours_later_tags():
    out = _runs(_augment(tag_dropout_enable=True, tag_dropout_mode="RANDOM WEIGHTED", tag_dropout_probability=1.0))
    dropped = Counter(t for c in out for t in TAIL if t not in _tags(c))
    assert dropped["outdoors"] == 400  # last tag: probability * 4/4
    assert 60 < dropped["red hair"] < 140  # first droppable tag: probability * 1/4
    assert dropped["red hair"] < dropped["blue eyes"] < dropped["smile"] < dropped["outdoors"]


def test_whitelist_tags_never_drop_and_blacklist_only_those_drop():
    white = _runs(
        _augment(
            tag_dropout_enable=True,
            tag_dropout_mode="RANDOM",
            tag_dropout_probability=0.9,
            tag_dropout_special_tags_mode="WHITELIST",
            tag_dropout_special_tags="smile, red hair",
        )
    )
    assert all("smile" in _tags(c) and "red hair" in _tags(c) for c in white)
    assert any("blue eyes" not in _tags(c) for c in white)
    black = _runs(
        _augment(
            tag_dropout_enable=True,
            tag_dropout_mode="RANDOM",
            tag_dropout_probability=0.9,
            tag_dropout_special_tags_mode="BLACKLIST",
            tag_dropout_special_tags="smile",
        )
    )
    assert all(set(TAIL) - {"smile"} <= set(_tags(c)) for c in black)
    assert 300 < sum("smile" not in _tags(c) for c in black)
    full_white = _runs(
        _augment(
            tag_dropout_enable=True,
            tag_dropout_probability=1.0,
            tag_dropout_special_tags_mode="WHITELIST",
            tag_dropout_special_tags="outdoors",
        )
    )
    assert set(full_white) == {"sks, outdoors"}


def test_special_tags_from_txt_and_csv_files_and_regex(tmp_path):
    (tmp_path / "keep.txt").write_text("smile\n\noutdoors\n")
    (tmp_path / "keep.csv").write_text("blue eyes,42\nsmile,7\n")
    options = dict(tag_dropout_enable=True, tag_dropout_probability=1.0, tag_dropout_special_tags_mode="WHITELIST")
    by_name = _augment(tmp_path, tag_dropout_special_tags="keep.txt", **options)  # found inside the concept folder
    assert _runs(by_name, n=5) == ["sks, smile, outdoors"] * 5
    by_path = _augment(None, tag_dropout_special_tags=str(tmp_path / "keep.csv"), **options)
    assert set(_runs(by_path, n=5)) == {"sks, blue eyes, smile"}
    regex = _augment(tag_dropout_special_tags=r".*(hair|eyes)", tag_dropout_special_tags_regex=True, **options)
    assert set(_runs(regex, "sks, red hair, (blue eyes), smile", n=5)) == {"sks, red hair, (blue eyes)"}
    literal = _augment(tag_dropout_special_tags=r".*(hair|eyes)", **options)  # regex off: an exact tag name
    assert set(_runs(literal, n=5)) == {"sks"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(tag_dropout_special_tags_mode="WHITELIST", tag_dropout_special_tags="missing.txt"), "does not exist"),
        (
            dict(tag_dropout_special_tags_mode="WHITELIST", tag_dropout_special_tags="(unclosed", tag_dropout_special_tags_regex=True),
            "regular expression",
        ),
        (dict(tag_dropout_mode="SOMETIMES"), "tag dropout mode"),
        (dict(tag_dropout_special_tags_mode="GREYLIST"), "special tags mode"),
    ],
)
def test_bad_dropout_settings_raise(tmp_path, options, message):
    with pytest.raises(DataError, match=message):
        _augment(tmp_path, tag_dropout_enable=True, tag_dropout_probability=0.5, **options)


def test_caps_modes_each_do_what_they_say():
    base = dict(caps_randomize_enable=True, caps_randomize_probability=1.0)
    caption = "sks, red hair, blue eyes"
    assert _augment(caps_randomize_mode="capslock", **base).apply(caption, Streams(1)) == "sks, RED HAIR, BLUE EYES"
    assert _augment(caps_randomize_mode="title", **base).apply(caption, Streams(1)) == "sks, Red Hair, Blue Eyes"
    assert _augment(caps_randomize_mode="first", **base).apply(caption, Streams(1)) == "sks, Red hair, Blue eyes"
    mixed = _runs(_augment(caps_randomize_mode="random", **base), caption, 50)
    assert all(c.startswith("sks, ") and c.lower() == caption for c in mixed) and len(set(mixed)) > 10
    every = _runs(_augment(**base), caption, 200)  # default: all four modes
    assert {"sks, RED HAIR, BLUE EYES", "sks, Red Hair, Blue Eyes"} <= set(every)


def test_caps_probability_lowercase_and_kept_tags():
    some = _runs(_augment(caps_randomize_enable=True, caps_randomize_mode="capslock", caps_randomize_probability=0.5), n=200)
    upper = Counter(t for c in some for t in _tags(c)[1:] if t.isupper())
    assert all(70 < upper[t.upper()] < 130 for t in TAIL), upper
    lower = _augment(caps_randomize_lowercase=True)  # OneTrainer lowercases even with randomisation off
    assert lower.apply("SKS, Red Hair, BLUE eyes", Streams(0)) == "SKS, red hair, blue eyes"
    kept = _augment(caps_randomize_enable=True, caps_randomize_mode="capslock", caps_randomize_probability=1.0, keep_tags_count=0)
    assert kept.apply("sks, red", Streams(0)) == "SKS, RED"
    with pytest.raises(DataError, match="capitalisation"):
        _augment(caps_randomize_enable=True, caps_randomize_probability=0.5, caps_randomize_mode="capslock, shouting")


def test_order_is_dropout_case_shuffle_and_kept_tags_stay_first():
    augment = _augment(
        keep_tags_count=2,
        enable_tag_shuffling=True,
        tag_dropout_enable=True,
        tag_dropout_mode="RANDOM",
        tag_dropout_probability=0.3,
        caps_randomize_enable=True,
        caps_randomize_probability=0.5,
    )
    out = _runs(augment, "sks, Woman, red hair, blue eyes, smile, outdoors, day", 300)
    assert all(c.startswith("sks, Woman") for c in out)
    assert len(set(out)) > 200
    assert _runs(augment, "sks, Woman, red hair, blue eyes, smile, outdoors, day", 300) == out  # seeded


def test_delimiter_is_respected():
    augment = _augment(enable_tag_shuffling=True, tag_delimiter=";", keep_tags_count=1)
    out = _runs(augment, "sks; a, b; c; d", 50)
    assert all(c.startswith("sks; ") and sorted(c.split("; ")[1:]) == ["a, b", "c", "d"] for c in out)
    assert len(set(out)) > 3
    spaces = _augment(enable_tag_shuffling=True, tag_delimiter=" ", keep_tags_count=0)
    assert all(sorted(c.split(" ")) == ["x", "y", "z"] for c in _runs(spaces, "x y  z", 20))
    assert augment.apply("a sentence with no delimiter", Streams(0)) == "a sentence with no delimiter"
    with pytest.raises(DataError, match="delimiter is empty"):
        TextAugment.from_config(SimpleNamespace(tag_delimiter="", enable_tag_shuffling=True))


def test_kohyas_keep_tokens_separator_fixes_what_comes_before_it_and_never_reaches_the_text_encoder():
    """`ohwx woman, 1girl ||| red hair, smile ||| masterpiece`: the head stays first and whole, the
    tail last, only the middle is shuffled or dropped (keep_tags_count gives way), and no `|||`."""
    caption = "ohwx woman, 1girl ||| red hair, blue eyes, smile ||| masterpiece"
    assert _augment().apply(caption, Streams(0)) == "ohwx woman, 1girl, red hair, blue eyes, smile, masterpiece"
    out = _runs(_augment(enable_tag_shuffling=True, keep_tags_count=3), caption)
    assert all(c.startswith("ohwx woman, 1girl, ") and c.endswith(", masterpiece") and "|||" not in c for c in out)
    assert len(set(out)) == 6  # every order of the three middle tags, the first of them moved too
    dropped = _runs(_augment(tag_dropout_enable=True, tag_dropout_probability=1.0), caption)
    assert set(dropped) == {"ohwx woman, 1girl, masterpiece"}
    assert _augment().apply("ohwx woman|||", Streams(0)) == "ohwx woman"


def test_caption_prefix_and_suffix_join_every_caption_before_shuffling():
    # kohya's caption_prefix / caption_suffix: with a space, before the tags are shuffled, so Keep tags counts the prefix
    augment = _augment(caption_prefix="ohwx,", caption_suffix=", masterpiece", enable_tag_shuffling=True, keep_tags_count=1)
    out = _runs(augment, "red hair, smile")
    assert all(c.startswith("ohwx, ") for c in out) and all(sorted(_tags(c)) == ["masterpiece", "ohwx", "red hair", "smile"] for c in out)
    assert len(set(out)) > 1  # the rest still shuffles, the suffix with it (joined before shuffling)
    assert any(not c.endswith("masterpiece") for c in out)
    assert _augment(caption_prefix="ohwx woman").apply("", Streams(0)) == "ohwx woman"  # an empty caption: the prefix alone
    assert _augment(caption_suffix="style").apply("a cat", Streams(0)) == "a cat style"


def test_a_trigger_word_replaces_trigger_in_captions_or_goes_before_them():
    """ai-toolkit's trigger_word: in place of each [trigger], else before a caption without it; then the prefix."""
    augment = _augment(trigger_word="p3r5on")
    assert augment.apply("[trigger] holding a sign, smiling", Streams(0)) == "p3r5on holding a sign, smiling"
    assert augment.apply("a photo of [trigger] and [trigger]", Streams(0)) == "a photo of p3r5on and p3r5on"
    assert augment.apply("p3r5on at the beach", Streams(0)) == "p3r5on at the beach"  # already there: as written
    assert augment.apply("a man at the beach", Streams(0)) == "p3r5on a man at the beach"
    assert augment.apply("", Streams(0)) == "p3r5on"
    assert _augment(trigger_word="p3r5on", caption_prefix="photo,").apply("[trigger] smiling", Streams(0)) == "photo, p3r5on smiling"
    assert _augment().apply("[trigger] smiling", Streams(0)) == "[trigger] smiling"  # no trigger word: as written
