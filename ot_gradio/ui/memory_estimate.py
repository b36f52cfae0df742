"""The Model tab's "Estimate memory": the memory planner's estimate of the run's peak on its
device ("peak ≈ 9.8 GB on cuda:0 (23.5 GB free), ...: fits" / "does not fit: turn on ...") for
the config on the form.

The planner loads torch and the base model, which the page process never does: it runs in a
child process started by the runner (runner/launch.py), `python -m ot_gradio estimate-memory
--config -` (cli.py), with the config on its stdin (not written to disk: it may hold the hub
token) and one JSON line on its stdout, within a time limit. Gradio only here: no torch."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import Any

import gradio as gr

from ..config.io import ConfigError, load_config
from ..runner.launch import module_command, run_child

TIMEOUT_S = 900.0  # loading a large base model on a CPU takes minutes
COMMAND = module_command("ot_gradio", "estimate-memory", "--config", "-")
HINT = "`python -m ot_gradio validate --config FILE` prints the same estimate in a terminal, with the full error."


def _bullets(items: list[str]) -> str:
    return "\n".join(f"- `{item}`" for item in items)


def config_problems(config: dict[str, Any]) -> list[str]:
    """The schema's problems of `config`, by field (checked here, before a process is started)."""
    try:
        load_config(copy.deepcopy(config))
    except ConfigError as err:
        return [str(p) for p in (getattr(err, "errors", None) or [str(err)])]
    return []


def _last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:400] if lines else "no output"


def estimate_markdown(config: dict[str, Any], *, timeout: float = TIMEOUT_S, command: list[str] | None = None) -> str:
    """The estimate for `config` as Markdown for the Model tab; a message saying what to do when
    there is none (a config with problems, a base model that cannot be loaded, no answer in time)."""
    problems = config_problems(config)
    if problems:
        return f"**Memory not estimated: fix the config first.**\n\n{_bullets(problems)}"
    base = str(config.get("base_model_name") or "")
    started = time.monotonic()
    try:
        out = run_child(command or COMMAND, json.dumps(config), timeout)
    except OSError as err:
        return f"**Memory not estimated:** could not start `{' '.join(COMMAND[1:])}` ({err.strerror or err})."
    if out is None:
        return (f"**Memory not estimated: no answer within {timeout:.0f} s.** Loading the base model "
                f"(`base_model_name`: {base or 'empty'}) takes longer than that here. {HINT}")
    seconds = time.monotonic() - started
    result = _last_json(out.stdout)
    if result is None:
        return f"**Memory not estimated:** the estimate process failed (exit code {out.returncode}): `{_last_line(out.stderr)}`. {HINT}"
    if result.get("problems"):
        return f"**Memory not estimated: fix the config first.**\n\n{_bullets(result['problems'])}"
    summary = str(result.get("summary", ""))
    if not result.get("estimated") and summary.startswith("not estimated ("):  # the model did not load
        return (f"**Memory not estimated:** {summary.removeprefix('not estimated (').removesuffix(')')}. Check "
                f"`base_model_name` ({base or 'empty'}): the model must load on this machine (a local folder or file, "
                f"or a Hugging Face repo that is downloaded or reachable). {HINT}")
    if not result.get("estimated"):  # loaded, but the planner's probe could not run it
        return (f"**Memory not estimated:** {summary}. Gradient checkpointing AUTO turns it on for such a run. "
                f"{result.get('line', '')}")
    return (f"**Memory estimate:** {result['summary']}\n\n"
            f"<small>For the config on the form at {time.strftime('%H:%M:%S')} (measured in {seconds:.0f} s with the model "
            f"loaded as a run loads it). {result['line']}</small>")


PROMPT = ("Press **Estimate memory** for the run's peak on its device (loads the base model in a separate process; "
          "takes as long as loading the model).")
# an estimate is of one model: changing one of these makes it another model's
ESTIMATED_OF = ("model_type", "base_model_name", "training_method")


def stale(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether an estimate shown for `before` no longer says anything about `after`."""
    return any(before.get(key) != after.get(key) for key in ESTIMATED_OF)


class MemoryEstimate:
    """The button and its answer, under the Model tab's memory table."""

    def build(self) -> None:
        self.button = gr.Button("Estimate memory", size="sm", elem_id="memory-estimate-button")
        self.output = gr.Markdown(PROMPT, elem_id="memory-estimate")
        self.config = gr.State(None)  # the config on the form when the button was pressed

    def wire(self, read: Callable[[dict], dict], inputs: set) -> None:
        """`read` takes the config on the form (quick: it runs in turn with the edits, ui/page.py);
        the estimate of it follows on its own, so the minutes a model takes to load hold up no edit."""
        self.button.click(read, inputs, self.config, show_progress="hidden").then(
            lambda config: estimate_markdown(config), self.config, self.output, show_progress="full")
