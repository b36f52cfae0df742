"""Caption metadata files other trainers keep for a dataset (kohya's fine-tuning `meta_cap.json`,
musubi-tuner's and sd-scripts' JSONL, ai-toolkit's JSON dataset), as an import reads them: their
entries by name, and the folder of the images they name by whole paths. The run reads them as a
concept's Captions file (data/caption_index.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .. import jsontext
from .json_file import may_read

# a metadata file larger than any dataset's is not read (data/caption_index.py's MAX_INDEX_BYTES, which this
# layer does not import: the run refuses such a file too)
MAX_METADATA_BYTES = 256 * 1024 * 1024


def _metadata_text(path: Path) -> str:
    """A metadata file's text; a ValueError for one larger than a caption index is read."""
    if path.stat().st_size > MAX_METADATA_BYTES:
        raise ValueError(f"{path} is larger than {MAX_METADATA_BYTES // 2**20} MB")
    return path.read_text(encoding="utf-8-sig")


def metadata_rows(path: Path, readable: list[Path] | None) -> list[tuple[str, dict[str, Any]]] | None:
    """A metadata file's (name, entry) pairs: a JSON object's keys, or a JSONL file's rows by their
    image_path / video_path; None when it cannot be read here."""
    if not may_read(path, readable):
        return None
    try:
        text = _metadata_text(path)
        if path.suffix.lower() == ".jsonl":
            rows = [jsontext.loads(line) for line in text.splitlines() if line.strip()]
            return [(str(row.get("image_path", row.get("video_path", ""))), row) for row in rows]
        return [(str(name), entry if isinstance(entry, dict) else {}) for name, entry in jsontext.loads(text).items()]
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def metadata_folder(path: Path, readable: list[Path] | None) -> str | None:
    """The folder of the images a metadata file names by their whole paths (kohya's `--full_path`,
    for a subset without image_dir); None when it cannot be read here, names them otherwise, or
    their folders share no folder but the root."""
    folders = {os.path.dirname(name.replace("\\", "/")) for name, _ in metadata_rows(path, readable) or []}
    common = os.path.commonpath(list(folders)) if folders and all(os.path.isabs(f) for f in folders) else None
    return common if common and Path(common).parent != Path(common) else None
