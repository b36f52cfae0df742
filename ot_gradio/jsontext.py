"""JSON from files the user brings (datasets' caption indexes, models' and LoRAs' metadata): every
way such text can fail to parse is a ValueError, which its readers already turn into a message
naming the file. `json.loads` raises RecursionError for deeply nested arrays (a few hundred kB of
`[`), which would otherwise crash the scan or the load with a traceback."""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    """`json.loads`, with too deep a nesting a ValueError as a syntax error is."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be read") from None
