"""Caption editor: one edit, paging thousands of images, bulk edits with preview and undo, the
command line and the page's handlers (called directly with what the page sends)."""

from pathlib import Path

import gradio as gr
import PIL.Image
import pytest

from ot_gradio.cli import main as cli_main
from ot_gradio.data.scan import list_image_files
from ot_gradio.tools import captions as core
from ot_gradio.tools.captions import BulkOp, CaptionError


def tiny_png(path: Path, colour=(255, 0, 0)) -> Path:
    PIL.Image.new("RGB", (8, 8), colour).save(path)
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every visible file's bytes (the hidden .ot_captions folder left out)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)}


@pytest.fixture
def dataset(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    for name in ("a", "b", "c", "d"):
        tiny_png(folder / f"{name}.png")
    (folder / "a.txt").write_bytes(b"a red cat, sitting\nanother cat")
    (folder / "b.txt").write_bytes(b"\xef\xbb\xbfa red dog\r\n")  # BOM + CRLF: must come back byte for byte
    (folder / "c.txt").write_bytes("caf\xe9 red".encode("latin-1"))  # old Windows editor
    return folder  # d.png has no caption


def test_edit_one_caption_is_atomic_and_keeps_a_backup(dataset):
    assert core.write_caption(dataset / "a.png", "  a blue cat  \n\n") is True
    assert (dataset / "a.txt").read_text() == "a blue cat"
    assert core.backup_file(dataset / "a.txt").read_bytes() == b"a red cat, sitting\nanother cat"
    assert core.write_caption(dataset / "a.png", "a blue cat") is False  # unchanged: no write
    assert not [p for p in dataset.rglob("*.tmp")]
    # a new caption, several lines = several captions
    core.write_caption(dataset / "d.png", "first caption\nsecond caption\n")
    assert (dataset / "d.txt").read_text() == "first caption\nsecond caption"
    assert not core.backup_file(dataset / "d.txt").exists()
    with pytest.raises(CaptionError, match="does not exist"):
        core.write_caption(dataset / "zz.png", "x")
    # a scan of the concept never takes backups or the journal for images or captions
    assert [p.name for p in list_image_files(dataset, recursive=True)] == ["a.png", "b.png", "c.png", "d.png"]


def test_paging_thousands_of_images_never_opens_one(tmp_path, monkeypatch):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(2000):
        (folder / f"img{i:04d}.png").write_bytes(b"")  # not even a valid image: listing must not care
    (folder / "img0001.txt").write_text("caption one")
    opened = []
    real_open = PIL.Image.open
    monkeypatch.setattr(PIL.Image, "open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    probed = []
    real_caption_file = core.caption_file
    monkeypatch.setattr(core, "caption_file", lambda image: probed.append(image) or real_caption_file(image))
    page = core.page_of(folder, 1, 24)
    assert set(probed) == {item.image for item in page.items}  # only the page's 24 images are looked at, not all 2000
    assert (page.total, page.pages, len(page.items)) == (2000, 84, 24)
    assert page.items[1].caption == "caption one" and page.items[1].has_caption and not page.items[0].has_caption
    last = core.page_of(folder, 999, 24)  # clamped to the last page
    assert last.page == 84 and [i.name for i in last.items][0] == "img1992.png" and len(last.items) == 8
    assert opened == []


def test_bulk_replace_preview_apply_and_undo_round_trip(dataset):
    before = snapshot(dataset)
    op = BulkOp("replace", find="red", replace="green")
    changes = core.preview(dataset, op)
    assert sorted(c.name for c in changes) == ["a.png", "b.png", "c.png"]
    assert snapshot(dataset) == before  # preview writes nothing
    applied = core.apply(dataset, BulkOp("replace", find="red", replace="green"))
    assert len(applied) == len(changes)
    after = snapshot(dataset)
    assert sum(after[k] != before[k] for k in before) == len(changes)
    assert after["a.txt"] == b"a green cat, sitting\nanother cat"
    assert after["c.txt"].decode("utf-8") == "caf\xe9 green"
    assert core.last_operation(dataset) == "replace 'red' with 'green'"
    operation, restored = core.undo_last(dataset)
    assert operation.startswith("replace") and len(restored) == 3
    assert snapshot(dataset) == before  # exact bytes: BOM, CRLF and latin-1 included
    with pytest.raises(CaptionError, match="nothing to undo"):
        core.undo_last(dataset)


def test_undo_deletes_captions_the_operation_created(dataset):
    before = snapshot(dataset)
    changes = core.apply(dataset, BulkOp("prefix", text="photo of"))
    assert {c.name: c.after for c in changes}["d.png"] == "photo of"
    assert (dataset / "d.txt").read_text() == "photo of"
    assert (dataset / "a.txt").read_text() == "photo of a red cat, sitting\nphoto of another cat"
    assert core.preview(dataset, BulkOp("prefix", text="photo of")) == []  # already there: not doubled
    core.undo_last(dataset)
    assert not (dataset / "d.txt").exists()
    assert snapshot(dataset) == before


def test_add_and_remove_tags(dataset):
    core.write_caption(dataset / "a.png", "cat, Red ,  sitting")
    core.apply(dataset, BulkOp("add_tags", text=" red, blue,, blue ,tail"))
    assert (dataset / "a.txt").read_text() == "cat, Red ,  sitting, blue, tail"  # Red already there (any case)
    assert (dataset / "d.txt").read_text() == "red, blue, tail"
    core.apply(dataset, BulkOp("remove_tags", text="RED, tail"))
    assert (dataset / "a.txt").read_text() == "cat, sitting, blue"
    assert (dataset / "d.txt").read_text() == "blue"
    assert core.preview(dataset, BulkOp("remove_tags", text="nothing-here")) == []
    core.apply(dataset, BulkOp("suffix", text="masterpiece", files=["a.png"]))
    assert (dataset / "a.txt").read_text() == "cat, sitting, blue masterpiece"
    with pytest.raises(CaptionError, match="tags"):
        core.preview(dataset, BulkOp("add_tags", text=" , "))


def test_selection_scope_and_regex(dataset):
    before = snapshot(dataset)
    changes = core.apply(dataset, BulkOp("replace", find=r"a (\w+) (\w+)", replace=r"\2 \1", regex=True, files=["b.png", str(dataset / "d.png")]))
    assert [c.name for c in changes] == ["b.png"]  # d.png has no caption: replace never creates one
    after = snapshot(dataset)
    assert after["b.txt"] == b"dog red\r\n"  # line ending kept; the BOM is dropped (plain UTF-8 is written)
    assert {k for k in before if before[k] != after[k]} == {"b.txt"}
    with pytest.raises(CaptionError, match="regular expression"):
        core.preview(dataset, BulkOp("replace", find="(", regex=True))
    with pytest.raises(CaptionError, match="not inside"):
        core.preview(dataset, BulkOp("replace", find="a", files=["../elsewhere.png"]))


def test_cli_round_trip(dataset, capsys):
    before = snapshot(dataset)
    assert cli_main(["caption", "replace", str(dataset), "--find", "red", "--replace", "blue", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would change 3 file(s)" in out and "+ a blue cat" in out
    assert snapshot(dataset) == before
    assert cli_main(["caption", "add-tags", str(dataset), "x, y", "--files", "d.png"]) == 0
    assert (dataset / "d.txt").read_text() == "x, y"
    assert cli_main(["caption", "undo", str(dataset)]) == 0
    assert snapshot(dataset) == before
    assert cli_main(["caption", "set", str(dataset / "d.png"), "one\\ntwo"]) == 0
    assert (dataset / "d.txt").read_text() == "one\ntwo"
    assert cli_main(["caption", "list", str(dataset)]) == 0
    assert "d.png\tone | two" in capsys.readouterr().out
    assert cli_main(["caption", "undo", str(dataset)]) == 2
    assert "nothing to undo" in capsys.readouterr().err


# --- the page's handlers ---------------------------------------------------------------------------
@pytest.fixture
def tool(tmp_path, dataset):
    from ot_gradio.ui.tools_captions import CaptionsTool
    from ot_gradio.ui.tools_tab import ToolsContext

    config = {"concepts": [{"path": str(dataset)}]}
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with gr.Blocks():
        state = gr.State(config)
        ctx = ToolsContext(workspace, None, state, lambda cfg: [workspace, dataset], config=config)
        built = CaptionsTool(ctx)
    built.config = config
    return built


def test_ui_open_select_save_and_move(tool, dataset, tmp_path, monkeypatch):
    assert tool.folder.value == str(dataset)  # the first concept's folder
    for i in range(30):
        tiny_png(dataset / f"z{i:02d}.png", (i * 8, 0, 0))
    opened = []
    real_open = PIL.Image.open
    monkeypatch.setattr(PIL.Image, "open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    out = tool.on_open("", False, ["old"], tool.config)
    view = out[tool.view]
    assert view["page"] == 1 and len(view["names"]) == 24 and "34 images" in out[tool.page_info]
    assert len(opened) == 24  # thumbnails only for the shown page
    assert all(str(tmp_path / "workspace") in path for path, _ in out[tool.gallery])  # cached in the workspace, not the dataset
    assert not any(p.suffix == ".jpg" for p in dataset.rglob("*"))
    assert out[tool.current] == "a.png" and out[tool.editor].startswith("a red cat")
    assert out[tool.gallery][0][1] == "a.png: a red cat, sitting | another cat"

    sel = tool.on_select(view, 3, tool.config)
    assert sel[tool.current] == "d.png" and sel[tool.editor] == ""
    saved = tool.on_save(view, "d.png", "new one\nnew two", tool.config)
    assert saved[tool.status] == "saved d.txt" and (dataset / "d.txt").read_text() == "new one\nnew two"
    # Down on the last line: the edit is saved, then the next image is shown
    moved = tool.on_next_image(view, "d.png", "edited before moving", [], tool.config)
    assert moved[tool.current] == "z00.png" and (dataset / "d.txt").read_text() == "edited before moving"
    last = tool.on_next_image(view, view["names"][-1], "", [], tool.config)  # past the page's end: page 2
    assert last[tool.view]["page"] == 2 and last[tool.current] == "z20.png"
    back = tool.on_prev_image(last[tool.view], "z20.png", "", [], tool.config)
    assert back[tool.view]["page"] == 1 and back[tool.current] == view["names"][-1]
    first = tool.on_prev_image(view, "a.png", "a red cat, sitting\nanother cat", [], tool.config)
    assert first[tool.current] == "a.png" and first[tool.status] == ""  # nothing before the first image
    assert tool.on_next_page(view, ["b.png"], tool.config)[tool.selection]["value"] == ["b.png"]


def test_a_concept_reading_a_captions_file_is_said_when_its_folder_opens(tool, dataset, tmp_path):
    """A concept whose Captions file holds its captions (kohya's metadata): the caption editor says
    the .txt files it saves there are not what that concept trains with."""
    plain = tool.on_open(str(dataset), False, [], tool.config)
    assert plain[tool.status] == ""
    config = {"concepts": [{"name": "ft", "path": str(dataset), "text": {"captions_file": str(tmp_path / "meta_cap.json")}}]}
    noted = tool.on_open(str(dataset), False, [], config)
    assert "concept 'ft' trains with the captions of its Captions file" in noted[tool.status]
    assert "edits here are saved to .txt files it does not read" in noted[tool.status]


def test_ui_bulk_preview_apply_undo_and_refusals(tool, dataset, tmp_path):
    before = snapshot(dataset)
    view = tool.on_open(str(dataset), False, [], tool.config)[tool.view]
    args = (view, "replace", "red", "green", False, "", "folder", [], tool.config)
    pre = tool.on_preview(*args)
    assert pre[tool.bulk_status].startswith("**3 files change**") and len(pre[tool.diff]) == 3
    assert snapshot(dataset) == before
    done = tool.on_apply(*args, "a.png")
    assert done[tool.bulk_status].startswith("**3 files changed**")
    assert done[tool.editor] == "a green cat, sitting\nanother cat"
    undone = tool.on_undo(view, "a.png", tool.config)
    assert undone[tool.bulk_status].startswith("**undone**") and snapshot(dataset) == before
    sel = tool.on_apply(view, "add_tags", "", "", False, "tag", "selection", ["d.png"], tool.config)
    assert sel[tool.bulk_status].startswith("**1 files changed**") and (dataset / "d.txt").read_text() == "tag"
    assert "pick one or more" in tool.on_preview(view, "add_tags", "", "", False, "t", "selection", [], tool.config)[tool.bulk_status]
    # anything outside the page's folders is refused with the field's name, nothing written
    outside = tmp_path / "outside"
    outside.mkdir()
    tiny_png(outside / "x.png")
    refused = tool.on_open(str(outside), False, [], tool.config)
    assert refused[tool.status].startswith("**refused** Dataset folder:") and "outside" in refused[tool.status]
    bad_view = {"folder": str(outside), "page": 1, "names": ["x.png"]}
    assert "refused" in tool.on_save(bad_view, "x.png", "hacked", tool.config)[tool.status]
    assert "refused" in tool.on_apply(bad_view, "prefix", "", "", False, "p", "folder", [], tool.config)[tool.bulk_status]
    assert "refused" in tool.on_save(view, "../outside/x.png", "hacked", tool.config)[tool.status]
    assert not (outside / "x.txt").exists()


def test_clips_are_listed_shown_by_their_first_frame_and_captioned(tool, dataset, tmp_path):
    from tests.video_clips import write_clip

    write_clip(dataset / "walk.mp4", frames=5, size=(32, 32))
    (dataset / "broken.webm").write_bytes(b"not a clip at all" * 50)
    out = tool.on_open(str(dataset), False, [], tool.config)
    names = out[tool.view]["names"]
    assert names == ["a.png", "b.png", "broken.webm", "c.png", "d.png", "walk.mp4"]
    thumbs = dict((label.split(":")[0], path) for path, label in out[tool.gallery])
    with PIL.Image.open(thumbs["walk.mp4"]) as thumb:  # the clip's first frame: the bright square over dark noise
        assert thumb.size == (32, 32) and max(thumb.convert("L").getdata()) > 150 and min(thumb.convert("L").getdata()) < 90
    with PIL.Image.open(thumbs["broken.webm"]) as thumb:  # unreadable: the grey placeholder, no error
        assert thumb.getpixel((0, 0)) == (200, 200, 200)
    sel = tool.on_select(out[tool.view], names.index("walk.mp4"), tool.config)
    assert sel[tool.current] == "walk.mp4" and sel[tool.editor] == ""
    assert tool.on_save(out[tool.view], "walk.mp4", "a person walking", tool.config)[tool.status] == "saved walk.txt"
    core.apply(dataset, BulkOp("add_tags", text="video", files=["walk.mp4"]))
    assert (dataset / "walk.txt").read_text() == "a person walking, video"
    assert sel[tool.clip]["visible"] is True and Path(sel[tool.clip]["value"]).read_bytes() == (dataset / "walk.mp4").read_bytes()
    assert str(dataset) not in sel[tool.clip]["value"]  # played from gradio's cache, not served from the dataset
    assert tool.on_select(out[tool.view], 0, tool.config)[tool.clip]["visible"] is False  # an image: no player


def test_a_kohya_caption_file_is_the_one_edited(tmp_path):
    """An image captioned for kohya (`<stem>.caption`, no `.txt`) shows and saves that file, the
    one training reads; the edit keeps its previous text as a backup and a bulk edit is undone."""
    folder = tmp_path / "40_ohwx woman"
    folder.mkdir()
    image = tiny_png(folder / "a.png")
    (folder / "a.caption").write_text("ohwx woman\n")
    assert core.read_caption(image) == "ohwx woman\n"
    assert core.write_caption(image, "ohwx woman, smiling")
    assert (folder / "a.caption").read_text() == "ohwx woman, smiling" and not (folder / "a.txt").exists()
    assert core.backup_file(folder / "a.caption").read_text() == "ohwx woman\n"
    core.apply(folder, BulkOp(kind="add_tags", text="red dress"))
    assert (folder / "a.caption").read_text() == "ohwx woman, smiling, red dress"
    core.undo_last(folder)
    assert (folder / "a.caption").read_text() == "ohwx woman, smiling" and not (folder / "a.txt").exists()


def test_captions_from_the_folders_index_are_shown_and_edits_write_them_to_a_txt(dataset):
    """An image captioned by the folder's captions.json (which training reads where there is no
    caption file) shows those captions; a bulk prefix writes them, prefixed, to its .txt (which
    then wins), and undo takes that file away again."""
    import json

    (dataset / "captions.json").write_text(json.dumps({"d.png": ["a green cat", "a cat"]}))
    item = next(i for i in core.page_of(dataset).items if i.name == "d.png")
    assert (item.caption, item.has_caption) == ("a green cat\na cat", False)
    core.apply(dataset, BulkOp("prefix", text="ohwx,", files=["d.png"]))
    assert (dataset / "d.txt").read_text() == "ohwx, a green cat\nohwx, a cat"
    core.undo_last(dataset)
    assert not (dataset / "d.txt").exists()
