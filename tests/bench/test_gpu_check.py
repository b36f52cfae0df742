"""bench/gpu_check.py, the GPU box's end-to-end check, kept from rotting: `--tiny` runs every run
of it through the same code on the CPU with the tiny models (the JSON has each run, ok, with
finite falling losses, a LoRA that reloads in diffusers, a usable sample); a run that raises is
recorded with its error while the others go on, and the exit status says so."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_tiny_runs_every_run_through_the_trainer(tmp_path):
    from bench.gpu_check import RUNS

    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--tiny", "--out", str(tmp_path / "out"), "--profile", "sd15-lora-b1"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "OT_GRADIO_TINY_DIR": str(tmp_path / "tiny"), "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)},
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    report = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    runs = report["runs"]
    assert report["finished"] and report["tiny"]
    assert list(runs) == [r.name for r in RUNS]
    for run in RUNS:
        got = runs[run.name]
        assert got["ok"] and got["problems"] == [] and got["status"] == "done", (run.name, got)
        losses = got["losses"]
        assert len(losses) >= 4 and all(math.isfinite(x) for x in losses), (run.name, losses)
        assert sum(losses[-2:]) < sum(losses[:2]), (run.name, losses)  # one fixed image, fixed noise: it must fit
        assert got["s_per_step"] > 0 and got["estimate_gb"] > 0, (run.name, got)
        assert got["saved"].endswith(".safetensors")
        assert got.get("reload") == ("ok" if run.lora else None), (run.name, got.get("reload"))
        if run.sample:
            assert got["sample_check"] == "" and got["sample_s"] > 0, (run.name, got)
    profile = runs["sd15-lora-b1"]["profile"]  # 3 steps after the timed ones, under torch.profiler
    assert profile["cpu_op_ms_per_step"] > 0 and "aten::" in (tmp_path / "out" / profile["file"]).read_text()
    assert len(runs["sd15-lora-b1"]["losses"]) == len(runs["sd15-lora-b4"]["losses"]) + 3 and "profile" not in runs["sd15-lora-b4"]
    compared = runs["flux-lora-bf16"]["compared"]
    assert compared["with"] == "flux-lora-nf4" and compared["nf4_first_loss_gap"] < 0.25
    assert not list(tmp_path.glob("ot-gpu-check-*")), "the temp models and runs are deleted"
    table = (tmp_path / "out" / "gpu_check.md").read_text()
    assert all(f"| {r.name} | yes |" in table for r in RUNS), table


def test_a_failing_run_is_recorded_and_the_others_go_on(tmp_path, monkeypatch, capsys):
    import bench.gpu_check as check

    def fake(run, args, work):
        if run.name == "sd15-lora-b4":
            raise RuntimeError("CUDA out of memory (a test's)")
        return {"losses": [2.0, 1.0], "s_per_step": 0.5, "problems": []}

    monkeypatch.setattr(check, "train_run", fake)
    code = check.main(["--tiny", "--only", "sd15-lora-b1,sd15-lora-b4,sdxl-lora", "--out", str(tmp_path)])
    assert code == 1
    runs = json.loads((tmp_path / "gpu_check.json").read_text())["runs"]
    assert [runs[n]["ok"] for n in ("sd15-lora-b1", "sd15-lora-b4", "sdxl-lora")] == [True, False, True]
    assert "RuntimeError: CUDA out of memory" in runs["sd15-lora-b4"]["problems"][0]
    assert "FAILED sd15-lora-b4: RuntimeError: CUDA out of memory" in capsys.readouterr().out
    # a budget already spent starts nothing more: those runs are listed as not started (exit 3)
    assert check.main(["--tiny", "--only", "sd15-lora-b1", "--budget-s", "-1", "--out", str(tmp_path)]) == 3


def test_isolated_runs_survive_a_run_whose_process_dies(tmp_path, monkeypatch):
    """On a GPU each run has a process of its own (`--isolate`, the default there): an illegal
    memory access ends the CUDA context of its process; the run is recorded as failed with the
    process's exit status and the next run starts in a new process."""
    import bench.gpu_check as check

    assert check.parse_args([]).isolate and not check.parse_args(["--tiny"]).isolate
    assert not check.parse_args(["--only", "sd15-lora-b1"]).isolate and not check.parse_args(["--in-process"]).isolate
    commands = []

    def fake_run(command, check=False):  # noqa: ARG001 - subprocess.run's signature
        commands.append(command)
        name, out = command[command.index("--only") + 1], Path(command[command.index("--out") + 1])
        if name == "sd15-lora-b4":
            return subprocess.CompletedProcess(command, -6)  # died before writing its result
        out.mkdir(parents=True, exist_ok=True)
        result = {"losses": [2.0, 1.0], "s_per_step": 0.5, "problems": [], "profile": {"file": f"profile-{name}.txt"}}
        (out / f"profile-{name}.txt").write_text("aten::mm")
        (out / "gpu_check.json").write_text(json.dumps({"runs": {name: result}}))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(check.subprocess, "run", fake_run)
    code = check.main(["--tiny", "--isolate", "--only", "sd15-lora-b1,sd15-lora-b4,sdxl-lora", "--profile", "sd15-lora-b1",
                       "--out", str(tmp_path)])
    assert code == 1
    runs = json.loads((tmp_path / "gpu_check.json").read_text())["runs"]
    assert [runs[n]["ok"] for n in ("sd15-lora-b1", "sd15-lora-b4", "sdxl-lora")] == [True, False, True]
    assert "exit status -6" in runs["sd15-lora-b4"]["problems"][0]
    assert runs["sd15-lora-b1"]["profile"]["file"] == "profile-sd15-lora-b1.txt"
    assert (tmp_path / "profile-sd15-lora-b1.txt").read_text() == "aten::mm"  # beside gpu_check.json
    assert [c[c.index("--only") + 1] for c in commands] == ["sd15-lora-b1", "sd15-lora-b4", "sdxl-lora"]
    assert all("--in-process" in c and "--tiny" in c for c in commands) and ("--profile" in commands[0]) and "--profile" not in commands[1]


def test_set_changes_every_run_and_reaches_the_isolated_children(tmp_path):
    """`--set KEY=VALUE` (to tell which setting a GPU failure follows) goes over the run's preset
    and its own changes, nested by the dotted key, JSON values parsed; the children of `--isolate`
    get it too; a malformed item is refused by name."""
    import bench.gpu_check as check

    assert check.parse_set(["transformer.gradient_checkpointing=ON", "learning_rate=1e-4", "ema=GPU", "transformer.train=false"]) == {
        "transformer": {"gradient_checkpointing": "ON", "train": False}, "learning_rate": 1e-4, "ema": "GPU"}
    run = next(r for r in check.RUNS if r.name == "z-image-lora-fp8-offload")
    config = check.run_config(run, "base", tmp_path, tmp_path, "cpu", 2, 64, 1e-3, check.parse_set(["transformer.offload_fraction=0.25"]))
    assert config["transformer"]["offload_fraction"] == 0.25  # over the run's own 0.5
    assert config["transformer"]["activation_offloading"] is True and config["transformer"]["weight_dtype"] == "FLOAT_8"  # kept
    with pytest.raises(SystemExit):
        check.parse_args(["--set", "transformer.gradient_checkpointing"])
    args = check.parse_args(["--tiny", "--set", "transformer.gradient_checkpointing=ON", "--out", str(tmp_path)])
    commands = []

    def fake_run(command, check=False):  # noqa: ARG001 - subprocess.run's signature
        commands.append(command)
        return subprocess.CompletedProcess(command, 1)

    check.subprocess.run, original = fake_run, check.subprocess.run
    try:
        check.run_in_child(check.RUNS[0], args)
    finally:
        check.subprocess.run = original
    assert "--set=transformer.gradient_checkpointing=ON" in commands[0]
    assert check.parse_args(commands[0][2:]).set == ["transformer.gradient_checkpointing=ON"]


def test_shallow_models_keep_every_layer_shape_with_two_blocks():
    """`--shallow`: Flux and Z-Image with two blocks of each kind at the published widths (every
    layer shape of the full model), in a folder of their own; SD stays whole."""
    import torch

    from bench.gpu_check_models import FLUX_TRANSFORMER, flux_pipeline, model_folder

    with torch.device("meta"):
        pipe = flux_pipeline(shallow=True)
    transformer, t5 = pipe.transformer, pipe.text_encoder_2
    assert len(transformer.transformer_blocks) == 2 and len(transformer.single_transformer_blocks) == 2
    assert transformer.config.num_attention_heads * transformer.config.attention_head_dim == 3072 == transformer.inner_dim
    assert transformer.config.joint_attention_dim == FLUX_TRANSFORMER["joint_attention_dim"]
    assert t5.config.num_layers == 2 and t5.config.d_model == 4096 and t5.config.d_ff == 10240
    full = {(m.in_features, m.out_features) for m in transformer.modules() if isinstance(m, torch.nn.Linear)}
    assert {(3072, 18432), (15360, 3072), (3072, 9216), (4096, 3072), (64, 3072)} <= full
    assert model_folder(Path("w"), "flux", False, shallow=True).name == "flux-shallow"
    assert model_folder(Path("w"), "sd15", False, shallow=True).name == "sd15-full"
