"""bench/gpu_check.py's results: the losses of paired runs compared (NF4 against BFLOAT_16), the
profile of a run summed per step, and the report written as gpu_check.json and gpu_check.md."""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

NF4_LOSS_TOLERANCE = 0.25  # NF4's first loss within 25 % of BFLOAT_16's on the same batch and weights


def profile_activities(cuda: bool) -> list[Any]:
    import torch

    return [torch.profiler.ProfilerActivity.CPU, *([torch.profiler.ProfilerActivity.CUDA] if cuda else [])]


def write_profile(profiler: Any, path: Path, steps: int) -> dict[str, Any]:
    """The profiled steps' operators by their own CPU time into `path`; returns per step: the CPU
    time in operators, the GPU kernels' time and how many kernels and copies were launched (a
    step bound by launching shows many launches and a GPU idle most of the step)."""
    events = profiler.key_averages()
    path.write_text(events.table(sort_by="self_cpu_time_total", row_limit=60, max_name_column_width=70))
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync"))
    device_us = sum(getattr(e, "self_device_time_total", 0) or 0 for e in events)
    cpu_us = sum(e.self_cpu_time_total for e in events)
    return {"launches_per_step": launches / steps, "gpu_busy_ms_per_step": device_us / 1e3 / steps,
            "cpu_op_ms_per_step": cpu_us / 1e3 / steps, "file": path.name}


def compare(runs: list[Any], results: dict[str, dict[str, Any]]) -> None:
    """A run with `compare_with`: both losses on the same fixed batch side by side; NF4 against
    BFLOAT_16 must start within NF4_LOSS_TOLERANCE and not diverge."""
    for run in runs:
        mine, other = results.get(run.name), results.get(run.compare_with)
        if not run.compare_with or not mine or not other or not mine.get("losses") or not other.get("losses"):
            continue
        a, b = other["losses"], mine["losses"]
        note = {"with": run.compare_with, "first_losses": [a[0], b[0]], "last_losses": [a[-1], b[-1]]}
        if other.get("s_per_step") and mine.get("s_per_step"):
            note["step_time_ratio"] = other["s_per_step"] / mine["s_per_step"]
        mine["compared"] = note
        if "nf4" in run.compare_with:
            gap = abs(a[0] - b[0]) / max(abs(b[0]), 1e-12)
            note["nf4_first_loss_gap"] = gap
            if gap > NF4_LOSS_TOLERANCE:
                other.setdefault("problems", []).append(
                    f"NF4's first loss {a[0]:.4g} is {100 * gap:.0f} % from BFLOAT_16's {b[0]:.4g} on the same batch")
            if not (math.isfinite(a[-1]) and a[-1] <= 1.5 * max(b[-1], 1e-12) + 1e-3):
                other.setdefault("problems", []).append(f"NF4 diverged: last loss {a[-1]:.4g}, BFLOAT_16's {b[-1]:.4g}")


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def compared_note(note: dict[str, Any] | None) -> str:
    if not note:
        return ""
    text = (f"vs {note['with']}: first loss {note['first_losses'][0]:.4g} / {note['first_losses'][1]:.4g}, "
            f"last {note['last_losses'][0]:.4g} / {note['last_losses'][1]:.4g}")
    if "step_time_ratio" in note:
        text += f", its step takes {note['step_time_ratio']:.2f}x this one's"
    return text


def table(results: dict[str, dict[str, Any]]) -> str:
    head = ("| run | ok | s/step | images/s | MFU | peak GB | left by earlier runs GB | planner GB | peak/plan | loss first -> last | sample s | "
            "reload | moved GB/step | note |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    rows = []
    for name, r in results.items():
        losses = r.get("losses") or []
        mfu = "-" if r.get("mfu") is None else f"{100 * r['mfu']:.0f} %"
        loss = f"{losses[0]:.4g} -> {losses[-1]:.4g}" if losses else "-"
        note = "; ".join(r.get("problems", []))[:400].replace("|", "/") or compared_note(r.get("compared"))
        rows.append(f"| {name} | {'yes' if r.get('ok') else 'NO'} | {fmt(r.get('s_per_step'))} | {fmt(r.get('images_per_s'))} | "
                    f"{mfu} | "
                    f"{fmt(r.get('peak_gb'))} | {fmt(r.get('left_by_earlier_runs_gb'))} | {fmt(r.get('estimate_gb'))} | {fmt(r.get('peak_vs_estimate'), 2)} | {loss} | "
                    f"{fmt(r.get('sample_s'))} | {r.get('reload', '-')} | {fmt(r.get('moved_gb_per_step'))} | {note} |")
    return head + "\n".join(rows) + "\n"


def machine() -> dict[str, Any]:
    import platform

    import torch

    info = {"torch": torch.__version__, "python": platform.python_version(), "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["gpu_memory_gb"] = torch.cuda.get_device_properties(0).total_memory / 1e9
    return info


def write_report(out: Path, args: argparse.Namespace, results: dict[str, dict[str, Any]], started: float,
                 final: bool) -> tuple[dict[str, Any], str]:
    """gpu_check.json and gpu_check.md in `out` (before the end: the runs so far, not compared)."""
    for r in results.values():
        r["ok"] = not r.get("problems")
    report = {"machine": machine(), "tiny": args.tiny, "shallow": getattr(args, "shallow", False), "set": getattr(args, "set", []),
              "steps": args.steps, "warmup": args.warmup, "finished": final,
              "total_s": time.perf_counter() - started, "runs": results}
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    markdown = table(results)
    size = " (shallow models: two blocks of each kind, figures not the full model's)" if report["shallow"] else ""
    size += f" (--set {' '.join(report['set'])})" if report["set"] else ""
    (out / "gpu_check.md").write_text(f"{json.dumps(report['machine'])}{size}\n\n{markdown}")
    return report, markdown
