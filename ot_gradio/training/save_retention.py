"""Keep last saves (`save_keep_last`, kohya's save_last_n_epochs / save_last_n_steps): after each
intermediate save, the run's older intermediate saves beyond the newest N are deleted, each with
its additional embeddings' folder. Only this run's own save folder is touched, and only names the
trainer writes there (`<prefix><stem>-step<N><suffix>`, a file or a diffusers folder); the final
model is written elsewhere and never deleted."""

from __future__ import annotations

import shutil
from pathlib import Path

from .embeddings import embeddings_folder


def intermediate_saves(folder: Path, head: str, suffix: str) -> list[tuple[int, Path]]:
    """(step, path) of the run's intermediate saves in `folder`, oldest first."""
    found = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    for path in entries:
        name = path.name
        if not (name.startswith(head) and name.endswith(suffix)):
            continue
        step = name[len(head): len(name) - len(suffix)] if suffix else name[len(head):]
        if step.isdigit():
            found.append((int(step), path))
    return sorted(found)


def prune_saves(folder: Path, head: str, suffix: str, keep: int) -> list[Path]:
    """Delete all but the newest `keep` intermediate saves (and their `_embeddings` folders);
    the deleted paths. `keep` 0: nothing is deleted."""
    if keep <= 0:
        return []
    deleted = []
    for _, path in intermediate_saves(folder, head, suffix)[:-keep]:
        for target in (path, embeddings_folder(path)):
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            else:
                continue
            deleted.append(target)
    return deleted
