"""Training files uploaded through the page into a dataset folder (tools/dataset_upload.py)."""

import io
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from ot_gradio.fsutil import DiskFullError
from ot_gradio.tools import dataset_upload
from ot_gradio.tools.dataset_upload import UploadError, add_uploads, folder_name, summary, upload_folder


def png(color=(200, 30, 30), size=(24, 16)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


def write(folder: Path, name: str, data: bytes | str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def zipped(path: Path, members: dict[str, bytes | str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def files_in(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_loose_files_keep_their_names_and_what_training_does_not_read_is_named(tmp_path):
    up = tmp_path / "up"
    sources = [write(up, "cat.png", png()), write(up, "cat.txt", "a cat"), write(up, "cat-masklabel.png", png((255, 255, 255))),
               write(up, "notes.pdf", b"%PDF"), write(up, "dog.jxl", b"jxl"), write(up, ".DS_Store", b"x")]
    result = add_uploads(sources, tmp_path / "data")
    assert files_in(tmp_path / "data") == {"cat.png": png(), "cat.txt": b"a cat", "cat-masklabel.png": png((255, 255, 255))}
    assert (result.count("image"), result.count("caption"), result.count("mask")) == (1, 1, 1)
    assert dict(result.skipped) == {"notes.pdf": "not a training file",
                                    "dog.jxl": "a picture format training does not read (save it as PNG or JPG)"}
    assert result.clutter == 1
    text = summary(result, "datasets/cat")
    assert "1 image, 1 caption, 1 mask" in text and "`notes.pdf`" in text and "1 hidden or operating-system" in text
    assert all(p.is_file() for p in sources)  # the uploads themselves are only read


def test_a_camera_s_upper_case_names_are_read_and_the_caption_is_found_by_training(tmp_path):
    from ot_gradio.config.concept import ConceptConfig
    from ot_gradio.data.scan import scan_concept

    up = tmp_path / "up"
    add_uploads([write(up, "IMG_1.JPG", png()), write(up, "IMG_1.TXT", "a photo"), write(up, "IMG_1-MaskLabel.PNG", png((255,) * 3))],
                tmp_path / "data")
    assert set(files_in(tmp_path / "data")) == {"IMG_1.JPG", "IMG_1.txt", "IMG_1-masklabel.png"}
    (item,) = scan_concept(ConceptConfig(name="c", path=str(tmp_path / "data"))).items
    assert item.captions == ("a photo",) and item.mask_path == tmp_path / "data" / "IMG_1-masklabel.png"


def test_a_zipped_folder_unpacks_into_the_dataset_safely(tmp_path):
    archive = zipped(tmp_path / "mycat.zip", {
        "mycat/1.png": png(), "mycat/1.txt": "one", "mycat/poses/2.webp": png((1, 2, 3)),
        "mycat/../../evil.txt": "x", "/etc/evil.png": png(), "mycat/__MACOSX/._1.png": b"junk",
        "mycat/inner.zip": b"PK", "mycat\\win\\3.png": png((9, 9, 9)),
    })
    result = add_uploads([archive], tmp_path / "data")
    # the one top folder is dropped; subfolders stay (backslashes are folders, as Windows zips them)
    assert set(files_in(tmp_path / "data")) == {"1.png", "1.txt", "poses/2.webp", "win/3.png"}
    assert not (tmp_path / "evil.txt").exists() and not Path("/etc/evil.png").exists()
    reasons = dict(result.skipped)
    assert reasons["mycat.zip: mycat/../../evil.txt"] == "a path leaving the folder ('..')"
    assert reasons["mycat.zip: /etc/evil.png"] == "an absolute path"
    assert reasons["mycat.zip: inner.zip"].startswith("an archive inside an archive")
    assert result.in_subfolders


def test_nothing_is_overwritten_and_uploading_again_adds_nothing(tmp_path):
    data = tmp_path / "data"
    write(data, "1.png", png((10, 10, 10)))
    write(data, "1.txt", "first picture")
    up = tmp_path / "up"
    second = [write(up, "1.png", png((50, 60, 70))), write(up, "1.txt", "second picture"), write(up, "1-masklabel.png", png((255,) * 3))]
    result = add_uploads(second, data)
    # another picture under a taken name: in with its caption and mask under the next free name
    assert files_in(data) == {"1.png": png((10, 10, 10)), "1.txt": b"first picture", "1-2.png": png((50, 60, 70)),
                              "1-2.txt": b"second picture", "1-2-masklabel.png": png((255,) * 3)}
    assert sorted(result.renamed) == [("1-masklabel.png", "1-2-masklabel.png"), ("1.png", "1-2.png"), ("1.txt", "1-2.txt")]
    again = add_uploads(second, data)
    assert not again.written and sorted(again.same) == ["1-2-masklabel.png", "1-2.png", "1-2.txt"]
    assert "not added again: 3 file(s)" in summary(again, "data")


def test_a_new_caption_for_an_image_already_there_replaces_it_with_a_backup(tmp_path):
    data = tmp_path / "data"
    write(data, "cat.png", png())
    write(data, "cat.txt", "old caption")
    up = tmp_path / "up"
    result = add_uploads([write(up, "cat.png", png()), write(up, "cat.txt", "new caption")], data)
    assert (data / "cat.txt").read_text() == "new caption" and result.same == ["cat.png"]
    assert (data / ".ot_captions" / "backup" / "cat.txt").read_text() == "old caption"
    assert result.captions_replaced == ["cat.txt"] and not result.renamed


def test_a_damaged_member_is_named_and_the_others_are_added(tmp_path):
    archive = zipped(tmp_path / "set.zip", {"a.png": png(), "b.png": b"B" * 4000, "b.txt": "b"})
    raw = bytearray(archive.read_bytes())
    raw[raw.find(b"B" * 4000) + 2000] ^= 0xFF  # a byte of b.png's stored data: its CRC no longer matches
    archive.write_bytes(bytes(raw))
    result = add_uploads([archive], tmp_path / "data")
    assert set(files_in(tmp_path / "data")) == {"a.png"}
    reasons = dict(result.skipped)
    assert reasons["set.zip: b.png"].startswith("unreadable") and reasons["set.zip: b.txt"].startswith("unreadable")


def test_a_bad_archive_adds_nothing_and_says_which(tmp_path):
    up = tmp_path / "up"
    with pytest.raises(UploadError, match="broken.zip is not a readable .zip"):
        add_uploads([write(up, "a.png", png()), write(up, "broken.zip", b"not a zip")], tmp_path / "data")
    assert not (tmp_path / "data").exists()


def test_files_bigger_than_the_free_disk_stop_before_filling_it(tmp_path, monkeypatch):
    up = tmp_path / "up"
    files = [write(up, "a.png", png()), write(up, "b.png", b"\0" * 3_000_000), write(up, "c.png", png((1, 1, 1)))]
    free = dataset_upload.DISK_RESERVE + 1_000_000  # room for the small files, not for b.png's 3 MB
    monkeypatch.setattr(dataset_upload, "free_bytes", lambda path: free)
    result = add_uploads(files, tmp_path / "data")
    assert "disk full" in result.stopped and set(files_in(tmp_path / "data")) == {"a.png"}
    assert not [p for p in (tmp_path / "data").iterdir() if p.name.endswith(".tmp")]
    assert "Stopped before the end" in summary(result, "data")
    assert isinstance(DiskFullError(tmp_path), OSError)


def test_the_upload_folder_is_the_concepts_own_or_a_new_one_by_its_name(tmp_path):
    ws = tmp_path / "ws"
    assert folder_name(" My cat / v2 ") == "My_cat_v2" and folder_name("../..") == "concept"
    first = upload_folder(ws, "", "my cat")
    assert first == (ws / "datasets" / "my_cat").resolve()
    write(first, "x.png", png())
    # the concept's folder is already an uploaded dataset: more goes in
    assert upload_folder(ws, str(first), "renamed") == first
    # a folder of the user's elsewhere is left alone; a taken name gets a number
    assert upload_folder(ws, str(tmp_path / "mine"), "my cat") == (ws / "datasets" / "my_cat-2").resolve()


def test_a_kohya_dataset_zip_keeps_its_caption_files_and_trains_with_them(tmp_path):
    """kohya's `.caption` files are captions (training reads one where an image has no `.txt`)."""
    from ot_gradio.config.concept import ConceptConfig
    from ot_gradio.data.scan import scan_concept

    archive = zipped(tmp_path / "kohya.zip", {"40_ohwx woman/1.png": png(), "40_ohwx woman/1.CAPTION": "ohwx woman, smiling"})
    result = add_uploads([archive], tmp_path / "data")
    assert set(files_in(tmp_path / "data")) == {"1.png", "1.caption"} and result.count("caption") == 1 and not result.skipped
    (item,) = scan_concept(ConceptConfig(name="c", path=str(tmp_path / "data"))).items
    assert item.captions == ("ohwx woman, smiling",)


def test_a_hugging_face_dataset_zip_keeps_its_metadata_file_and_trains_with_it(tmp_path):
    """A folder's caption index (Hugging Face's metadata.jsonl, diffusion-pipe's captions.json) is
    its images' captions: kept, not dropped as "not a training file"."""
    from ot_gradio.config.concept import ConceptConfig
    from ot_gradio.data.scan import scan_concept

    archive = zipped(tmp_path / "hf.zip", {"1.png": png(), "metadata.jsonl": '{"file_name": "1.png", "text": "a red square"}\n'})
    result = add_uploads([archive], tmp_path / "data")
    assert set(files_in(tmp_path / "data")) == {"1.png", "metadata.jsonl"} and not result.skipped
    (item,) = scan_concept(ConceptConfig(name="c", path=str(tmp_path / "data"))).items
    assert item.captions == ("a red square",)


def zip_bomb(path: Path, size: int) -> Path:
    """The security review's upload: one member of zeros, packed about 1000:1."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive, archive.open("big.png", "w") as out:
        for _ in range(size >> 20):
            out.write(bytes(1 << 20))
    return path


def test_a_zip_bomb_is_refused_before_anything_is_written(tmp_path):
    """A 1 MB zip unpacking to 1 GiB of zeros was written whole into the dataset (the review's repro)."""
    up = tmp_path / "up"
    bomb = zip_bomb(up / "bomb.zip", 16 << 20)
    assert bomb.stat().st_size < 100_000
    with pytest.raises(UploadError, match=r"bomb.zip: big.png unpacks to 16.0 MB from .*more than the 200:1 an upload takes"):
        add_uploads([write(up, "a.png", png()), bomb], tmp_path / "data")
    assert not (tmp_path / "data").exists()
    # a small member packs as it likes (a caption, a blank mask), and a picture packs little
    small = up / "small.zip"
    with zipfile.ZipFile(small, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in {"blank-masklabel.png": bytes(1 << 20), "blank.png": png(), "blank.txt": "x" * 10_000}.items():
            archive.writestr(name, data)
    assert set(files_in(Path(add_uploads([small], tmp_path / "data").folder))) == {"blank-masklabel.png", "blank.png", "blank.txt"}


def test_archives_unpacking_to_more_than_the_limit_or_the_disk_are_refused_whole(tmp_path, monkeypatch):
    up = tmp_path / "up"
    noise = bytes(range(256)) * 2400  # ~600 KB each: the running total of both archives is over 1 MB
    up.mkdir()
    first, second = zipped(up / "first.zip", {"a.png": noise}), zipped(up / "second.zip", {"b.png": noise})
    monkeypatch.setattr(dataset_upload, "MAX_UNPACKED", 1_000_000)
    with pytest.raises(UploadError, match=r"second.zip unpacks to more than the 976.6 KB an upload takes"):
        add_uploads([first, second], tmp_path / "data")
    assert not (tmp_path / "data").exists()
    monkeypatch.setattr(dataset_upload, "MAX_UNPACKED", 20 * 1024 ** 3)
    monkeypatch.setattr(dataset_upload, "free_bytes", lambda path: dataset_upload.DISK_RESERVE + 1_000_000)
    with pytest.raises(UploadError, match=r"second.zip unpacks to more than the 976.6 KB the disk can take \(an upload leaves 1.0 GB free\)"):
        add_uploads([first, second], tmp_path / "data")
    assert not (tmp_path / "data").exists()


def test_an_archive_of_too_many_entries_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(dataset_upload, "MAX_MEMBERS", 3)
    archive = zipped(tmp_path / "many.zip", {"a/": "", "b/": "", "c/": "", "d.png": png()})
    with pytest.raises(UploadError, match="many.zip holds 4 entries, more than the 3 an upload takes"):
        add_uploads([archive], tmp_path / "data")
    assert not (tmp_path / "data").exists()
