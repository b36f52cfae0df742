"""`python -m ot_gradio sample`: draw images from prompts with a base model (plus a LoRA, an
embedding or a run's last backup), inline in this process. Torch-free at import time: the
sampling tool is imported inside the command."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("sample", help="generate images from prompts with a base model, a LoRA, an embedding or a run's last backup")
    p.add_argument("--model-type", default="STABLE_DIFFUSION_15", help="model family, e.g. STABLE_DIFFUSION_15 (default), STABLE_DIFFUSION_XL_10_BASE")
    p.add_argument("--base-model", default="", help="hub id, local diffusers folder or .safetensors/.ckpt file (not needed with --run)")
    p.add_argument("--config-dir", default="", help="for a single-file base model offline: a diffusers folder of the same model type")
    p.add_argument("--lora", default="", metavar="PATH", help="a kohya or diffusers LoRA .safetensors file")
    p.add_argument("--lora-weight", type=float, default=1.0, metavar="W", help="LoRA strength (default 1.0; 0 = off)")
    p.add_argument("--embedding", default="", metavar="PATH", help="an embedding file (A1111 .safetensors/.pt)")
    p.add_argument("--token", default="", metavar="T", help="the text that triggers the embedding in prompts (default: its trained placeholder or file name)")
    p.add_argument("--run", default="", metavar="RUN_DIR", help="a run folder (or run id in --workspace): its base model with its last backup")
    p.add_argument("--prompt", action="append", required=True, metavar="TEXT", help="a prompt; repeat for several images")
    p.add_argument("--negative", default="", help="negative prompt for every image")
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--height", type=int, default=512)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--cfg", type=float, default=7.0, help="CFG scale (default 7)")
    p.add_argument("--seed", type=int, default=42, help="noise seed; -1 = random (default 42)")
    p.add_argument("--sampler", default="DDIM", help="DDIM, EULER, EULER_A, DPMPP, DPMPP_SDE, UNIPC or a *_KARRAS variant")
    p.add_argument("--output-dir", default="", help="where the PNGs go (default <workspace>/tool-samples/<time>/)")
    p.add_argument("--workspace", default="workspace/run",
                   help="workspace folder, as the config's workspace_dir (for run ids and the default output folder; default workspace/run)")
    p.add_argument("--device", default="", help="cuda, cuda:1, mps or cpu (default: cuda if there is one)")
    p.add_argument("--dtype", default="FLOAT_32", help="FLOAT_32 (default), FLOAT_16 or BFLOAT_16 (half types only on a GPU)")
    p.set_defaults(func=cmd_sample)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    prompt = {"negative_prompt": args.negative, "width": args.width, "height": args.height, "steps": args.steps,
              "cfg_scale": args.cfg, "seed": args.seed, "sampler": args.sampler}
    return {
        "model_type": args.model_type, "base_model": args.base_model, "config_dir": args.config_dir,
        "lora": args.lora, "lora_weight": args.lora_weight, "embedding": args.embedding, "embedding_token": args.token,
        "run": args.run, "prompts": [{**prompt, "prompt": text} for text in args.prompt],
        "output_dir": args.output_dir, "workspace": args.workspace, "device": args.device, "dtype": args.dtype,
    }


def cmd_sample(args: argparse.Namespace) -> int:
    from .jobs import run_in_console  # noqa: PLC0415

    result = run_in_console("sample", params_from_args(args), unit="image")
    if result is None:
        return 2
    for path in result["paths"]:
        print(path)
    print(result["message"], file=sys.stderr)
    return 0
