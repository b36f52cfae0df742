"""Concepts tab → Upload images: files sent from the browser become the concept's folder."""

import io
import json
import zipfile
from pathlib import Path

from PIL import Image

from ot_gradio.ui.concepts import UPLOAD_NOTE
from ot_gradio.ui.state import load_ui_config


def png(color) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 32), color).save(out, format="PNG")
    return out.getvalue()


def test_uploaded_images_become_the_concepts_folder_and_a_pending_folder_edit_does_not_undo_it(page, tmp_path):
    config = page.on_page_load()[page.config_state]
    config, index = page.concepts.add(config, 0)
    up = tmp_path / "from-laptop"
    up.mkdir()
    (up / "a.png").write_bytes(png((255, 0, 0)))
    (up / "a.txt").write_text("a red square")
    archive = up / "more.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("more/poses/b.png", png((0, 255, 0)))
        z.writestr("more/poses/b.txt", "a green square")
    # the user typed a folder just before uploading: its edit is still in the log
    log = json.dumps([[1, "path", "/typed/before", index]])
    config, applied, note, changed = page.concepts.upload(config, index, log, 0, [str(up / "a.png"), str(up / "a.txt"), str(archive)])
    folder = (page.workspace / "datasets" / "concept_2").resolve()
    assert changed == {"path": str(folder), "include_subdirectories": True} and applied == 1
    concept = config["concepts"][index]
    assert concept["path"] == str(folder) and concept["include_subdirectories"] is True
    assert (folder / "a.txt").read_text() == "a red square" and (folder / "poses" / "b.png").is_file()
    assert "**Added to `datasets/concept_2`:** 2 images, 2 captions." in note and "*Include subfolders* is now on" in note
    # saved as the page's config, and what Start reads
    assert load_ui_config(page.workspace)["concepts"][index]["path"] == str(folder)
    stats, _ = page.concepts.statistics(config, index)
    assert "2" in stats and "Cannot read" not in stats
    # the upload folder stays the concept's: a second upload adds to it
    (up / "c.png").write_bytes(png((0, 0, 255)))
    config, _, note, changed = page.concepts.upload(config, index, log, applied, [str(up / "c.png")])
    assert changed["path"] == str(folder) and (folder / "c.png").is_file() and "1 image." in note
    # another concept shown: the note is the button's description again, not this upload's outcome
    assert page.concepts.show(config, 0)[page.concepts.upload_note] == UPLOAD_NOTE


def test_an_upload_of_nothing_readable_leaves_the_concept_as_it_was(page, tmp_path):
    config = page.on_page_load()[page.config_state]
    before = config["concepts"][0]["path"]
    (tmp_path / "notes.pdf").write_bytes(b"%PDF")
    (tmp_path / "broken.zip").write_bytes(b"not a zip")
    # a name typed just before: applied and saved with the upload's turn, though nothing was added
    log = json.dumps([[1, "name", "renamed", 0]])
    config, applied, note, changed = page.concepts.upload(config, 0, log, 0, [str(tmp_path / "notes.pdf")])
    assert not changed and config["concepts"][0]["path"] == before and "unchanged" in note and "`notes.pdf`" in note
    assert applied == 1 and load_ui_config(page.workspace)["concepts"][0]["name"] == "renamed"
    assert not (page.workspace / "datasets").exists() or not any((page.workspace / "datasets").iterdir())
    config, _, note, changed = page.concepts.upload(config, 0, None, 0, [str(tmp_path / "broken.zip")])
    assert not changed and "Nothing was added" in note and "broken.zip" in note
    assert Path(tmp_path / "notes.pdf").is_file()  # a file outside gradio's upload cache is not deleted
