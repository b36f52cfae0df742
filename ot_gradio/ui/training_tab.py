"""Pieces of the Training and Model tabs that are more than plain fields: the optimizer's own
settings (only the chosen optimizer's, remembered per optimizer), the learning-rate plot, and
the memory the chosen weight dtypes need."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from ..config.base_model_match import base_model_mismatch
from ..config.enums import GGUF_TYPES, LearningRateScheduler
from ..config.families import includable_parts
from ..config.lr_schedules import lr_curve
from ..config.param_counts import EXTRA_PARAMS, PARAMS

BYTES = {"FLOAT_32": 4, "TFLOAT_32": 4, "FLOAT_16": 2, "BFLOAT_16": 2, "FLOAT_8": 1, "INT_8": 1, "NFLOAT_4": 0.5,
         "INT_W8A8": 1, "FLOAT_W8A8": 1}
GGUF_NAMES = {t.value for t in GGUF_TYPES}
LOADED_UNQUANTIZED = {"FLOAT_8", "INT_8", "NFLOAT_4", "INT_W8A8", "FLOAT_W8A8"}  # a module loaded like such a part is not quantized with it


def memory_markdown(config: dict[str, Any]) -> str:
    """The weights' memory by part, under a warning when the base model is of another family."""
    mismatch = base_model_mismatch(config.get("model_type"), config.get("base_model_name"))
    table = _weights_table(config)
    return f"**⚠️ {mismatch}**\n\n{table}" if mismatch else table


def _weights_table(config: dict[str, Any]) -> str:
    counts = PARAMS.get(str(config.get("model_type", "")))
    if counts is None:
        return f"No parameter counts for {config.get('model_type')} yet."
    rows = ["| part | parameters | weight dtype | memory |", "|---|---|---|---|"]
    total = 0.0
    left_out = includable_parts(str(config.get("model_type", "")))
    for part, n in counts.items():
        section = config.get(part) or {}
        dtype = section.get("weight_dtype", "FLOAT_32")
        if part in left_out and section.get("include", True) is False:  # not loaded (include off)
            rows.append(f"| {part} | {n / 1e6:,.0f} M | left out (Include off) | 0.00 GB |")
            continue
        if dtype in GGUF_NAMES:  # the .gguf file's quantized weights, as they load
            gguf = Path(str(section.get("model_name") or "")).expanduser()
            if not gguf.is_file():
                rows.append(f"| {part} | {n / 1e6:,.0f} M | {dtype} | the .gguf file's size (give a local transformer file) |")
                continue
            gb = gguf.stat().st_size / 1024**3
        else:
            gb = n * BYTES.get(dtype, 4) / 1024**3
        total += gb
        rows.append(f"| {part} | {n / 1e6:,.0f} M | {dtype} | {gb:.2f} GB |")
    in_ram = 0.0
    for name, (like, n, where) in EXTRA_PARAMS.get(str(config.get("model_type", "")), {}).items():
        own = config.get(name)  # a module with a section of its own (Ideogram 4's unconditional transformer) is in its type
        if name in left_out and isinstance(own, dict) and own.get("include", True) is False:  # not loaded (include off)
            rows.append(f"| {name} | {n / 1e6:,.0f} M | left out (Include off) | 0.00 GB |")
            continue
        if isinstance(own, dict) and own.get("weight_dtype") in LOADED_UNQUANTIZED:
            dtype = own["weight_dtype"]
        else:
            dtype = (config.get(like) or {}).get("weight_dtype", "FLOAT_32")
            if dtype not in BYTES or dtype in LOADED_UNQUANTIZED:  # not quantized itself: loads in the compute type
                dtype = str(config.get("train_dtype") or "FLOAT_32")
        gb = n * BYTES.get(dtype, 4) / 1024**3
        if where == "RAM":
            in_ram += gb
        else:
            total += gb
        rows.append(f"| {name} ({'waits in RAM' if where == 'RAM' else 'frozen, with ' + like}) | {n / 1e6:,.0f} M | {dtype} | {gb:.2f} GB |")
    rows.append(f"| **total** | | | **{total:.2f} GB**{f' + {in_ram:.2f} GB in RAM' if in_ram else ''} |")
    return "Weights alone (activations, optimizer state and LoRA come on top):\n\n" + "\n".join(rows)


def _count_images(folder: str, subfolders: bool, companions: tuple[str, ...] = (), clips: bool = False) -> int:
    """Training images in `folder` (with `clips`, a video model's, clips too): not masks, nor the model
    type's companion files (`companions`: an editing model's `-control`, a depth model's `-depth` images)."""
    from ..data.images import is_companion_name, is_image_name, is_mask_name  # noqa: PLC0415
    from ..data.video import is_video_name  # noqa: PLC0415

    path = Path(folder)
    if not path.is_dir():
        return 0
    walker = os.walk(path) if subfolders else [(str(path), [], os.listdir(path))]
    return sum(1 for _, _, files in walker for f in files
               if (is_image_name(f) and not is_mask_name(f) and not any(is_companion_name(f, c) for c in companions))
               or (clips and is_video_name(f)))


def _family_info(model_type: Any):
    from ..config.families import FAMILIES  # noqa: PLC0415

    return next((i for m, i in FAMILIES.items() if m.value == str(model_type or "")), None)


def _companions(info: Any) -> tuple[str, ...]:
    from ..data.images import CONTROL_SUFFIX, DEPTH_SUFFIX  # noqa: PLC0415

    return ((CONTROL_SUFFIX,) if info is not None and info.control_image else ()) + \
        ((DEPTH_SUFFIX,) if info is not None and info.depth_maps else ())


def steps_per_epoch(config: dict[str, Any]) -> int:
    """An estimate from the image counts, each concept's samples counted as the trainer does
    (data/balancing.py: floor(images × balancing), or int(balancing) with SAMPLES); the trainer's
    exact number also drops incomplete buckets."""
    from ..config.balancing_count import epoch_count  # noqa: PLC0415

    images = 0
    info = _family_info(config.get("model_type"))
    companions, clips = _companions(info), info is not None and info.frame_step is not None  # a video model reads clips too
    for c in config.get("concepts", []):
        if not c.get("enabled", True):
            continue
        n = _count_images(c.get("path", ""), c.get("include_subdirectories", False), companions, clips)
        images += epoch_count(n, float(c.get("balancing", 1.0)), c.get("balancing_strategy") or "REPEATS")
    batches = math.ceil(images / max(1, int(config.get("batch_size") or 1)))
    return max(1, math.ceil(batches / max(1, int(config.get("gradient_accumulation_steps") or 1))))


def lr_frame(config: dict[str, Any]):
    import pandas as pd  # noqa: PLC0415

    try:
        per_epoch = steps_per_epoch(config)
        epochs = int(config.get("epochs") or 1)
        total = min(per_epoch * epochs, 20000)
        scheduler = LearningRateScheduler(config.get("learning_rate_scheduler", "CONSTANT"))
        curve = lr_curve(
            scheduler,
            total,
            float(config.get("learning_rate_warmup_steps") or 0),
            float(config.get("learning_rate_cycles") or 1),
            float(config.get("learning_rate_min_factor") or 0),
            float(config.get("learning_rate") or 0),
        )
    except (ValueError, TypeError):
        return pd.DataFrame({"step": pd.Series([], dtype="float64"), "lr": pd.Series([], dtype="float64")})
    stride = max(1, len(curve) // 500)
    # float columns even when empty: gradio types a chart's axes by the first value's dtypes
    return pd.DataFrame({"step": pd.Series(range(0, len(curve), stride), dtype="float64"), "lr": pd.Series(curve[::stride], dtype="float64")})
