"""Named HTTP API endpoints for the queue and the run .

``QueueApi`` holds the handlers (plain functions, testable with fakes); ``register`` exposes
them with ``gr.api`` inside an open ``gr.Blocks`` so they live under /gradio_api/ behind the
page's guard. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from ..config.io import ConfigError
from ..config.json_file import parse_json_text
from ..runner.queue import RunQueue
from ..secrets import SECRET_KEYS, take_secrets

Validate = Callable[[dict[str, Any]], tuple[dict[str, Any] | None, list[str], list[str]]]


class QueueApi:
    def __init__(self, queue: RunQueue, supervisor: Any, validate: Validate):
        self.queue = queue
        self.supervisor = supervisor
        self.validate = validate

    def queue_config(self, config_json: str) -> dict[str, Any]:
        """Queue a config (JSON text); returns {"id": ...} or {"problems": [...]}."""
        try:
            config = parse_json_text(config_json, "config_json")
        except ConfigError as exc:
            return {"problems": [f"{exc}; send the config as a JSON object"]}
        if not isinstance(config, dict):
            return {"problems": ["config_json: must be a JSON object (a OneTrainer/ot_gradio config)"]}
        # a token in the config goes where the page keeps it (the runs get it from there), as the CLI
        # does; only once the config is taken: a refused one leaves the stored tokens as they were
        section = config.get("secrets")
        tokens = {"secrets": dict(section)} if isinstance(section, dict) else {}
        if tokens:
            config = {**config, "secrets": {**section, **{k: "" for k in SECRET_KEYS if k in section}}}
        valid, problems, _warnings = self.validate(config)
        if problems or valid is None:
            return {"problems": problems or ["config: refused"]}
        moved = take_secrets(tokens, self.supervisor.workspace)
        return {"id": self.queue.add(valid), **({"warnings": moved} if moved else {})}

    def start(self, config_json: str = "") -> dict[str, Any]:
        """Queue the given config (if any) and wake the queue runner."""
        result = self.queue_config(config_json) if config_json.strip() else {}
        if "problems" in result:
            return result
        self.queue.start_thread()
        self.queue.step()
        return {**result, "queue_length": self.queue.waiting()}

    def stop(self) -> dict[str, Any]:
        messages = [self.supervisor.stop(run) for run in self.supervisor.active_runs()]
        return {"stopped": len(messages), "messages": messages}

    def status(self) -> dict[str, Any]:
        active = self.supervisor.active_runs()
        out: dict[str, Any] = {"status": "idle", "queue_length": self.queue.waiting()}
        if active:
            state = self.supervisor.state(active[-1])
            progress = state.progress
            out.update(
                run_dir=str(active[-1].path),
                status=state.status,
                step=progress.get("global_step"),
                total=progress.get("total_steps"),
                last_losses=[list(p) for p in state.losses[-10:]],
            )
        return out


def register_api(api: QueueApi) -> None:
    """Call inside ``with gr.Blocks():`` to add the named endpoints."""

    def queue_config(config_json: str) -> dict:
        return api.queue_config(config_json)

    def start(config_json: str = "") -> dict:
        return api.start(config_json)

    def stop() -> dict:
        return api.stop()

    def status() -> dict:
        return api.status()

    for fn in (queue_config, start, stop, status):
        gr.api(fn, api_name=fn.__name__)


API_NAMES = ("queue_config", "start", "stop", "status")
