import logging

import pytest
from PIL import Image

from ot_gradio.config.concept import ConceptConfig
from ot_gradio.data import DataError, scan_concept


def test_finds_images_case_insensitively_sorted_and_ignores_others(tmp_path, write_image, make_concept):
    folder = tmp_path / "c"
    for name in ["b.PNG", "a.jpg", "c.JPEG", "d.webp", "e.Bmp", "Z.png"]:
        write_image(folder / name, 16, 16)
    (folder / "notes.md").write_text("hi")
    (folder / "model.safetensors").write_bytes(b"x")
    write_image(folder / ".hidden.png", 16, 16)
    write_image(folder / "sub" / "deep.png", 16, 16)
    scan = scan_concept(make_concept(folder))
    assert [i.relpath for i in scan.items] == ["Z.png", "a.jpg", "b.PNG", "c.JPEG", "d.webp", "e.Bmp"]
    assert not scan.skipped


def test_subdirectories_when_enabled(tmp_path, write_image, make_concept):
    folder = tmp_path / "c"
    write_image(folder / "top.png", 16, 16)
    write_image(folder / "sub" / "deep.png", 16, 16)
    write_image(folder / "sub" / "more" / "deeper.jpg", 16, 16)
    write_image(folder / ".cache" / "x.png", 16, 16)
    scan = scan_concept(make_concept(folder, include_subdirectories=True))
    assert [i.relpath for i in scan.items] == ["sub/deep.png", "sub/more/deeper.jpg", "top.png"]


def test_masks_are_not_training_images(tmp_path, write_image, make_concept):
    folder = tmp_path / "c"
    write_image(folder / "cat.jpg", 16, 16)
    Image.new("L", (16, 16), 255).save(folder / "cat-masklabel.png")
    write_image(folder / "dog.png", 16, 16)
    Image.new("L", (16, 16), 0).save(folder / "orphan-masklabel.png")
    scan = scan_concept(make_concept(folder))
    assert [i.relpath for i in scan.items] == ["cat.jpg", "dog.png"]
    assert scan.items[0].mask_path == (folder / "cat-masklabel.png").resolve()
    assert scan.items[1].mask_path is None
    assert scan.mask_count == 1


def test_unreadable_mask_is_ignored_with_warning(tmp_path, write_image, make_concept):
    folder = tmp_path / "c"
    write_image(folder / "cat.png", 16, 16)
    (folder / "cat-masklabel.png").write_bytes(b"")
    scan = scan_concept(make_concept(folder))
    assert scan.items[0].mask_path is None
    assert any("cat-masklabel.png" in w for w in scan.warnings)


def test_bad_images_are_skipped_with_one_warning_each(tmp_path, write_image, make_concept, caplog):
    folder = tmp_path / "c"
    write_image(folder / "good.png", 16, 16)
    (folder / "empty.png").write_bytes(b"")
    (folder / "garbage.jpg").write_bytes(b"this is not a jpeg")
    write_image(folder / "cut.jpg", 64, 64)
    data = (folder / "cut.jpg").read_bytes()
    (folder / "cut.jpg").write_bytes(data[: len(data) // 2])
    write_image(folder / "cut2.png", 64, 64)
    data = (folder / "cut2.png").read_bytes()
    (folder / "cut2.png").write_bytes(data[: len(data) - 40])
    with caplog.at_level(logging.WARNING, logger="ot_gradio.data.scan"):  # cli_report quiets ot_gradio.data in-process
        scan = scan_concept(make_concept(folder))
    assert [i.relpath for i in scan.items] == ["good.png"]
    skipped = sorted(s.path.name for s in scan.skipped)
    assert skipped == ["cut.jpg", "cut2.png", "empty.png", "garbage.jpg"]
    for name in skipped:
        assert sum(name in r.getMessage() for r in caplog.records) == 1


def test_odd_modes_are_accepted(tmp_path, write_image, make_concept):
    import numpy as np

    folder = tmp_path / "c"
    Image.new("CMYK", (16, 8), (0, 255, 0, 0)).save(folder.mkdir() or folder / "cmyk.jpg")
    Image.fromarray(np.full((8, 16), 40000, dtype=np.uint16)).save(folder / "g16.png")
    Image.new("P", (16, 8)).save(folder / "pal.png")
    Image.new("RGBA", (16, 8), (0, 0, 0, 0)).save(folder / "alpha.png")
    scan = scan_concept(make_concept(folder))
    assert len(scan.items) == 4 and not scan.skipped
    assert all((i.width, i.height) == (16, 8) for i in scan.items)


def test_missing_folder_and_empty_folder_raise(tmp_path, make_concept, write_image):
    with pytest.raises(DataError, match="my concept.*does not exist"):
        scan_concept(make_concept(tmp_path / "nope", name="my concept"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("x")
    with pytest.raises(DataError, match=r"empty.*no images"):
        scan_concept(make_concept(tmp_path / "empty"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.png").write_bytes(b"")
    with pytest.raises(DataError, match="none of the 1 images"):
        scan_concept(make_concept(tmp_path / "bad"))
    with pytest.raises(DataError, match="no folder"):
        scan_concept(ConceptConfig(name="blank", path=""))


def test_sample_captions_multi_line_missing_and_empty(tmp_path, write_image, make_concept):
    folder = tmp_path / "c"
    for name in ["a", "b", "c"]:
        write_image(folder / f"{name}.png", 16, 16)
    (folder / "a.txt").write_text("first caption\n\n   second caption  \n")
    (folder / "c.txt").write_text("  \n")
    scan = scan_concept(make_concept(folder))
    assert scan.items[0].captions == ("first caption", "second caption")
    assert scan.items[1].captions == ("",)
    assert scan.items[2].captions == ("",)
    assert sorted(p.name for p in scan.uncaptioned) == ["b.png", "c.png"]
    assert any("2 image(s) have no caption" in w for w in scan.warnings)


@pytest.mark.parametrize("rule, expected", [("EACH", ("first caption", "second caption")), ("FIRST", ("first caption",)),
                                           ("WHOLE", ("first caption\n\n   second caption",))])  # the file as read there
def test_caption_file_lines_each_first_or_whole(tmp_path, write_image, make_concept, rule, expected):
    """A caption file of several lines: a caption a line (OneTrainer), its first line (kohya's
    sd-scripts), or one caption of them all (diffusion-pipe, musubi-tuner, ai-toolkit); the page's
    count of such files (its 'several lines' note) follows what is trained."""
    from ot_gradio.data.scan import concept_captions

    folder = tmp_path / "c"
    write_image(folder / "a.png", 16, 16)
    (folder / "a.txt").write_text("first caption\n\n   second caption  \n")
    concept = make_concept(folder, text={"caption_lines": rule})
    scan = scan_concept(concept)
    assert scan.items[0].captions == expected == concept_captions(concept)[0]
    assert scan.several_lines == (rule == "EACH")
    (folder / "a.txt").write_text("\nsecond line\n")  # kohya's first line is the blank one: no caption
    assert scan_concept(concept).items[0].captions == (("",) if rule == "FIRST" else ("second line",))


def test_a_folders_captions_json_and_metadata_jsonl_caption_the_images_without_a_file(tmp_path, write_image, make_concept):
    """diffusion-pipe's captions.json (by file name, for its own folder's images; a list is several
    captions, kept apart whatever Caption file lines says) and Hugging Face's metadata.jsonl (a row
    a caption, its file_name from its own folder, subfolders' files too); a caption file beside an
    image wins; entries naming no image are counted; the same captions for the checks before Start."""
    import json

    from ot_gradio.data.scan import concept_captions

    folder = tmp_path / "c"
    for name in ("a.png", "b.png", "c.png", "sub/a.png", "train/t1.png"):
        write_image(folder / name, 16, 16)
    (folder / "captions.json").write_text(json.dumps({"a.png": ["a red fox", "a fox, red"], "b.png": "from the json", "x.png": "gone"}))
    (folder / "b.txt").write_text("its own file")
    (folder / "train" / "metadata.jsonl").write_text('{"file_name": "t1.png", "text": "a train"}\n'
                                                     '{"file_name": "./t1.png", "text": 1989}\n')
    concept = make_concept(folder, include_subdirectories=True)
    scan = scan_concept(concept)
    got = {i.relpath: i.captions for i in scan.items}
    assert got == {"a.png": ("a red fox", "a fox, red"), "b.png": ("its own file",), "c.png": ("",),
                   "sub/a.png": ("",), "train/t1.png": ("a train", "1989")}  # (sub/a.png: not captions.json's a.png)
    assert (scan.from_index, scan.caption_index) == (2, ["captions.json", "train/metadata.jsonl"])
    assert [p.relative_to(folder).as_posix() for p in scan.uncaptioned] == ["c.png", "sub/a.png"]
    assert any("1 entries of captions.json, train/metadata.jsonl name no image" in w for w in scan.warnings)
    assert scan.index_unmatched == 1  # (the Concepts tab's statistics say it too)
    assert [got[i.relpath] for i in scan.items] == concept_captions(concept)
    whole = scan_concept(make_concept(folder, include_subdirectories=True, text={"caption_lines": "WHOLE"}))
    assert whole.items[0].captions == ("a red fox", "a fox, red")  # an index's captions are captions of their own
    first = scan_concept(make_concept(folder, include_subdirectories=True, text={"caption_lines": "FIRST"}))
    assert first.items[0].captions == ("a red fox",)

    (folder / "captions.json").write_bytes(json.dumps({"c.png": "utf-16"}).encode("utf-16"))  # PowerShell's "Unicode"
    assert scan_concept(concept).items[2].captions == ("utf-16",)
    (folder / "captions.json").write_text("{not json")
    with pytest.raises(DataError, match=r"captions.json could not be read as captions .* fix it, or move it out"):
        scan_concept(concept)
    with pytest.raises(DataError, match=r"captions.json could not be read as captions"):
        concept_captions(concept)


def test_a_concepts_captions_file_kohya_metadata_or_another_index_elsewhere(tmp_path, write_image, make_concept):
    """Captions file: kohya's fine-tuning metadata as merge_captions_to_metadata.py writes it (names
    without their extension, or whole paths with --full_path; caption then tags, joined by the tag
    delimiter as sd-scripts joins them; meta_lat.json's other keys ignored) and its .jsonl rows. As
    in sd-scripts' fine-tuning, the images it names train, with its captions (a caption file beside
    one is not read), the others are left out and counted; with Caption file lines EACH (kohya's
    enable_wildcard) each caption line is a caption with the tags. A Hugging Face metadata.jsonl
    named inside the folder reads its names from its own folder. The folder's own index files are
    not read then; a missing, unreadable or unmatched file stops the run naming it."""
    import json

    from ot_gradio.data.scan import concept_captions

    folder = tmp_path / "imgs"
    for name in ("a.png", "b.jpg", "c.webp", "d.png", "sub/e.png", "x.png"):
        write_image(folder / name, 16, 16)
    (folder / "captions.json").write_text(json.dumps({"d.png": "from the folder's index"}))  # not read: a file is named
    (folder / "b.txt").write_text("its own file")
    meta = tmp_path / "train" / "meta_lat.json"
    meta.parent.mkdir()
    meta.write_text(json.dumps({"a": {"caption": "a photo of a fox", "tags": "1girl, solo", "train_resolution": [512, 512]},
                                "b": {"caption": "b from the metadata"},
                                str(folder / "c.webp"): {"tags": "only tags"},
                                "d": {"caption": ""},
                                "sub/e": {"caption": "two lines\nof caption", "tags": "t"},
                                "gone": {"caption": "names no image"}}))
    concept = make_concept(folder, include_subdirectories=True, text={"captions_file": str(meta), "caption_lines": "FIRST"})
    scan = scan_concept(concept)
    got = {i.relpath: i.captions for i in scan.items}
    assert got == {"a.png": ("a photo of a fox,1girl, solo",), "b.jpg": ("b from the metadata",), "c.webp": ("only tags",),
                   "d.png": ("",), "sub/e.png": ("two lines\nof caption,t",)}  # (x.png: not named, left out)
    assert (scan.from_index, scan.caption_index, scan.index_unmatched) == (4, [str(meta)], 1)
    assert any("1 of the folder's images are not named in its Captions file" in w for w in scan.warnings)
    assert [got[i.relpath] for i in scan.items] == concept_captions(concept)
    wildcard = scan_concept(make_concept(folder, include_subdirectories=True,
                                         text={"captions_file": str(meta), "caption_lines": "EACH", "tag_delimiter": "|"}))
    assert {i.relpath: i.captions for i in wildcard.items}["sub/e.png"] == ("two lines|t", "of caption|t")
    assert {i.relpath: i.captions for i in wildcard.items}["a.png"] == ("a photo of a fox|1girl, solo",)
    assert {i.relpath: i.captions for i in wildcard.items}["c.webp"] == ("only tags",)  # a tagger's metadata: its tags
    dpipe = folder / "sub" / "captions.json"  # diffusion-pipe's, named inside the folder: names from its own folder
    dpipe.write_text(json.dumps({"e.png": ["from sub's captions.json"]}))
    assert scan_concept(make_concept(folder, include_subdirectories=True, text={"captions_file": str(dpipe)})).items[0].captions == (
        "from sub's captions.json",)
    dpipe.unlink()

    rows = tmp_path / "train" / "meta.jsonl"  # sd-scripts' JSONL metadata
    rows.write_text(json.dumps({"image_path": "a.png", "caption": "row a", "image_size": [16, 16]}) + "\n"
                    + json.dumps({"image_path": "d", "caption": "row d", "tags": "t"}) + "\n")
    rows_scan = scan_concept(make_concept(folder, text={"captions_file": str(rows)}))
    assert {i.relpath: i.captions for i in rows_scan.items} == {"a.png": ("row a",), "d.png": ("row d,t",)}
    write_image(folder / "d.jpg", 16, 16)  # one entry, one image: 'd' names d.jpg (the first) and not d.png too
    shared = scan_concept(make_concept(folder, text={"captions_file": str(rows)}))
    assert {i.relpath for i in shared.items} == {"a.png", "d.jpg"}
    assert any("(1 of them named by an entry another file took" in w for w in shared.warnings)
    (folder / "d.jpg").unlink()
    hf = folder / "sub" / "metadata.jsonl"  # Hugging Face's rows: names from the file's own folder
    hf.write_text(json.dumps({"file_name": "e.png", "text": "hf e"}) + "\n")
    hf_scan = scan_concept(make_concept(folder, include_subdirectories=True, text={"captions_file": "sub/metadata.jsonl"}))
    assert {i.relpath: i.captions for i in hf_scan.items} == {"sub/e.png": ("hf e",)}

    moved = tmp_path / "made_on_windows.json"  # kohya_ss's --full_path metadata from the desktop, the images moved since
    moved.write_text(json.dumps({"C:\\Users\\me\\data\\a.png": {"caption": "from windows"}, "/old/box/d.png": {"caption": "moved"},
                                 "/x/b": {"caption": "one b"}, "/y/b": {"caption": "another b"}}))
    moved_scan = scan_concept(make_concept(folder, text={"captions_file": str(moved)}))
    assert {i.relpath: i.captions for i in moved_scan.items} == {"a.png": ("from windows",), "d.png": ("moved",)}  # (b: two)

    with pytest.raises(DataError, match=r"Captions file 'nowhere.json' does not exist"):
        scan_concept(make_concept(folder, text={"captions_file": "nowhere.json"}))
    (tmp_path / "other.json").write_text(json.dumps({"zz": {"caption": "x"}}))
    with pytest.raises(DataError, match=r"other.json names none of the 5 files in folder"):
        scan_concept(make_concept(folder, text={"captions_file": str(tmp_path / "other.json")}))
    meta.write_text(json.dumps({"a": {"caption": ["not", "a text"]}}))
    with pytest.raises(DataError, match=r"Captions file .*meta_lat.json could not be read .*caption or tags of 'a'"):
        concept_captions(make_concept(folder, text={"captions_file": str(meta)}))
    meta.write_text("a caption")
    with pytest.raises(DataError, match=r"could not be read"):
        scan_concept(make_concept(folder, text={"captions_file": str(meta)}))
    assert len(scan_concept(make_concept(folder, text={"captions_file": str(meta), "prompt_source": "filename"})).items) == 5


def test_latin1_caption_falls_back_with_warning(tmp_path, write_image, make_concept, caplog):
    folder = tmp_path / "c"
    write_image(folder / "a.png", 16, 16)
    write_image(folder / "b.png", 16, 16)
    (folder / "a.txt").write_bytes("caf\u00e9 cr\u00e8me".encode("latin-1"))
    (folder / "b.txt").write_bytes("\ufeffna\u00efve".encode())
    for name, codec in (("c", "utf-16-le"), ("d", "utf-16-be")):  # Notepad's "Unicode" and "Unicode big endian"
        write_image(folder / f"{name}.png", 16, 16)
        (folder / f"{name}.txt").write_bytes("\ufeffna\u00efve\r\nsecond".encode(codec))
    with caplog.at_level(logging.WARNING, logger="ot_gradio.data.scan"):  # cli_report quiets ot_gradio.data in-process
        scan = scan_concept(make_concept(folder))
    assert scan.items[0].captions == ("caf\u00e9 cr\u00e8me",)
    assert scan.items[1].captions == ("na\u00efve",)
    assert scan.items[2].captions == scan.items[3].captions == ("na\u00efve", "second")
    assert any("a.txt" in w and "latin-1" in w for w in scan.warnings)
    assert not any(n in w for w in scan.warnings for n in ("b.txt", "c.txt", "d.txt"))


def test_concept_and_filename_prompt_sources(tmp_path, write_image, make_concept):
    folder = tmp_path / "c"
    write_image(folder / "red apple.png", 16, 16)
    write_image(folder / "pear.jpg", 16, 16)
    write_image(folder / "a_green_pear.png", 16, 16)
    (folder / "red apple.txt").write_text("ignored")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("photo of sks\nsks, outdoors\n")
    scan = scan_concept(make_concept(folder, text={"prompt_source": "concept", "prompt_path": str(prompts)}))
    assert all(i.captions == ("photo of sks", "sks, outdoors") for i in scan.items)
    scan = scan_concept(make_concept(folder, text={"prompt_source": "filename"}))
    assert [i.captions for i in scan.items] == [("a_green_pear",), ("pear",), ("red apple",)]
    scan = scan_concept(make_concept(folder, text={"prompt_source": "filename", "filename_spaces": True}))  # SimpleTuner's
    assert [i.captions for i in scan.items] == [("a green pear",), ("pear",), ("red apple",)]
    with pytest.raises(DataError, match="prompt file"):
        scan_concept(make_concept(folder, text={"prompt_source": "concept", "prompt_path": str(tmp_path / "missing.txt")}))


def test_item_records_size_and_stat(tmp_path, write_image, make_concept):
    folder = tmp_path / "c"
    path = write_image(folder / "a.png", 24, 16)
    item = scan_concept(make_concept(folder)).items[0]
    assert (item.width, item.height) == (24, 16)
    assert item.file_size == path.stat().st_size and item.mtime_ns == path.stat().st_mtime_ns
    assert item.path.is_absolute()


def test_a_pipe_named_like_an_image_is_skipped_not_read(tmp_path, write_image, make_concept):
    """A FIFO called fifo.png would block the scan forever on open: it is skipped with a warning."""
    import os
    import threading

    folder = tmp_path / "c"
    write_image(folder / "cat.png", 16, 16)
    os.mkfifo(folder / "fifo.png")
    os.symlink(folder / "gone.png", folder / "dangling.png")
    result = {}
    worker = threading.Thread(target=lambda: result.update(scan=scan_concept(make_concept(folder))), daemon=True)
    worker.start()
    worker.join(60)
    assert "scan" in result, "the scan hangs on the pipe"
    scan = result["scan"]
    assert [i.relpath for i in scan.items] == ["cat.png"]
    assert sorted(s.path.name for s in scan.skipped) == ["dangling.png", "fifo.png"]
    assert any("fifo.png" in w and "not a regular file" in w for w in scan.warnings)


def test_a_huge_caption_file_is_read_only_in_part(tmp_path, write_image, make_concept):
    from ot_gradio.data.captions import MAX_CAPTION_BYTES

    folder = tmp_path / "c"
    write_image(folder / "cat.png", 16, 16)
    with open(folder / "cat.txt", "wb") as fh:
        fh.write(b"a cat\n")
        fh.truncate(64 * 1024 * 1024)  # 64 MB of NUL bytes after the caption, sparse on disk
    scan = scan_concept(make_concept(folder))
    assert scan.items[0].captions[0] == "a cat" and sum(map(len, scan.items[0].captions)) <= MAX_CAPTION_BYTES
    assert any("cat.txt: larger than 1024 KB" in w for w in scan.warnings)


def test_control_images_pair_with_their_images_and_unpaired_images_are_named(tmp_path, write_image, make_concept, caplog):
    """An image-conditioned family (Qwen-Image-Edit): `<stem>-control.<ext>` pairs with `<stem>.*`
    and is no training image itself; an image without one is skipped, named in one warning; a
    folder without any pair is refused. Other families keep `-control` files as images."""
    folder = tmp_path / "c"
    write_image(folder / "cat.png", 16, 16)
    write_image(folder / "cat-control.jpg", 20, 20, colour=(0, 0, 200))
    write_image(folder / "dog.jpg", 16, 16)
    write_image(folder / "dog-control.png", 16, 16)
    write_image(folder / "lonely.png", 16, 16)
    write_image(folder / "wide.png", 32, 16)
    write_image(folder / "wide-control.png", 16, 16)  # another shape: stretched, said
    (folder / "broken.png").write_bytes((folder / "cat.png").read_bytes())
    (folder / "broken-control.png").write_bytes(b"not an image")
    with caplog.at_level(logging.WARNING):
        scan = scan_concept(make_concept(folder), control=True)
    assert [(i.relpath, i.control_path.name) for i in scan.items] == [
        ("cat.png", "cat-control.jpg"), ("dog.jpg", "dog-control.png"), ("wide.png", "wide-control.png")]
    assert scan.pair_count == 3 and [p.name for p in scan.unpaired] == ["broken.png", "lonely.png"]
    assert [w for w in scan.warnings if "broken.png, lonely.png" in w and "without a control image" in w]
    assert [w for w in scan.warnings if "unreadable control image" in w and "broken-control.png" in w]
    assert [w for w in scan.warnings if "wide-control.png is 16x16" in w and "stretched" in w]
    assert not [w for w in scan.warnings if "cat-control" in w]  # 20x20 beside 16x16: the same shape
    assert len(scan_concept(make_concept(folder)).items) == 8  # another model type: every readable file is an image
    alone = tmp_path / "alone"
    write_image(alone / "a.png", 16, 16)
    with pytest.raises(DataError, match=r"no image .* has its control image .*a\.png"):
        scan_concept(make_concept(alone), control=True)


def test_control_images_from_a_control_folder_of_the_same_names(tmp_path, write_image, make_concept, caplog):
    """A concept's Control image folder (ai-toolkit's control_path, musubi-tuner's control_directory):
    the source image of `cat.png` is that folder's `cat.<any ext>` (a subfolder's image in the same
    subfolder there); beside-the-image `-control` files are not looked for then; a missing folder is refused."""
    folder, controls = tmp_path / "edited", tmp_path / "sources"
    write_image(folder / "cat.png", 16, 16)
    write_image(controls / "cat.jpg", 16, 16, colour=(0, 0, 200))
    write_image(folder / "sub" / "dog.png", 16, 16)
    write_image(controls / "sub" / "dog.webp", 16, 16)
    write_image(folder / "lonely.png", 16, 16)
    write_image(folder / "lonely-control.png", 16, 16)  # beside it: not read with a control folder set
    concept = make_concept(folder, include_subdirectories=True, image={"control_folder": str(controls)})
    with caplog.at_level(logging.WARNING):
        scan = scan_concept(concept, control=True)
    assert sorted((i.relpath, i.control_path.relative_to(controls).as_posix()) for i in scan.items) == [
        ("cat.png", "cat.jpg"), ("sub/dog.png", "sub/dog.webp")]
    assert [p.name for p in scan.unpaired] == ["lonely.png"]
    assert [w for w in scan.warnings if "lonely.png" in w and f"named as it in the control image folder '{controls}'" in w]
    gone = make_concept(folder, image={"control_folder": str(tmp_path / "nowhere")})
    with pytest.raises(DataError, match=r"control image folder .*nowhere' does not exist"):
        scan_concept(gone, control=True)
    assert len(scan_concept(gone).items) == 3  # another model type reads no control folder (nor refuses it)


def test_a_batch_carries_each_control_image_cut_like_its_image_and_its_cached_latents(tmp_path, write_image, make_concept, encoder):
    """The control image (another size) is cut to its image's bucket and crop; with latent caching
    its latents are cached (kind "control") and loaded with the image's."""
    import torch

    from ot_gradio.data import build_dataset
    from ot_gradio.data.batches import render_control, render_pixels

    folder = tmp_path / "c"
    write_image(folder / "a.png", 128, 64)
    write_image(folder / "a-control.png", 256, 128, colour=(0, 200, 0))
    dataset = build_dataset([make_concept(folder)], "64", 1, latent_caching=True, cache_dir=tmp_path / "cache", vae_id="v",
                            encode_fn=encoder, conditioning_fn=lambda pixels, _: encoder(pixels), conditioning_kind="control",
                            control=True)
    assert dataset.cache_report.conditioning_total == dataset.cache_report.conditioning_encoded == dataset.cache_report.total
    batch = next(iter(dataset.epoch_batches(0)))
    sample = dataset.plan(0).batches[0][0]
    item = dataset.concepts[0].items[0]
    control = render_control(item, sample.variant)
    assert batch.control_pixels.shape == batch.latents.shape[:1] + render_pixels(item, sample.variant).shape
    assert torch.equal(batch.control_pixels[0], control) and float(control[1].mean()) > float(control[0].mean())  # green
    torch.testing.assert_close(batch.conditioning_latents[0], encoder(control[None])[0])
    # a file the scan read and that is gone since is a DataError naming it
    (folder / "a-control.png").unlink()
    with pytest.raises(DataError, match=r"control image .*a-control\.png could not be read any more"):
        render_control(item, sample.variant)
    (folder / "a.png").unlink()
    with pytest.raises(DataError, match=r"image .*a\.png could not be read any more"):
        render_pixels(item, sample.variant)


def test_onetrainers_tiff_and_avif_images_train_and_decode(tmp_path, make_concept):
    """A folder made for OneTrainer trains with every image it trained with there (tif, tiff, avif too)."""
    folder = tmp_path / "c"
    folder.mkdir()
    colour = (200, 40, 90)
    Image.new("RGB", (24, 16), colour).save(folder / "a.tif", compression="tiff_lzw")
    Image.new("RGB", (24, 16), colour).save(folder / "b.TIFF")
    Image.new("RGB", (24, 16), colour).save(folder / "c.avif", quality=95)
    Image.new("RGBA", (24, 16), (0, 0, 0, 0)).save(folder / "d.tiff")  # transparent: white, as any other image
    scan = scan_concept(make_concept(folder))
    assert [i.relpath for i in scan.items] == ["a.tif", "b.TIFF", "c.avif", "d.tiff"]
    from ot_gradio.data.images import load_rgb

    for item, want in zip(scan.items, [colour, colour, colour, (255, 255, 255)], strict=True):
        img = load_rgb(folder / item.relpath)
        assert img.size == (24, 16) and img.mode == "RGB"
        assert max(abs(a - b) for a, b in zip(img.getpixel((12, 8)), want, strict=True)) <= 6, item.relpath


def test_photos_in_a_format_that_is_not_read_are_named(tmp_path, write_image, make_concept):
    """Pictures that are not read (a Photoshop file, a JPEG XL) beside JPEGs did not train, without a word."""
    folder = tmp_path / "c"
    write_image(folder / "a.jpg", 16, 16)
    for name in ("IMG_0001.JXL", "IMG_0002.jxl", "layers.psd"):
        (folder / name).write_bytes(b"x")
    scan = scan_concept(make_concept(folder))
    assert [i.relpath for i in scan.items] == ["a.jpg"]
    assert any("2 .jxl, 1 .psd file(s) are in a format that is not read (IMG_0001.JXL, IMG_0002.jxl, layers.psd)" in w
               and "convert them to PNG or JPG" in w for w in scan.warnings), scan.warnings
    only = tmp_path / "only"
    (only).mkdir()
    (only / "IMG_0003.jxl").write_bytes(b"x")
    with pytest.raises(DataError, match=r"no images .* in folder .*; 1 \.jxl file\(s\) are in a format that is not read"):
        scan_concept(make_concept(only))


def _iphone_photo(path, size=(48, 32), orientation=6):
    """A HEIC photo as an iPhone writes one: the sensor's landscape pixels (left third blue, the rest red) and a
    rotation (EXIF orientation 6: turn 90 degrees clockwise to view), which pillow-heif stores in the container."""
    image = Image.new("RGB", size, (200, 30, 40))
    image.paste((20, 40, 210), (0, 0, size[0] // 3, size[1]))
    exif = Image.Exif()
    exif[0x0112] = orientation
    image.save(path, quality=95, exif=exif.tobytes())


def test_iphone_heic_photos_train_upright(tmp_path, make_concept):
    """An iPhone's HEIC photos were named as unread and did not train: they are read now, turned upright."""
    folder = tmp_path / "c"
    folder.mkdir()
    _iphone_photo(folder / "IMG_0001.HEIC")
    _iphone_photo(folder / "IMG_0002.heif", orientation=1)
    for stem in ("IMG_0001", "IMG_0002"):
        (folder / f"{stem}.txt").write_text("a red car", encoding="utf-8")
    scan = scan_concept(make_concept(folder))
    assert [i.relpath for i in scan.items] == ["IMG_0001.HEIC", "IMG_0002.heif"]
    assert not scan.warnings, scan.warnings
    by_name = {i.relpath: i for i in scan.items}
    assert (by_name["IMG_0001.HEIC"].width, by_name["IMG_0001.HEIC"].height) == (32, 48)  # portrait, as viewers show it
    assert by_name["IMG_0001.HEIC"].captions == ("a red car",)
    from ot_gradio.data.images import load_rgb

    upright = load_rgb(folder / "IMG_0001.HEIC")
    assert upright.size == (32, 48) and upright.mode == "RGB"
    top, bottom = upright.getpixel((16, 2)), upright.getpixel((16, 45))  # the blue third is on top once turned
    assert top[2] > 150 > top[0] and bottom[0] > 150 > bottom[2], (top, bottom)
    assert load_rgb(folder / "IMG_0002.heif").size == (48, 32)


def test_without_pillow_heif_a_heic_photo_says_what_to_install(tmp_path, monkeypatch):
    from ot_gradio.data import images

    _iphone_photo(tmp_path / "IMG_0001.heic")
    monkeypatch.setattr(images, "pillow_heif", None)
    monkeypatch.setattr(Image, "OPEN", {k: v for k, v in Image.OPEN.items() if k != "HEIF"})  # as if never registered
    monkeypatch.setattr(Image, "ID", [k for k in Image.ID if k != "HEIF"])
    with pytest.raises(Image.UnidentifiedImageError, match=r"IMG_0001\.heic: HEIC / HEIF photos are read with pillow-heif.*"
                                                              r"pip install -r requirements\.txt"):
        images.load_rgb(tmp_path / "IMG_0001.heic")


def test_images_with_transparent_pixels_are_counted(tmp_path, write_image, make_concept):
    """They train on a white background; the concept statistics and the report say how many, from
    the scan's one decoding."""
    folder = tmp_path / "c"
    write_image(folder / "plain.png", 16, 16)
    Image.new("RGBA", (16, 16), (255, 0, 0, 0)).save(folder / "cut-out.png")
    Image.new("RGBA", (16, 16), (255, 0, 0, 255)).save(folder / "opaque.png")
    Image.new("RGBA", (16, 16), (0, 0, 0, 0)).save(folder / "plain-masklabel.png")  # a mask is no image
    scan = scan_concept(make_concept(folder))
    assert [p.name for p in scan.transparent] == ["cut-out.png"]


def test_a_kohya_dataset_trains_with_its_captions_and_says_what_its_folder_name_meant(tmp_path, write_image, make_concept):
    """kohya's `40_ohwx woman` folder with `.caption` files: the captions are read (a `.txt` wins
    where both exist), and the folder's repeats and caption, which this trainer does not take from
    a folder name, are said with the setting that does it."""
    folder = tmp_path / "img" / "40_ohwx woman"
    for name in ("a", "b", "c"):
        write_image(folder / f"{name}.png", 16, 16)
    (folder / "a.caption").write_text("ohwx woman, smiling\n")
    (folder / "b.caption").write_text("from kohya\n")
    (folder / "b.txt").write_text("from onetrainer\n")
    scan = scan_concept(make_concept(folder))
    assert [i.captions for i in scan.items] == [("ohwx woman, smiling",), ("from onetrainer",), ("",)]
    assert scan.two_caption_files == [folder / "b.txt"] and any("1 image(s) have both a .txt and a kohya .caption" in w for w in scan.warnings)
    (warning,) = [w for w in scan.warnings if "<repeats>" in w]
    assert "'40_ohwx woman'" in warning and "Balancing to 40" in warning and "('ohwx woman')" in warning

    assert not [w for w in scan_concept(make_concept(folder, balancing=40.0)).warnings if "<repeats>" in w]
    # kohya's class tokens: the caption of an image without a caption file, an empty file staying empty
    (folder / "d.txt").write_text("")
    write_image(folder / "d.png", 16, 16)
    classed = scan_concept(make_concept(folder, balancing=40.0, text={"default_caption": "ohwx woman"}))
    assert [i.captions for i in classed.items] == [("ohwx woman, smiling",), ("from onetrainer",), ("ohwx woman",), ("",)]
    assert classed.uncaptioned == [folder / "d.png"]
    (folder / "d.txt").unlink()
    (folder / "d.png").unlink()
    (folder / "c.caption").write_text("x\n")  # every image captioned: only the repeats are said
    (warning,) = [w for w in scan_concept(make_concept(folder)).warnings if "<repeats>" in w]
    assert "Balancing to 40" in warning and "caption file" not in warning

    write_image(tmp_path / "img" / "1_woman" / "d.png", 16, 16)  # kohya's root, read with its subfolders
    (warning,) = [w for w in scan_concept(make_concept(tmp_path / "img", include_subdirectories=True)).warnings if "<repeats>" in w]
    assert "'1_woman', '40_ohwx woman'" in warning and "its own concept" in warning and "('woman')" in warning
    plain = tmp_path / "photos"
    write_image(plain / "e.png", 16, 16)
    assert not [w for w in scan_concept(make_concept(plain)).warnings if "<repeats>" in w]
