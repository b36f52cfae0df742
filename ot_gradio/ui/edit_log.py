"""The form's edits reach the server as a short log, not as every field's value.

Why: Gradio's page keeps, for good, every component that was ever an input of an event that ran,
and on each status message of any event (the run bar polls each second) it refreshes all of them,
each by a walk of the page's component tree. One edit handler with the ~250 fields as inputs made
the idle page keep the browser's main thread busy (a CPU core taken while nothing happens,
Playwright reads of several seconds). So each field's edit event runs a few lines of JavaScript in
the browser (no server round trip, no status message) that append `[seq, path, value]` to a hidden
text box; the server's one handler listens to that box, with the config and the log as its inputs.

Start, Add to queue and the memory estimate read the config the server holds plus the log's
entries it has not applied yet (an edit still on its way cannot be lost). `applied` is the last
sequence number the server applied, kept in a per-session State."""

from __future__ import annotations

import json

import gradio as gr

from .. import jsontext

KEEP = 64  # entries kept in the log: an edit is applied within a second, long before 64 more follow


def relay_js(path: str, name: str, indexed: bool = False) -> str:
    """The browser-side edit event of the field at `path`: its value appended to the log `name`
    (with, when `indexed`, the event's second input: the concept selected when it was made).

    The log lives in the page's `window`, not in the hidden text box it is shown to the server
    through: a hidden component's value is not sent back to an event as its input (every edit
    read an empty log and numbered itself 1, so after the first the server took each for one it
    had applied, and dropped it)."""
    index = ", index" if indexed else ""
    return (f"(value{index}) => {{ const logs = (window.otEditLogs = window.otEditLogs || {{}}); "
            f"const log = (logs[{json.dumps(name)}] = logs[{json.dumps(name)}] || {{seq: 0, entries: []}}); "
            f"log.seq += 1; log.entries.push([log.seq, {json.dumps(path)}, value{index}]); "
            f"log.entries = log.entries.slice(-{KEEP}); return JSON.stringify(log.entries); }}")


def entries(log: str | None) -> list[tuple]:
    """The log's entries `(seq, path, value[, index])`, oldest first; a log that is not ours reads as empty."""
    try:
        parsed = jsontext.loads(log or "[]")  # (the browser sends it: nested too deeply is not ours either)
    except (TypeError, ValueError):
        return []
    if not isinstance(parsed, list):
        return []
    return [tuple(e) for e in parsed if isinstance(e, list) and len(e) in (3, 4) and isinstance(e[0], int) and isinstance(e[1], str)]


def pending(log: str | None, applied: int | None) -> list[tuple]:
    """The entries the server has not applied yet."""
    return [e for e in entries(log) if e[0] > (applied or 0)]


def build(elem_id: str = "edit-log") -> tuple[gr.Textbox, gr.State]:
    """The log (a hidden text box the fields' edit events write) and the last applied sequence number."""
    return gr.Textbox(visible=False, elem_id=elem_id), gr.State(0)
