"""`python -m ot_gradio convert checkpoint|lora|merge ...`: the Convert tool without the page.

Torch-free at import (the CLI imports every tool's module to build its help); the job itself runs
inline in this process through `run_inline("convert", ...)`, the same function the page's worker runs.
"""

from __future__ import annotations

import argparse
from typing import Any

FORMATS = ("diffusers", "single")
DTYPES = ("float32", "float16", "bfloat16")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("convert", help="convert checkpoints and LoRA files, merge a LoRA into a checkpoint")
    ops = parser.add_subparsers(dest="operation", metavar="OPERATION", required=True)

    p = ops.add_parser("checkpoint", help="diffusers folder <-> single .safetensors file, and/or change the dtype")
    p.add_argument("--model-type", required=True, help="e.g. STABLE_DIFFUSION_15, STABLE_DIFFUSION_XL_10_BASE")
    p.add_argument("--input", required=True, help="diffusers folder, single .safetensors/.ckpt file, or Hugging Face id")
    p.add_argument("--output", required=True, help="output folder (diffusers) or .safetensors file (single)")
    p.add_argument("--format", choices=FORMATS, help="default: single if --output ends in .safetensors, else diffusers")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    _model_options(p)
    p.set_defaults(func=cmd_convert)

    p = ops.add_parser("lora", help="LoRA file: kohya keys <-> diffusers/PEFT keys")
    p.add_argument("--input", required=True, help="LoRA .safetensors file")
    p.add_argument("--output", required=True, help="output .safetensors file")
    p.add_argument("--to", required=True, choices=("kohya", "diffusers"))
    p.add_argument("--model-type", required=True, help="the model the LoRA is for, e.g. STABLE_DIFFUSION_15")
    p.add_argument("--base", help="SDXL: the base model (folder or hub id) whose UNet names kohya layers; default: SDXL 1.0's layout")
    _model_options(p)
    p.set_defaults(func=cmd_convert)

    p = ops.add_parser("merge", help="merge a LoRA (either format) into a checkpoint at a weight")
    p.add_argument("--model-type", required=True)
    p.add_argument("--base", required=True, help="base model: diffusers folder, single file or Hugging Face id")
    p.add_argument("--lora", required=True, help="LoRA .safetensors file (kohya or diffusers/PEFT keys)")
    p.add_argument("--weight", type=float, default=1.0, help="the LoRA's strength (1.0 = as trained)")
    p.add_argument("--output", required=True)
    p.add_argument("--format", choices=FORMATS)
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    _model_options(p)
    p.set_defaults(func=cmd_convert)


def _model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="for a single-file input: a diffusers folder of the same model type to take the configs from")
    p.add_argument("--offline", action="store_true", default=None, help="never download (also on with HF_HUB_OFFLINE=1)")


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    skip = {"func", "command"}
    params = {k: v for k, v in vars(args).items() if k not in skip and v is not None}
    return params


def cmd_convert(args: argparse.Namespace) -> int:
    from .jobs import run_in_console  # noqa: PLC0415

    result = run_in_console("convert", params_from_args(args), unit="stage")
    if result is None:
        return 2
    print(result["message"])
    return 0
