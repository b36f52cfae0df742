"""The names of the tiny random models (`tiny:sd15` ...), known before a run without importing
the model package (it needs torch): read from the `@register_tiny("<name>", ...)` lines of
models/tiny/, where each family registers its own. tests/config/test_tiny_names.py ties this to
the registry."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

_TINY_DIR = Path(__file__).resolve().parents[1] / "models" / "tiny"
_REGISTER = re.compile(r'^@register_tiny\("([^"]+)"', re.MULTILINE)


@cache
def tiny_model_names() -> tuple[str, ...]:
    """Every `tiny:<name>`, sorted; empty when the sources are not at hand (then nothing is checked)."""
    names = {f"tiny:{m}" for path in _TINY_DIR.glob("*.py") for m in _REGISTER.findall(path.read_text(encoding="utf-8"))}
    return tuple(sorted(names))


def tiny_name_problem(field: str, value: str) -> str | None:
    """A `tiny:` name that is not one of them, named with the known ones (the run would fail at load)."""
    value = str(value or "").strip()
    known = tiny_model_names()
    if not value.startswith("tiny:") or not known or value in known:
        return None
    return f"{field}: '{value}' is not a tiny model; known: {', '.join(known)}."
