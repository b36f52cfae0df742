"""The Samples table holds every sample field the page lets a user set, the control image too (the
image an editing sample edits, or an image-to-video sample starts from): it was settable only in a
config file."""

from ot_gradio.ui.samples import COLUMNS, from_rows, to_rows


def test_a_control_image_typed_in_the_table_reaches_the_sample_and_other_fields_are_kept():
    previous = [{"prompt": "a cat", "control_image": "", "sample_inpainting": True}]
    rows = to_rows(previous)
    index = [key for key, _, _ in COLUMNS].index("control_image")
    assert rows[0][index] == ""
    rows[0][index] = "/data/start.png"
    sample = from_rows(rows, previous)[0]
    assert sample["control_image"] == "/data/start.png" and sample["prompt"] == "a cat" and sample["sample_inpainting"] is True
    assert to_rows([sample])[0][index] == "/data/start.png"
