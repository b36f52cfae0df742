"""The queue on the page: "Add to queue" next to Start, the queue's
length in the run bar, and a small table with remove / up / down. Torch-free."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from ..runner.queue import RunQueue
from .problems import on_screen

COLUMNS = ["id", "name", "state", "added", "output file", "run folder"]
ACTIONS = ["Up", "Down", "Remove"]


def rows(queue: RunQueue) -> list[list[str]]:
    return [[e["id"], e["name"], e["state"] + (f" ({e['note']})" if e.get("note") else ""), e["added"],
             str(e["config"].get("output_model_destination") or ""), e["run_dir"]] for e in queue.list()]


def choices(queue: RunQueue) -> list[tuple[str, str]]:
    return [(f"{e['id']} {e['name']} ({e['state']})", e["id"]) for e in queue.list()]


def length_text(queue: RunQueue) -> str:
    waiting = queue.waiting()
    return f"Queue: {waiting} waiting" if waiting else "Queue: empty"


class QueuePanel:
    def __init__(self, queue: RunQueue, build_config: Callable[[dict], dict], validate: Callable):
        self.queue = queue
        self.build_config = build_config  # form values -> config, as Start builds it
        self.validate = validate  # the same checks Start does

    def build(self, bar_row: gr.Row) -> None:
        """The button and the length text in the run bar's row."""
        with bar_row:
            self.add_btn = gr.Button("Add to queue", elem_id="queue-add", scale=0, min_width=130)
            self.length = gr.Markdown(length_text(self.queue), elem_id="queue-length")

    def build_table(self) -> None:
        """The queue's table and its actions, closed, on the Run tab (not under the bar: it would
        make every tab taller)."""
        with gr.Accordion("Queue", open=False, elem_id="queue-panel"):
            self.table = gr.Dataframe(rows(self.queue), headers=COLUMNS, interactive=False, elem_id="queue-table")
            with gr.Row():
                self.selected = gr.Dropdown(choices(self.queue), value=None, label="Entry", info="The queue entry to move or remove.", elem_id="queue-selected")
                self.action = gr.Radio(ACTIONS, value="Up", label="Action", elem_id="queue-action")
                self.apply_btn = gr.Button("Apply", scale=0, elem_id="queue-apply")
            self.message = gr.Markdown("", elem_id="queue-message")

    def wire(self, inputs: set) -> None:
        # Few handlers on purpose (the page's start-up budget): one for add, one for the actions.
        outs = [self.table, self.length, self.message, self.selected]
        self.add_btn.click(self.on_add, inputs, outs)
        self.apply_btn.click(self.on_action, [self.selected, self.action], outs)
        # outside the tabs, so it ticks on every tab; every 2 s, as the value the page is served
        # with is the queue of when the app started (no load handler: the page's start-up budget)
        gr.Timer(2).tick(self.refresh, None, [self.table, self.length], show_progress="hidden")

    def view(self, message: str = "") -> tuple:
        return rows(self.queue), length_text(self.queue), message, gr.update(choices=choices(self.queue))

    def refresh(self) -> tuple:
        return rows(self.queue), length_text(self.queue)

    def on_action(self, entry_id: str | None, action: str) -> tuple:
        if action == "Remove":
            return self.on_remove(entry_id or "")
        return self.on_move(entry_id or "", -1 if action == "Up" else +1)

    def add_config(self, config: dict[str, Any]) -> tuple:
        valid, problems, _warnings = self.validate(config)
        if problems or valid is None:
            text = "### Not queued: fix these first\n" + "\n".join(f"- `{on_screen(p, config)}`" for p in problems)  # by tab and label
            return self.view(text)
        entry_id = self.queue.add(valid)
        note = next((e.get("output_note", "") for e in self.queue.list() if e["id"] == entry_id), "")
        return self.view(f"Queued as `{entry_id}`; it starts when no run is active." + (f"\n\n{note}" if note else ""))

    def on_add(self, values: dict) -> tuple:
        return self.add_config(self.build_config(values))

    def on_move(self, entry_id: str, offset: int) -> tuple:
        try:
            self.queue.move(entry_id.strip(), offset)
        except KeyError as exc:
            return self.view(f"Selected entry id: {exc.args[0]}; choose an entry first.")
        return self.view()

    def on_remove(self, entry_id: str) -> tuple:
        try:
            self.queue.remove(entry_id.strip())
        except KeyError as exc:
            return self.view(f"Selected entry id: {exc.args[0]}; choose an entry first.")
        except ValueError as exc:
            return self.view(f"Selected entry: {exc}.")
        return self.view("Removed.")
