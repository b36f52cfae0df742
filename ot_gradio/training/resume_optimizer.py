"""Continuing a backup's optimizer and learning-rate schedule with this run's settings, as
OneTrainer's create.py does (create_optimizer, create_lr_scheduler):

- the backup's optimizer state is loaded only into the same optimizer; another one starts fresh
  (LION must not step with ADAMW's betas, SGD cannot read ADAMW's groups);
- it is loaded group by group, by the group's name: a group the backup lacks (a part that now
  trains) or whose settings it lacks starts fresh;
- each loaded group takes this run's learning rate (`lr`, `initial_lr`) and keeps the backup's
  other settings (betas, weight decay, Prodigy's d ...);
- the LR schedule is this run's (its scheduler, warmup, cycles, a CUSTOM scheduler's parameters,
  its length), continued at the resumed step.

What changed is said in the run's warnings. With nothing changed this is the backup's state
exactly (an uninterrupted run and a resumed one end with equal weights)."""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

from torch.optim.lr_scheduler import LambdaLR

from ..config.optimizer import OptimizerConfig, effective_settings

LEAD = "continue_last_backup: "
# the settings that shape the LR schedule (epochs: its length)
SCHEDULE_KEYS = ("learning_rate_scheduler", "learning_rate_warmup_steps", "learning_rate_cycles", "learning_rate_min_factor",
                 "custom_learning_rate_scheduler", "scheduler_params", "epochs")
_NOT_SETTINGS = {"params", "param_names", "lr", "initial_lr", "name"}


def _groups(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The param groups of an optimizer's state dict (a fused back pass's: each weight's optimizer's)."""
    if "per_weight" in state:
        return [g for sub in state["per_weight"] for g in sub.get("param_groups", [])]
    return list(state.get("param_groups", []))


def _group_ids(groups: list[dict[str, Any]]) -> list[str]:
    """A name per group, unique: the part (a Muon optimizer's `/muon` or `/adam` half), numbered when repeated."""
    seen: Counter[str] = Counter()
    ids = []
    for group in groups:
        name = f"{group.get('name', '')}/{group.get('optim_type', '')}"
        ids.append(f"{name}#{seen[name]}")
        seen[name] += 1
    return ids


def _shown(group_id: str) -> str:
    name, _, _ = group_id.partition("#")
    return name.rstrip("/") or "weights"


def _load(optimizer: Any, saved: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Load `saved` into `optimizer`: the groups that start fresh instead, each with why, and the
    names of those loaded from the backup."""
    fresh = optimizer.state_dict()
    if ("per_weight" in saved) != ("per_weight" in fresh):
        on = "per_weight" in saved
        return [f"all (the backup was made with the fused back pass {'on' if on else 'off'}, this run has it {'off' if on else 'on'})"], []
    if "per_weight" in saved:  # one optimizer per weight: all or nothing
        if len(saved["per_weight"]) != len(fresh["per_weight"]):
            return [f"all (the backup has {len(saved['per_weight'])} trained weights, this run {len(fresh['per_weight'])})"], []
        lacks = sorted({k for new, old in zip(_groups(fresh), _groups(saved), strict=True) for k in set(new) - set(old)})
        if lacks:
            return [f"all (the backup's optimizer has no {', '.join(lacks)})"], []
        optimizer.load_state_dict(saved)
        return [], list(dict.fromkeys(_shown(g) for g in _group_ids(_groups(fresh))))
    old_groups, new_groups = saved.get("param_groups", []), fresh["param_groups"]
    old_ids = _group_ids(old_groups)
    state, groups, started, loaded, index = {}, [], [], [], 0
    for group_id, new in zip(_group_ids(new_groups), new_groups, strict=True):
        old = old_groups[old_ids.index(group_id)] if group_id in old_ids else None
        why = ("the backup has none" if old is None
               else f"the backup has {len(old['params'])} weights in it, this run {len(new['params'])}" if len(old["params"]) != len(new["params"])
               else f"the backup's optimizer has no {', '.join(sorted(set(new) - set(old)))}" if set(new) - set(old) else None)
        if why is not None:
            started.append(f"{_shown(group_id)} ({why})")
            old = None
        else:
            loaded.append(_shown(group_id))
        group = dict(old if old is not None else new)
        group["params"] = list(range(index, index + len(new["params"])))
        index += len(new["params"])
        if old is not None:
            state.update({i: saved["state"][k] for i, k in zip(group["params"], old["params"], strict=True) if k in saved.get("state", {})})
        groups.append(group)
    if len(started) == len(groups):
        return started, []
    optimizer.load_state_dict({"state": state, "param_groups": groups})
    return started, loaded


def _setting_changes(old: dict[str, Any], config: Any, saved_groups: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The optimizer settings changed since the backup, as (kept: a setting of the groups, whose
    backup's value stays in the groups loaded from it; applied: this run's value acts, outside the groups)."""
    try:
        before = effective_settings(OptimizerConfig.model_validate(old.get("optimizer") or {}))
    except ValueError:
        return [], []
    now = effective_settings(config.optimizer)
    from .optimizers import OPTIMIZERS  # noqa: PLC0415  (the registry; torch-heavy)

    entry = OPTIMIZERS.get(config.optimizer.optimizer)
    in_groups = {k for g in saved_groups for k in g} - _NOT_SETTINGS
    kept, applied = [], []
    for key in sorted(set(before) | set(now)):
        if key in ("optimizer",) or before.get(key) == now.get(key):
            continue
        arg = entry.keys.get(key) if entry else None
        arg = arg or next((a for a, keys in (entry.tuples if entry else {}).items() if key in keys), None)
        (kept if arg in in_groups else applied).append(f"{key} {before.get(key)!r} -> {now.get(key)!r}")
    return kept, applied


def _learning_rates(saved: dict[str, Any], scheduler_state: dict[str, Any], optimizer: Any) -> list[tuple[str, float, float]]:
    """(group, the backup's base learning rate, this run's) per group of the optimizer."""
    new = [(g.get("name", ""), g.get("initial_lr", g["lr"])) for g in optimizer.param_groups]
    old = scheduler_state.get("base_lrs")
    if not isinstance(old, list) or len(old) != len(new):
        old = [g.get("initial_lr", g.get("lr")) for g in saved.get("param_groups", [])]
    if len(old) != len(new):
        return []
    return [(name, float(o), float(n)) for (name, n), o in zip(new, old, strict=True) if o is not None]


def _rate_changes(rates: list[tuple[str, float, float]]) -> list[str]:
    by_change: dict[tuple[float, float], list[str]] = {}
    for name, old, new in rates:
        if old != new:
            by_change.setdefault((old, new), []).append(name)
    return [f"learning rate {old:g} -> {new:g} from the backup's ({', '.join(n for n in names if n) or 'all'})"
            for (old, new), names in by_change.items()]


def continue_schedule(scheduler: Any, steps: int) -> None:
    """Move this run's freshly made scheduler to `steps` optimizer steps, as an uninterrupted run
    would have it: straight there for a closed-form LambdaLR (every built-in curve), else step by step."""
    if steps <= 0:
        return
    with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": the steps were taken before
        warnings.simplefilter("ignore", UserWarning)
        if isinstance(scheduler, LambdaLR):
            scheduler.last_epoch, scheduler._step_count = steps - 1, steps
            scheduler.step()
            return
        for _ in range(steps):
            scheduler.step()


def continue_optimizer(optimizer: Any, scheduler: Any, state: dict[str, Any], old: dict[str, Any], config: Any,
                       steps: int) -> list[str]:
    """Load the backup's optimizer state (`state["optimizer"]`) as OneTrainer does and move this
    run's scheduler to `steps`; the warnings to show, each saying what took effect."""
    said = []
    lrs = [(g["lr"], g.get("initial_lr")) for g in optimizer.param_groups]  # as this run's scheduler set them
    saved = state.get("optimizer") or {}
    rates = _learning_rates(saved, state.get("scheduler") or {}, optimizer)
    before = str((old.get("optimizer") or {}).get("optimizer") or config.optimizer.optimizer.value)
    now = config.optimizer.optimizer.value
    if before != now:
        said.append(f"{LEAD}optimizer changed {before} -> {now}: its state starts fresh, as OneTrainer does; the learning "
                    f"rates and the schedule are this run's, continued at step {steps}")
    else:
        started, loaded = _load(optimizer, saved)
        if started:
            said.append(f"{LEAD}the backup's {now} state does not fit for {', '.join(started)}: "
                        f"{'that group starts' if len(started) == 1 else 'those groups start'} with fresh optimizer state, as OneTrainer does")
        kept, applied = _setting_changes(old, config, _groups(saved))
        if kept and not loaded:  # every group started fresh, with this run's settings
            kept, applied = [], sorted(kept + applied)
        if kept:
            where = (f" in the groups loaded from the backup ({', '.join(loaded)}); the groups that start fresh take this "
                     "run's" if started else "")
            said.append(f"{LEAD}{now} settings changed since the backup ({', '.join(kept)}): the backup's values stay in effect"
                        f"{where}, as OneTrainer keeps a loaded optimizer's settings but its learning rate. To train with the new "
                        "values, start a new run")
        if applied:
            said.append(f"{LEAD}{now} settings changed since the backup ({', '.join(applied)}): this run's values apply")
    for group, (lr, initial) in zip(optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr
        if initial is not None:
            group["initial_lr"] = initial
    continue_schedule(scheduler, steps)
    dumped = config.model_dump(mode="json")
    keys = SCHEDULE_KEYS if _lasts(dumped) or _lasts(old) else SCHEDULE_KEYS[:-1]  # epochs: a constant rate has no length
    changes = [f"{k} {old[k]!r} -> {dumped.get(k)!r}" for k in keys if k in old and plain(old[k]) != plain(dumped.get(k))]
    rate_lines = _rate_changes(rates)
    if rate_lines or changes:
        what = "; ".join([*rate_lines, *(["schedule " + ", ".join(changes)] if changes else [])])
        said.append(f"{LEAD}{what}: this run's learning rates and schedule apply, continued at step {steps}, as OneTrainer "
                    "rebuilds them on resume")
    return said


def _lasts(config: dict[str, Any]) -> bool:
    """Whether the run's length shapes its LR schedule (a decay, or a warmup given as a fraction)."""
    try:
        fraction = 0 < float(config.get("learning_rate_warmup_steps") or 0) <= 1
    except (TypeError, ValueError):
        fraction = False
    return fraction or str(config.get("learning_rate_scheduler") or "CONSTANT") not in ("CONSTANT", "ADAFACTOR")


def plain(value: Any) -> Any:
    """A setting's value as compared across a backup's config and this run's: an enum (a field's
    default) as its value, a number as a float (the JSON of a backup has 1 for 1.0)."""
    value = getattr(value, "value", value)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
