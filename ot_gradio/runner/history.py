"""Run history: every run of a workspace read from its run folder (no second database).

Pure Python (no torch): the page imports it. A run's events are folded by supervisor.RunState,
the same reader the live monitor uses; this module adds what only history needs (started,
duration, smoothed loss, validation loss, config differences, samples side by side).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from .rundir import RunDir, run_is_live
from .rundir import list_runs as run_folders
from .supervisor import RunState, as_number

COLUMNS = ("name", "status", "started", "duration", "steps", "smoothed loss", "output file")


def _run(run_dir: str | Path | RunDir) -> RunDir:
    return run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))


def _events(run: RunDir) -> list[dict[str, Any]]:
    events, _ = run.read_events(0)
    return events


def run_state(run_dir: str | Path | RunDir) -> RunState:
    """The run's state from its events; a run no worker holds that never said how it ended is
    'crashed' (as the monitor shows it)."""
    run = _run(run_dir)
    state = RunState(run.run_id)
    for event in _events(run):
        state.apply(event)
    state.alive = run_is_live(run)
    if not state.alive and not state.finished:
        state.status = "crashed" if run.events.exists() else "not started"
    return state


def run_config(run_dir: str | Path | RunDir) -> dict[str, Any]:
    """The exact config the run used ({} if its config.json is unreadable)."""
    try:
        data = json.loads(_run(run_dir).config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def run_series(run_dir: str | Path | RunDir) -> dict[str, list]:
    """By step: loss, smoothed loss, lr (one row per 'metrics' event) and validation loss."""
    out: dict[str, list] = {"step": [], "loss": [], "smooth_loss": [], "lr": [], "validation_step": [], "validation_loss": []}
    nan = float("nan")
    for e in _events(_run(run_dir)):
        if e.get("type") == "metrics" and as_number(e.get("loss")) is not None:
            loss = as_number(e["loss"])
            out["step"].append(int(e.get("global_step", 0)))
            out["loss"].append(loss)
            out["smooth_loss"].append(loss if (smooth := as_number(e.get("smooth_loss"))) is None else smooth)
            out["lr"].append(nan if (lr := as_number(e.get("lr"))) is None else lr)
        elif e.get("type") == "validation" and as_number(e.get("loss")) is not None:
            out["validation_step"].append(int(e.get("global_step", 0)))
            out["validation_loss"].append(as_number(e["loss"]))
    return out


def output_file(run_dir: str | Path | RunDir) -> str:
    """The model the run last saved (not an embedding side file); '' if it saved none."""
    saved = [e for e in _events(_run(run_dir)) if e.get("type") == "saved" and e.get("kind", "model") != "embedding"]
    return str(saved[-1].get("path", "")) if saved else ""


def trusted_output(run_dir: str | Path | RunDir, workspace: str | Path, config: dict[str, Any] | None = None) -> str | None:
    """The run's output file, resolved, when it exists and is under the workspace or is the run's
    configured output path (never another file a tampered events line names); None otherwise."""
    saved = output_file(run_dir)
    if not saved:
        return None
    dest = (run_config(run_dir) if config is None else config).get("output_model_destination")
    try:
        path = Path(saved).resolve()
        allowed = path.is_relative_to(Path(workspace).resolve()) or bool(dest and path == Path(str(dest)).resolve())
        return str(path) if allowed and path.is_file() else None
    except (OSError, ValueError, RuntimeError):
        return None


def _fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def run_row(run_dir: str | Path | RunDir) -> dict[str, Any]:
    run = _run(run_dir)
    events = _events(run)
    times = [float(e["time"]) for e in events if isinstance(e.get("time"), int | float)]
    try:
        started_at = times[0] if times else run.config.stat().st_mtime
    except OSError:
        started_at = 0.0
    metrics = [e for e in events if e.get("type") == "metrics"]
    last = metrics[-1] if metrics else {}
    smooth = last.get("smooth_loss", last.get("loss"))
    return {
        "name": run.run_id,
        "status": run_state(run).status,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started_at)) if started_at else "",
        "started_at": started_at,
        "duration": _fmt_duration(times[-1] - times[0]) if len(times) > 1 else "",
        "steps": max((int(e.get("global_step", 0)) for e in metrics), default=0),
        "smoothed loss": round(float(smooth), 6) if smooth is not None else None,
        "output file": output_file(run),
    }


def list_runs(workspace: str | Path) -> list[dict[str, Any]]:
    """One row per run folder of the workspace, newest first."""
    rows = [run_row(r) for r in run_folders(workspace)]
    return sorted(rows, key=lambda r: (r["started_at"], r["name"]), reverse=True)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts and lists as dotted paths: {"optimizer.lr": 1e-4, "concepts.0.path": ...}."""
    if isinstance(data, dict):
        items = data.items()
    elif isinstance(data, list):
        items = ((str(i), v) for i, v in enumerate(data))
    else:
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in items:
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict | list) and value:
            out.update(flatten(value, path))
        else:
            out[path] = value
    return out


_MISSING = "(not set)"


def _item_only_some_have(key: str, flat: list[dict[str, Any]]) -> str | None:
    """"concepts.1" for a key under a list item that some configs lack altogether."""
    parts = key.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            item = ".".join(parts[:i + 1])
            if any(not any(k == item or k.startswith(item + ".") for k in f) for f in flat):
                return item
    return None


def differing_fields(configs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Dotted config paths whose values are not the same in every config, with each config's
    value; a list item only some configs have (a second concept) is one row, after the others."""
    flat = [flatten(c) for c in configs]
    keys = sorted(set().union(*flat)) if flat else []
    out, items = {}, {}
    for key in keys:
        values = [f.get(key, _MISSING) for f in flat]
        if not any(v != values[0] for v in values[1:]):
            continue
        item = _item_only_some_have(key, flat)
        if item is None:
            out[key] = values
        elif item not in items:
            items[item] = [next((f"'{f[n]}'" for n in (f"{item}.name", f"{item}.prompt", f"{item}.path") if f.get(n)), "(set)")
                           if any(k.startswith(item + ".") or k == item for k in f) else _MISSING for f in flat]
    return {**out, **items}


def compare(run_dirs: list[str | Path | RunDir]) -> dict[str, Any]:
    """Runs side by side: `loss` rows (step, loss, run) overlaid by step (smoothed training loss,
    and validation loss as '<run> (validation)'); `differing` config fields (path -> value per
    run); `samples` grouped by (prompt, step) as [(prompt, step, [(run, path), ...])]."""
    runs = [_run(r) for r in run_dirs]
    loss: list[tuple[float, float, str]] = []
    for run in runs:
        s = run_series(run)
        loss += [(float(st), v, run.run_id) for st, v in zip(s["step"], s["smooth_loss"], strict=True)]
        loss += [(float(st), v, f"{run.run_id} (validation)") for st, v in zip(s["validation_step"], s["validation_loss"], strict=True)]
    grouped: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for run in runs:
        for sample in run_state(run).samples:
            key = (str(sample.get("prompt", "")), int(sample.get("step") or 0))
            grouped.setdefault(key, []).append((run.run_id, str(sample.get("path", ""))))
    samples = [(prompt, step, grouped[(prompt, step)]) for prompt, step in sorted(grouped, key=lambda k: (k[0], k[1]))]
    return {"loss": loss, "differing": differing_fields([run_config(r) for r in runs]), "samples": samples}


class DeleteRefused(ValueError):
    pass


def delete_run(run_dir: str | Path | RunDir, confirm: str) -> Path:
    """Deletes the run folder, only if `confirm` is the run's name and no worker runs in it.
    Only the folder itself: a model saved outside it (output_model_destination) is kept, and a
    symlink inside it is removed as a link, never followed."""
    run = _run(run_dir)
    if str(confirm or "").strip() != run.run_id:
        raise DeleteRefused(f"Delete: type the run's name '{run.run_id}' into the confirmation box to delete it.")
    if run.path.is_symlink() or not run.path.is_dir():
        raise DeleteRefused(f"Delete: {run.path} is not a run folder.")
    if run_is_live(run):
        raise DeleteRefused(f"Delete: run '{run.run_id}' is still running; stop it first.")
    shutil.rmtree(run.path)
    return run.path
