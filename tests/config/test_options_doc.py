"""docs/OPTIONS.md is the schema's reference of every option: it must be what the schema gives now."""

from pathlib import Path

from ot_gradio.config.fields import iter_fields
from ot_gradio.config.options_doc import render
from ot_gradio.config.schema import TrainConfig

OPTIONS_MD = Path(__file__).resolve().parents[2] / "docs" / "OPTIONS.md"


def test_options_md_is_current():
    assert OPTIONS_MD.read_text(encoding="utf-8") == render(), (
        "docs/OPTIONS.md is out of date: run .venv/bin/python scripts/options_doc.py")


def test_every_option_is_in_the_reference():
    text = render()
    parts = ("unet.", "prior.", "transformer.", "unconditional_transformer.", "text_encoder", "vae.",
             "effnet_encoder.", "decoder")
    missing = [f.path for f in iter_fields(TrainConfig)
               if not f.compat and not f.group and not f.path.startswith(parts) and f"`{f.path}`" not in text]
    assert not missing, f"options missing from docs/OPTIONS.md: {missing}"
