"""Shared test setup. Makes the repository importable when pytest is run as `.venv/bin/pytest`
(not only as `python -m pytest`, which adds the current folder itself)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
