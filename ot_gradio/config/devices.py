"""Device settings read without torch: `device_indexes` (which GPUs a multi-GPU run uses, one training process each) and `temp_device` (where the parts a step does not run wait)."""

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


def _device_parts(name: str) -> tuple[str, str]:
    """"cuda:1" -> ("cuda", "1"); "cuda" -> ("cuda", "")."""
    kind, _, index = str(name or "").strip().lower().partition(":")
    return kind, index


def parks_in_ram(temp_device: str) -> bool:
    """`temp_device` cpu (or blank): the parts a step does not run wait in RAM; otherwise they stay
    on the train device (temp_device_problem refuses any other device)."""
    return _device_parts(temp_device)[0] in ("", "cpu")


def temp_device_problem(temp_device: str, train_device: str) -> str | None:
    """`temp_device` names RAM (cpu) or the train device; any other device is refused, naming the field."""
    if parks_in_ram(temp_device):
        return None
    kind, index = _device_parts(temp_device)
    train_kind, train_index = _device_parts(train_device)
    if kind == train_kind and (not index or index == train_index or (not train_index and index == "0")):
        return None
    return (f"temp_device: {temp_device!r} is neither cpu nor the train device ({train_device or 'empty'}); parts a step "
            "does not run wait in RAM (cpu) or stay on the train device (the same name as train_device)")
