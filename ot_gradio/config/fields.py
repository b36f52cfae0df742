"""The one way to declare a config option.

Every option is one line: ``name: type = opt(default, "Label", "Tooltip", tab=..., ge=..., le=...)``.
The page, validation, JSON, CLI overrides and docs read label, tooltip, tab, bounds and the
``implemented`` flag from the field's metadata, so they cannot drift from the trainer.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Options the trainer does not act on yet. The page marks them and the doctor warns when a
# config sets one away from its default, so no setting is silently ignored.
PLANNED = "planned"


def opt(
    default: Any = ...,
    label: str = "",
    tooltip: str = "",
    *,
    tab: str | None = None,
    ge: float | None = None,
    le: float | None = None,
    gt: float | None = None,
    lt: float | None = None,
    status: str = "ok",
    advanced: bool = False,
    default_factory: Any = None,
    choices: list[str] | None = None,
) -> Any:
    extra: dict[str, Any] = {"label": label, "tooltip": tooltip, "status": status}
    if tab:
        extra["tab"] = tab
    if advanced:
        extra["advanced"] = True
    if choices:
        extra["choices"] = choices
    kwargs: dict[str, Any] = {"description": tooltip, "json_schema_extra": extra}
    for key, value in (("ge", ge), ("le", le), ("gt", gt), ("lt", lt)):
        if value is not None:
            kwargs[key] = value
    if default_factory is not None:
        return Field(default_factory=default_factory, **kwargs)
    return Field(default, **kwargs)


class Section(BaseModel):
    """Base of every config group: unknown keys are an error here (the loader warns and drops
    them before validation), assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_enum_values=False)


def field_meta(model: type[BaseModel], name: str) -> dict[str, Any]:
    info = model.model_fields[name]
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return dict(extra)
