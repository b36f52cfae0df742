"""`python -m ot_gradio mask FOLDER ...`: the automatic mask job run in this process.

Torch-free at import: `cli.py` imports this module to build `--help`; the job (and with it
torch, transformers or onnxruntime) is imported only when the command runs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

MODELS = ("clipseg", "rembg_human", "colour")
MODES = ("replace", "fill", "add", "subtract", "blend")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mask", help="make masks (<image>-masklabel.png) for a folder with ClipSeg, rembg human or by colour",
                       description="Make training masks automatically. White = train on this pixel. Existing masks are "
                                   "kept as <mask>.bak before they are overwritten.")
    p.add_argument("folder", help="folder of training images")
    p.add_argument("--model", choices=MODELS, default="clipseg", help="masker (default: clipseg)")
    p.add_argument("--prompt", default="", help="ClipSeg: what to keep, e.g. 'person, dog' (comma = any of them)")
    p.add_argument("--colour", "--color", dest="colour", default="", help="by colour: e.g. '#00ff00' or '0,255,0'")
    p.add_argument("--threshold", type=float, default=0.3,
                   help="0..1: ClipSeg/rembg keep scores above it; by colour keep pixels this close (default 0.3)")
    p.add_argument("--smoothing", type=int, default=5, help="blur radius in pixels before the threshold (default 5)")
    p.add_argument("--expansion", type=int, default=10, help="grow the mask by this many pixels (default 10)")
    p.add_argument("--alpha", type=float, default=1.0, help="0..1: strength of the new mask (default 1)")
    p.add_argument("--mode", choices=MODES, default="fill",
                   help="replace all masks, fill (only images without one), add, subtract or blend (default fill)")
    p.add_argument("--invert", action="store_true", help="mask everything except what the model found")
    p.add_argument("--subfolders", action="store_true", help="include images in subfolders")
    p.add_argument("--model-path", default="", help="ClipSeg: hub id or local folder; rembg: the .onnx file or its folder")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    p.add_argument("--download", action="store_true", help="rembg: download u2net_human_seg.onnx if it is missing")
    p.add_argument("--preview-dir", default="", help="write overlays of the first 4 images here instead of writing masks")
    p.set_defaults(func=cmd_mask)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    params = {
        "folder": args.folder, "model": args.model, "model_path": args.model_path, "prompt": args.prompt,
        "colour": args.colour, "threshold": args.threshold, "smoothing": args.smoothing, "expansion": args.expansion,
        "alpha": args.alpha, "mode": args.mode, "invert": args.invert, "include_subfolders": args.subfolders,
        "device": args.device, "allow_download": args.download,
    }
    if args.preview_dir:
        params.update(preview=True, preview_dir=args.preview_dir)
    return params


def cmd_mask(args: argparse.Namespace) -> int:
    from .jobs import run_in_console  # noqa: PLC0415

    result = run_in_console("automask", params_from_args(args), unit="image")
    if result is None:
        return 2
    print(result.get("message", "done"), file=sys.stderr)
    for path in result.get("preview", []):
        print(path)
    for name in result.get("failed", []):
        print(f"failed: {name}", file=sys.stderr)
    return 1 if result.get("failed") else 0
