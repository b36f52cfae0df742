"""`python -m ot_gradio caption auto FOLDER`: automatic captions in the terminal, the same job
the page runs in a worker (same modes, backups and messages). Torch-free at import time."""

from __future__ import annotations

import argparse
from typing import Any

MODELS = ("blip", "blip2", "wd14", "joycaption", "qwen-vl")
MODES = ("replace", "missing", "add")


def register_auto(caption_sub: argparse._SubParsersAction) -> None:
    p = caption_sub.add_parser("auto", help="caption images automatically with BLIP, BLIP-2, the WD14 tagger, JoyCaption or Qwen2.5-VL")
    p.add_argument("folder", help="dataset folder")
    p.add_argument("--model", choices=MODELS, default="blip", help="captioning model (default: blip)")
    p.add_argument("--model-path", default="", help="hub id or local folder of the model (default: OneTrainer's choice for the model)")
    p.add_argument("--mode", choices=MODES, default="missing",
                   help="replace: every image; missing: only images without a caption; add: append as a new line (default: missing)")
    p.add_argument("--initial", default="", help="BLIP/BLIP-2: the text the model continues; the others: put before the caption")
    p.add_argument("--prefix", default="", help="text put before every caption, as typed")
    p.add_argument("--postfix", default="", help="text put after every caption, as typed")
    p.add_argument("--subfolders", action="store_true", help="include images in sub-folders")
    p.add_argument("--general-threshold", type=float, default=0.35, help="WD14: minimum confidence of a general tag")
    p.add_argument("--character-threshold", type=float, default=0.85, help="WD14: minimum confidence of a character tag")
    p.add_argument("--instruction", default="", help="JoyCaption / Qwen2.5-VL: what the model is asked (default: the model's own)")
    p.add_argument("--max-new-tokens", type=int, default=512, help="JoyCaption / Qwen2.5-VL: the caption's length limit in tokens")
    p.add_argument("--seed", type=int, default=42, help="JoyCaption / Qwen2.5-VL: the sampling seed (the same seed writes the same captions)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.set_defaults(func=cmd_auto)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "folder": args.folder, "model": args.model, "model_path": args.model_path, "mode": args.mode,
        "initial_caption": args.initial, "prefix": args.prefix, "postfix": args.postfix, "include_subfolders": args.subfolders,
        "general_threshold": args.general_threshold, "character_threshold": args.character_threshold, "device": args.device,
        "instruction": args.instruction, "max_new_tokens": args.max_new_tokens, "seed": args.seed,
    }


def cmd_auto(args: argparse.Namespace) -> int:
    from .jobs import run_in_console  # noqa: PLC0415

    result = run_in_console("autocaption", params_from_args(args), unit="image")
    if result is None:
        return 2
    print(result["message"])
    return 1 if result["failed"] else 0
