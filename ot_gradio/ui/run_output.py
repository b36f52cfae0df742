"""The Run tab's word on the trained model: where it is on the machine that runs the app, and a
download of the finished run's file. A relative Output file (`models/x.safetensors`) is written
relative to the folder the app was started in (the worker runs there), which a share link's or
Colab's user cannot guess; and their computer is not that machine, so the file is offered here,
where the run ended, as the Runs tab offers it."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import gradio as gr

from ..runner import history
from ..runner.rundir import RunDir
from ..runner.supervisor import RunState


def absolute(path: str) -> str:
    """`path` as the worker wrote it (relative to the app's folder, which the worker inherits:
    runner/launch.py), absolute."""
    return os.path.abspath(path) if path else path


def with_absolute_paths(state: RunState) -> RunState:
    """The state with its saved files absolute, in its message too ("model saved to models/x")."""
    if not state.saved and not state.embedding_files:
        return state
    message = state.message
    if state.saved and not os.path.isabs(last := state.saved[-1]) and message.endswith(f" {last}"):
        message = message[: -len(last)] + absolute(last)
    return replace(state, message=message, saved=[absolute(p) for p in state.saved],
                   embedding_files=[absolute(p) for p in state.embedding_files])


def _size(nbytes: int) -> str:
    if nbytes >= 2**30:
        return f"{nbytes / 2**30:.1f} GB"
    return f"{nbytes / 2**20:.0f} MB" if nbytes >= 2**20 else f"{max(1, round(nbytes / 2**10))} KB"


HIDDEN = gr.update(value=None, visible=False)
# gradio serves a download from its cache: a file is hashed and copied there. Up to this size that
# is done on the poll that finds the run ended; a larger model (a fine-tune's many GB) is offered
# by the Runs tab's Open, when asked for, not copied unasked on every start of the app
OFFERED_BYTES = 2 * 2**30


class OutputDownload:
    """The finished run's output file, offered as a download once it has ended. The file is copied
    into gradio's cache once per version of it (gradio serves a download from there, whatever
    folder the model is in), not at every poll."""

    def __init__(self):
        self._copies: dict[tuple[str, int, int], str] = {}  # (file, size, mtime) -> its copy in gradio's cache

    def file(self, run: RunDir, state: RunState, config: dict[str, Any]) -> str | None:
        """The file to offer: only a run that has ended (a run still training may write it again),
        and only a file the Runs tab would offer (history.trusted_output: under the run's workspace
        or the run's configured output file, never another path an events line names)."""
        if state.alive or not state.saved:
            return None
        return history.trusted_output(run, run.path.parent.parent, config)

    def update(self, run: RunDir | None, state: RunState | None, config: dict[str, Any], button) -> tuple[Any, str]:
        """(the download button's update, a key that changes when the offered file does)."""
        path = self.file(run, state, config) if run is not None and state is not None else None
        if path is None:
            return HIDDEN, ""
        try:
            stat = Path(path).stat()
        except OSError:
            return HIDDEN, ""
        key = (path, stat.st_size, stat.st_mtime_ns)
        if stat.st_size > OFFERED_BYTES:
            return HIDDEN, ""
        if key not in self._copies:
            try:
                copy = button.move_resource_to_block_cache(path)
            except (OSError, ValueError):
                return HIDDEN, ""
            if not copy:
                return HIDDEN, ""
            self._copies[key] = copy
        label = f"Download {Path(path).name} ({_size(stat.st_size)})"
        return gr.update(value=self._copies[key], label=label, visible=True), repr(key)


def folder_note(state: RunState) -> str:
    """A model saved as a folder (diffusers) is not one file: the page offers no download of it
    (nor does the Runs tab); it says where the folder is. A file over OFFERED_BYTES: where to get it."""
    if state.alive or not state.saved:
        return ""
    saved = Path(state.saved[-1])
    if saved.is_dir():
        return ("The model is a folder (diffusers format), not one file: the page cannot download it. It is on the machine "
                f"running the app, at `{saved}`.")
    try:
        size = saved.stat().st_size
    except OSError:
        return ""
    if size > OFFERED_BYTES:
        return (f"The model is {_size(size)}: download it from Runs → this run → *Open* → *Download output file* (copying "
                "it for the download takes a while), or take it from the machine running the app.")
    return ""
