"""Multi-GPU data parallel, run here as two CPU processes on gloo through the real launch path:
the page's supervisor starts the worker, which becomes `torch.distributed.run` of two workers."""

import json
import os
import re
import signal
import time

import pytest
import torch
from safetensors.torch import load_file

from ot_gradio.runner.supervisor import Supervisor

pytestmark = pytest.mark.slow

TWO_CPU_PROCESSES = {"multi_gpu": True, "train_device": "cpu", "device_indexes": "0,1"}


def _config(lora_config, tmp_path, name, **overrides):
    base = lora_config(
        epochs=3, text_encoder={"train": False}, unet={"train": True, "gradient_checkpointing": False},
        latent_caching=True, dataloader_threads=0, tensorboard=False, seed=11,
        output_model_destination=str(tmp_path / name / "lora.safetensors"),
        workspace_dir=str(tmp_path / name / "ws"), cache_dir=str(tmp_path / name / "cache"),
        samples=[{"prompt": "a red circle", "height": 64, "width": 64, "diffusion_steps": 2}],
        sample_after=1, sample_after_unit="EPOCH",
    )
    base.update(overrides)
    return base


@pytest.fixture
def supervisors():
    """Supervisors whose runs are killed when the test ends, passed or not (a failed test must not
    leave two training processes running)."""
    made = []

    def make(workspace):
        made.append(Supervisor(workspace))
        return made[-1]

    yield make
    for sup in made:
        for run in sup.active_runs():
            try:
                os.killpg(int(run.pid_file.read_text()), signal.SIGKILL)  # the ranks die with their launcher
            except (OSError, ValueError):
                pass


def _run(sup, config):
    run = sup.start(config)
    code = sup.wait(run, timeout=900)
    assert code == 0, run.log_tail()
    events = [json.loads(line) for line in run.events.read_text().splitlines()]
    return run, events


def _losses(events):
    return {e["global_step"]: e["loss"] for e in events if e["type"] == "metrics"}


def _deltas(lora):
    """Each layer's weight change, up @ down (the alpha scale is the same in both files)."""
    return {k[: -len("lora_down.weight")]: lora[k[: -len("lora_down.weight")] + "lora_up.weight"].flatten(1).double()
            @ lora[k].flatten(1).double() for k in lora if k.endswith("lora_down.weight")}


def test_two_processes_match_one_process_with_twice_the_batch(lora_config, tmp_path, supervisors):
    two_config = _config(lora_config, tmp_path, "two", batch_size=1, **TWO_CPU_PROCESSES)
    one_config = _config(lora_config, tmp_path, "one", batch_size=2)
    two, two_events = _run(supervisors(tmp_path / "two" / "ws"), two_config)
    one, one_events = _run(supervisors(tmp_path / "one" / "ws"), one_config)

    statuses = [e for e in two_events if e["type"] == "status"]
    assert statuses[-1]["status"] == "done", two.log_tail()
    assert any(s["message"] == "starting 2 processes on cpu (gloo)" for s in statuses)
    assert not [e for e in two_events if e["type"] == "status" and e["status"] == "error"]

    # the same steps, the same loss at every step, the same trained weights
    two_losses, one_losses = _losses(two_events), _losses(one_events)
    assert len(one_losses) >= 9 and sorted(two_losses) == sorted(one_losses)
    for step, loss in one_losses.items():
        assert two_losses[step] == pytest.approx(loss, rel=1e-4, abs=1e-6), (step, two_losses, one_losses)
    two_lora = load_file(two_config["output_model_destination"])
    one_lora = load_file(one_config["output_model_destination"])
    assert two_lora.keys() == one_lora.keys()
    moved = [k for k in one_lora if "lora_up" in k and one_lora[k].abs().max() > 0]
    assert moved, "the LoRA did not train"
    # Compared as each layer's weight change (up @ down), against the largest change of any layer:
    # the factors themselves differ where a gradient is near AdamW's eps (a LoRA's down weights while
    # its up weights are still near zero), by up to 1.5e-3 in these 15 steps, and their product not
    # (measured: 1.5e-3 of the largest change at worst, 1e-4 for every other layer). A real difference
    # (a wrong gradient average, an image missed) is of the order of the change itself.
    one_delta, two_delta = _deltas(one_lora), _deltas(two_lora)
    scale = max(float(d.abs().max()) for d in one_delta.values())
    worst = max((float((two_delta[k] - d).abs().max()) / scale, k) for k, d in one_delta.items())
    mean = float(torch.cat([(two_lora[k] - v).abs().flatten() for k, v in one_lora.items()]).mean())
    assert worst[0] < 1e-2 and mean < 1e-6, (worst, mean)

    # only the main process reports: one progress event per step (and one where training starts), one sample per epoch, one save
    steps = max(one_losses)
    assert len([e for e in two_events if e["type"] == "progress" and e.get("phase") == "training"]) == steps + 1
    assert len([e for e in two_events if e["type"] == "sample"]) == len([e for e in one_events if e["type"] == "sample"]) == 3
    assert len([e for e in two_events if e["type"] == "saved"]) == 1

    # every image once per epoch: each process trained half of what the single process trained
    log = two.log.read_text()
    per_epoch = steps // 3 * 2  # images per epoch at a global batch of 2
    for epoch in (1, 2, 3):
        counts = [int(n) for n in re.findall(rf"process [01]/2: epoch {epoch}: trained (\d+) images", log)]
        assert counts == [per_epoch // 2, per_epoch // 2], log[-2000:]


def test_stop_reaches_every_process(lora_config, tmp_path, supervisors):
    config = _config(lora_config, tmp_path, "stop", batch_size=1, epochs=200, sample_after_unit="NEVER", **TWO_CPU_PROCESSES)
    sup = supervisors(tmp_path / "stop" / "ws")
    run = sup.start(config)
    deadline = time.time() + 300
    while time.time() < deadline and not any(e.get("global_step", 0) >= 3 for e in run.read_events(0)[0]):
        assert sup._alive(run), run.log_tail()
        time.sleep(0.3)
    assert sup.stop(run) == "stop requested"
    assert sup.wait(run, timeout=300) == 0, run.log_tail()
    events = [json.loads(line) for line in run.events.read_text().splitlines()]
    assert [e["status"] for e in events if e["type"] == "status"][-1] == "stopped"
    assert [p for p in run.backup.iterdir() if (p / "COMPLETE").exists()]
    assert _rank_processes(run) == []


def test_a_killed_launcher_leaves_no_training_process(lora_config, tmp_path, supervisors):
    config = _config(lora_config, tmp_path, "kill", batch_size=1, epochs=200, sample_after_unit="NEVER", **TWO_CPU_PROCESSES)
    sup = supervisors(tmp_path / "kill" / "ws")
    run = sup.start(config)
    deadline = time.time() + 300
    while time.time() < deadline and len(_rank_processes(run)) < 2:
        assert sup._alive(run), run.log_tail()
        time.sleep(0.3)
    assert len(_rank_processes(run)) == 2
    os.kill(int(run.pid_file.read_text()), signal.SIGKILL)  # the launcher only; the ranks are in sessions of their own
    deadline = time.time() + 30
    while time.time() < deadline and _rank_processes(run):
        time.sleep(0.2)
    assert _rank_processes(run) == []
    deadline = time.time() + 30  # SIGKILL is delivered asynchronously; the launcher may take a moment
    while time.time() < deadline and sup._alive(run):
        time.sleep(0.2)
    assert sup.state(run).status == "crashed"


def _rank_processes(run):
    """Pids of the processes torch.distributed.run started for this run (not the launcher)."""
    key = str(run.path.resolve())
    launcher = int(run.pid_file.read_text())
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == launcher:
            continue
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        if key in cmdline and "torch.distributed.run" not in cmdline and ") Z " not in stat:
            found.append(int(pid))
    return found
