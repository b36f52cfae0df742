"""JSON nested too deeply (a few hundred kB of `[`, which makes `json.loads` raise RecursionError)
in the files a user brings and the values the page receives is a named error or an ignored value,
never a traceback (ot_gradio/jsontext.py)."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from ot_gradio import jsontext
from ot_gradio.config.concept import ConceptConfig
from ot_gradio.data import DataError, scan_concept

DEEP = "[" * 200_000 + "]" * 200_000


def test_jsontext_makes_deep_nesting_a_value_error():
    assert jsontext.loads('{"a": [1]}') == {"a": [1]}
    with pytest.raises(ValueError, match="nested too deeply"):
        jsontext.loads(DEEP)


def test_a_datasets_deeply_nested_caption_files_are_named(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    Image.new("RGB", (16, 16)).save(folder / "a.png")
    (folder / "captions.json").write_text(DEEP)
    with pytest.raises(DataError, match=r"captions.json could not be read as captions \(nested too deeply"):
        scan_concept(ConceptConfig(name="c", path=str(folder)))
    (folder / "captions.json").unlink()
    named = tmp_path / "meta.jsonl"
    named.write_text(json.dumps({"image_path": "a.png", "caption": "x"}) + "\n" + DEEP + "\n")
    with pytest.raises(DataError, match=r"Captions file .*meta.jsonl could not be read \(line 2 is not JSON \(nested too deeply"):
        scan_concept(ConceptConfig(name="c", path=str(folder), text={"captions_file": str(named)}))
    from ot_gradio.config.io import load_config  # a kohya import reading that metadata for its folder

    (tmp_path / "meta.json").write_text(DEEP)
    result = load_config({"pretrained_model_name_or_path": "/m/sd15.safetensors", "train_batch_size": 1,
                          "in_json": str(tmp_path / "meta.json")})
    assert result.config.concepts == [] and "without image_dir" in result.warnings[0]


def test_the_edit_log_and_set_overrides_take_deep_nesting_as_bad_input():
    """The edit log the browser sends, and a `--set` value (validation then names the field)."""
    from ot_gradio.config.io import ConfigError, apply_overrides, load_config
    from ot_gradio.ui import edit_log

    assert edit_log.entries(DEEP) == []
    data = apply_overrides({"config_version": 1}, [f"scheduler_params={DEEP}"])
    assert data["scheduler_params"] == DEEP
    with pytest.raises(ConfigError, match="scheduler_params"):
        load_config(data)
