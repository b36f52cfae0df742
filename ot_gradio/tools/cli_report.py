"""`python -m ot_gradio report`: the dataset report in the terminal (or as JSON)."""

from __future__ import annotations

import argparse
import json
import logging
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="dataset report: images, captions, masks, unreadable files, buckets, images never trained")
    p.add_argument("folders", nargs="*", help="concept folders to report on (default: the config's concepts)")
    p.add_argument("--config", help="config JSON (ours or OneTrainer's) or a preset name; its concepts, resolution and batch size")
    p.add_argument("--resolution", help="resolution(s) to bucket at, e.g. 512 or 384,448,512 (default: the config's)")
    p.add_argument("--batch-size", type=int, help="batch size (default: the config's)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from ..config.io import ConfigError, config_to_dict, load_config  # noqa: PLC0415
    from ..config.presets import load_config_argument  # noqa: PLC0415
    from .jobs import JobError  # noqa: PLC0415
    from .report import build_report, to_markdown  # noqa: PLC0415

    try:
        config = config_to_dict(load_config_argument(args.config)[0].config if args.config else load_config({}).config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.folders:
        config["concepts"] = [{"path": folder, "name": folder.rstrip("/").split("/")[-1]} for folder in args.folders]
    if not config.get("concepts"):
        print("error: no concepts: give concept folders or a --config with concepts", file=sys.stderr)
        return 2
    logging.getLogger("ot_gradio.data").setLevel(logging.ERROR)  # its warnings are in the report
    try:
        report = build_report(config, args.resolution, args.batch_size)
    except JobError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else to_markdown(report))
    return 1 if report["failed_concepts"] else 0
