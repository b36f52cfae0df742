"""Parsing of resolution strings: "512", "768x512", "384,448,512"."""

from __future__ import annotations


def parse_resolutions(text: str) -> list[tuple[int, int]]:
    """Return (height, width) pairs. Raises ValueError with a message a user can act on."""
    out: list[tuple[int, int]] = []
    for part in str(text).split(","):
        part = part.strip().lower()
        if not part:
            continue
        try:
            if "x" in part:
                w, h = (int(p) for p in part.split("x", 1))
            else:
                w = h = int(part)
        except ValueError:
            raise ValueError(f"'{part}' is not a resolution: use a number like 512, WxH like 768x512, or a list like 384,448,512") from None
        if not (64 <= w <= 8192 and 64 <= h <= 8192) or w % 8 or h % 8:
            raise ValueError(f"resolution {part} must be between 64 and 8192 and a multiple of 8")
        out.append((h, w))
    if not out:
        raise ValueError("resolution is empty: use a number like 512 or a list like 384,448,512")
    return out
