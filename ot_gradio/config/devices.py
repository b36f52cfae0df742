"""The `device_indexes` setting: which GPUs a multi-GPU run uses (one training process each)."""

from __future__ import annotations

import os

# Set by the launcher (runner/launch.py) for the processes of a multi-GPU run; with LOCAL_RANK and
# WORLD_SIZE from torch.distributed.run it tells a rank apart from a worker that must launch.
DISTRIBUTED_ENV = "OT_GRADIO_DISTRIBUTED"


def in_rank_process() -> bool:
    """True in one of the processes the multi-GPU launcher started."""
    return os.environ.get(DISTRIBUTED_ENV) == "1" and "LOCAL_RANK" in os.environ


def parse_device_indexes(text: str) -> list[int]:
    """"0,1,3" -> [0, 1, 3]; blank -> [] (all GPUs). Raises ValueError naming the field."""
    text = (text or "").strip()
    if not text:
        return []
    out: list[int] = []
    for piece in text.split(","):
        piece = piece.strip()
        if not piece.isdigit():
            raise ValueError(
                f"device_indexes: {piece!r} in {text!r} is not a GPU index; write comma-separated numbers such as 0,1 "
                "(blank = every GPU)"
            )
        if int(piece) in out:
            raise ValueError(f"device_indexes: GPU {piece} is listed twice in {text!r}; list each GPU once")
        out.append(int(piece))
    return out
