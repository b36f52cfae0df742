"""How the resume's messages name a backup, shared by resume.py and resume_damaged.py (which
imports resume.py, so neither can hold it for the other)."""

from __future__ import annotations

from pathlib import Path


def shown(backup: Path) -> str:
    """`<run>/<backup>`: the backup as the workspace's run folders show it."""
    return f"{backup.parent.parent.name}/{backup.name}"
