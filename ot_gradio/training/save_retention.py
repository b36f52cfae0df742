"""Keep last saves (`save_keep_last`, kohya's save_last_n_epochs / save_last_n_steps): the paths
this run's scheduled saves (Save every) wrote, oldest first; once there are more than N, the
oldest are deleted, each with its additional embeddings' folder and an SD checkpoint's `.yaml`. Nothing else is ever deleted:
not a Save now checkpoint, not the final model, not an earlier run's saves, not a file that only
looks like a save."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .embeddings import embeddings_folder


@dataclass
class SaveRetention:
    keep: int  # 0: keep every save
    written: list[Path] = field(default_factory=list)  # this run's scheduled saves, oldest first

    def saved(self, path: Path) -> tuple[list[Path], list[str]]:
        """Record a scheduled save and delete the oldest beyond `keep`: (deleted paths, problems,
        one line each, for a delete that failed: the run goes on)."""
        if path in self.written:
            self.written.remove(path)  # saved again at the same step: it is the newest
        self.written.append(path)
        if self.keep <= 0:
            return [], []
        deleted, problems = [], []
        while len(self.written) > self.keep:
            old = self.written.pop(0)
            # an SD 1.x/2.x checkpoint's LDM config is <stem>.yaml beside it (ldm_config.py); a yaml of another's is kept
            sidecar = [old.with_suffix(".yaml")] if old.suffix.lower() in (".safetensors", ".ckpt") and _ldm_config(old.with_suffix(".yaml")) else []
            for target in (old, *sidecar, embeddings_folder(old)):
                try:
                    if target.is_dir() and not target.is_symlink():
                        shutil.rmtree(target)
                    elif target.exists() or target.is_symlink():
                        target.unlink()
                    else:
                        continue
                    deleted.append(target)
                except OSError as err:
                    problems.append(f"Keep last saves: could not delete the older save {target} ({err}); it stays")
        return deleted, problems


def _ldm_config(path: Path) -> bool:
    """Whether `path` is an LDM config as this trainer writes one beside an SD checkpoint."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "ldm.models.diffusion" in f.read(4096)
    except OSError:
        return False
