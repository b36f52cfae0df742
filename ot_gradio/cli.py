"""Command line: `python -m ot_gradio COMMAND`. Heavy imports happen inside the commands, so
`--help` and the page start fast."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

TOOL_COMMANDS = ("caption", "mask", "video", "convert", "sample", "report")


def _loaded(args: argparse.Namespace) -> tuple[Any, bool] | None:
    """The config `--config` and `--set` name, and whether it was OneTrainer's; None (the error
    printed) when it cannot be loaded."""
    from .config.io import ConfigError  # noqa: PLC0415
    from .config.presets import load_config_argument  # noqa: PLC0415

    try:
        return load_config_argument(args.config, args.set or [])
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return None


def cmd_train(args: argparse.Namespace) -> int:
    from .config.doctor import check  # noqa: PLC0415

    if (found := _loaded(args)) is None:
        return 2
    loaded, from_ot = found
    config = loaded.config
    from .config.io import config_to_dict  # noqa: PLC0415
    from .runner.startcheck import start_problems  # noqa: PLC0415
    from .training.optimizers import OPTIMIZERS  # noqa: PLC0415

    problems = start_problems(config, config_to_dict(config), args.workspace)  # as `validate` and the page's Start
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2

    for warning in _unique(loaded.warnings + check(config, available_optimizers=OPTIMIZERS, include_planned=not from_ot)):
        print(f"warning: {warning}", file=sys.stderr)

    from .data.demo import ensure_demo_concepts  # noqa: PLC0415
    from .runner.rundir import create_run  # noqa: PLC0415
    from .runner.worker import run_worker  # noqa: PLC0415
    from .secrets import take_secrets  # noqa: PLC0415

    ensure_demo_concepts(config)
    workspace = Path(args.workspace or config.workspace_dir)
    for warning in take_secrets(config_to_dict(config, include_secrets=True), workspace):
        print(f"warning: {warning}", file=sys.stderr)
    run = create_run(workspace, config_to_dict(config))
    print(f"run folder: {run.path}", file=sys.stderr)
    console = _Console()
    if config.multi_gpu:  # several processes: the worker launches them; follow their events here
        from .runner import collection  # noqa: PLC0415

        collection.resume()  # this process only follows them (collection.py)
        code = _follow_worker(run, console)
    else:
        code = run_worker(run.path, echo=console.on_event)
    console.close()
    if code == 0:
        print(f"{console.final_status}: {console.final_message}", file=sys.stderr)
    else:
        print(f"error: {console.final_message or 'training failed'} (log: {run.log}, events: {run.events})", file=sys.stderr)
    return code


def _follow_worker(run: Any, console: _Console) -> int:
    """Run `python -m ot_gradio.runner.worker` (which starts one process per GPU) and show its
    events. Ctrl-C asks it to stop after the step (backup and model written); a second Ctrl-C
    stops it at once."""
    import signal  # noqa: PLC0415
    import time  # noqa: PLC0415

    from .runner.launch import start_child, worker_command  # noqa: PLC0415

    proc = start_child(worker_command(run.path), log=run.log)
    cursor = 0
    asked = False
    while True:
        try:
            finished = proc.poll() is not None
            events, cursor = run.read_events(cursor)
            for event in events:
                console.on_event(event)
            if finished:
                return proc.returncode
            time.sleep(0.5)
        except KeyboardInterrupt:
            if asked:
                os.killpg(proc.pid, signal.SIGTERM)
                console.write("stopping now (second Ctrl-C)")
            else:
                run.request("stop")
                asked = True
                console.write("stop requested: finishing the step, writing a backup and the model; Ctrl-C again stops at once")


def _unique(messages: list[str]) -> list[str]:
    return list(dict.fromkeys(messages))


class _Console:
    """Shows worker events in the terminal: a tqdm bar for steps, lines for the rest."""

    def __init__(self):
        self.bar = None
        self.final_status = ""
        self.final_message = ""

    def on_event(self, event: dict[str, Any]) -> None:
        from tqdm import tqdm  # noqa: PLC0415

        kind = event.get("type")
        if kind == "progress" and event.get("phase") == "training":
            if self.bar is None:
                # the first event is where training starts (a resumed run: its backup's step)
                self.bar = tqdm(total=event["total_steps"], initial=event["global_step"], unit="step", dynamic_ncols=True, file=sys.stderr)
            self.bar.update(event["global_step"] - self.bar.n)
            self.bar.set_description(f"epoch {event['epoch']}/{event['epochs']}")
        elif kind == "metrics" and self.bar is not None:
            self.bar.set_postfix(loss=f"{event['smooth_loss']:.4f}", lr=f"{event['lr']:.2e}", refresh=False)
        elif kind == "status":
            self.final_status, self.final_message = event["status"], event.get("message", "")
            if event["status"] in ("loading", "caching", "done", "stopped") and event.get("message"):  # an error: cmd_train's last line
                self.write(f"[{event['status']}] {event['message']}")
        elif kind == "warning":
            self.write(f"warning: {event['message']}")
        elif kind in ("saved", "backup", "sample"):
            self.write(f"{kind}: {event['path']}")

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def cmd_validate(args: argparse.Namespace) -> int:
    from .config.doctor import check  # noqa: PLC0415

    if (found := _loaded(args)) is None:
        return 2
    loaded, from_ot = found
    for warning in loaded.warnings + check(loaded.config, include_planned=not from_ot):
        print(f"warning: {warning}")
    from .config.io import config_to_dict, save_config  # noqa: PLC0415
    from .runner.startcheck import start_problems  # noqa: PLC0415

    if args.output:  # the config itself is valid: a conversion is written even if it cannot train here
        try:
            save_config(loaded.config, args.output)
        except (OSError, ValueError) as err:
            print(f"error: --output: cannot write {args.output} ({getattr(err, 'strerror', None) or err})", file=sys.stderr)
            return 2
        print(f"written: {args.output}")
    # everything `train` refuses before its first step, so "ok" means the run can start here
    problems = start_problems(loaded.config, config_to_dict(loaded.config), args.workspace)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return 2
    print(f"ok: {'OneTrainer ' if from_ot else ''}config is valid and can start here")
    from .runner.worker import quiet_libraries  # noqa: PLC0415
    from .training.memory_plan import estimate_line  # noqa: PLC0415 - loads torch and the model: last

    quiet_libraries()  # as a run is: no advice to install torchvision, no loading bars
    print(f"memory: {estimate_line(loaded.config)}")
    return 0


def cmd_estimate_memory(args: argparse.Namespace) -> int:
    """The memory planner's estimate as one JSON line on stdout (the page's Model tab runs this in
    a child process: the page never imports torch). `--config -` reads the config from stdin."""
    from .config.io import ConfigError, load_config  # noqa: PLC0415
    from .config.json_file import MAX_CONFIG_BYTES, parse_json_text  # noqa: PLC0415
    from .config.presets import load_config_argument  # noqa: PLC0415
    from .runner.deferred_imports import defer_optional_imports  # noqa: PLC0415

    defer_optional_imports()

    try:
        if args.config == "-":
            data = parse_json_text(sys.stdin.read(MAX_CONFIG_BYTES + 1) or "null", "--config -")
            if not isinstance(data, dict):
                raise ConfigError("--config -: stdin must hold a JSON object")
            loaded = load_config(data, base_dir=Path.cwd(), source="stdin")
        else:
            loaded, _ = load_config_argument(args.config, args.set or [])
    except (ConfigError, json.JSONDecodeError) as err:
        problems = [str(p) for p in (getattr(err, "errors", None) or [str(err)])]
        print(json.dumps({"estimated": False, "problems": problems}), flush=True)
        return 2
    from .training.memory_plan import estimate  # noqa: PLC0415 - loads torch and the model

    result = estimate(loaded.config)
    print(json.dumps(result, ensure_ascii=False), flush=True)
    return 0 if result["estimated"] else 1


def cmd_presets(args: argparse.Namespace) -> int:
    from .config.presets import list_presets  # noqa: PLC0415

    for name in list_presets():
        print(name)
    return 0


def cmd_app(args: argparse.Namespace) -> int:
    from .ui.launch import main as launch_main  # noqa: PLC0415

    return launch_main(args.app_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ot_gradio", description="ot_gradio: train diffusion LoRAs, fine-tunes and embeddings.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("train", help="train headless from a config (ours or OneTrainer's) or a preset name")
    p.add_argument("--config", required=True, help="config JSON file (ours or a OneTrainer config/preset), or a preset name such as 'demo'")
    p.add_argument("--set", action="append", metavar="KEY.PATH=VALUE", help="override a config value, e.g. --set epochs=5 --set optimizer.beta1=0.95")
    p.add_argument("--workspace", help="workspace folder for the run (default: the config's workspace_dir)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("validate", help="check a config and print its warnings; optionally write it in our format")
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", metavar="KEY.PATH=VALUE")
    p.add_argument("--output", help="write the (imported) config here as our JSON")
    p.add_argument("--workspace", help="the workspace `train --workspace` would use (default: the config's workspace_dir)")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("estimate-memory", help="the memory planner's estimate of a config's peak, as JSON (loads the model)")
    p.add_argument("--config", required=True, help="config JSON file, a preset name, or - to read the config from stdin")
    p.add_argument("--set", action="append", metavar="KEY.PATH=VALUE")
    p.set_defaults(func=cmd_estimate_memory)

    p = sub.add_parser("presets", help="list the presets")
    p.set_defaults(func=cmd_presets)

    for name in TOOL_COMMANDS:  # each tool's command line lives next to the tool (torch-free)
        if importlib.util.find_spec(f"ot_gradio.tools.cli_{name}") is not None:
            importlib.import_module(f"ot_gradio.tools.cli_{name}").register(sub)

    p = sub.add_parser("app", help="start the web page (same flags as app.py)", add_help=False)
    p.add_argument("app_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_app)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    return args.func(args)
