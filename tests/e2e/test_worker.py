"""The worker process end to end: a tiny SD 1.5 LoRA run, its events and its output file."""

import json
import time

import pytest
import torch
from safetensors import safe_open

from ot_gradio.runner.rundir import RunDir
from ot_gradio.runner.supervisor import Supervisor

pytestmark = pytest.mark.slow


def _pipe_output(pipe, seed=0):
    pipe.set_progress_bar_config(disable=True)
    g = torch.Generator().manual_seed(seed)
    return pipe("a red circle", num_inference_steps=2, height=64, width=64, generator=g, output_type="np").images[0]


def test_worker_trains_and_writes_a_kohya_lora_that_diffusers_loads(lora_config, tiny_model, tmp_path):
    config = lora_config(sample_after=2, sample_after_unit="EPOCH")
    sup = Supervisor(tmp_path / "ws")
    run = sup.start(config)
    assert sup.wait(run, timeout=300) == 0, run.log_tail()

    lines = run.events.read_text().splitlines()
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    statuses = [e["status"] for e in events if e["type"] == "status"]
    assert statuses[0] == "loading" and statuses[-1] == "done"
    progress = [e for e in events if e["type"] == "progress" and e.get("phase") == "training"]
    assert progress[-1]["global_step"] == progress[-1]["total_steps"] >= 16
    assert all("it_s" in e and "eta_s" in e for e in progress)
    metrics = [e for e in events if e["type"] == "metrics"]
    assert all(e["loss"] > 0 and e["lr"] == pytest.approx(1e-3) for e in metrics)
    samples = [e for e in events if e["type"] == "sample"]
    assert len(samples) >= 2 and all((run.samples / e["path"].split("/")[-1]).exists() for e in samples)
    assert list(run.tensorboard.glob("events.out.tfevents.*"))
    state = sup.state(run)
    assert state.status == "done" and state.exit_code == 0 and state.losses

    out = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(out), "pt") as f:
        keys = list(f.keys())
        meta = f.metadata()
    assert keys and all(k.startswith(("lora_unet_", "lora_te_")) for k in keys)
    assert any(k.startswith("lora_te_text_model_") for k in keys)
    assert not any(k.startswith("lora_te1_") for k in keys)
    assert any(k.endswith(".alpha") for k in keys) and any(k.endswith(".lora_down.weight") for k in keys)
    assert meta["ss_network_dim"] == "4" and meta["ss_network_alpha"] in ("4", "4.0")
    assert meta["ss_steps"] == str(progress[-1]["global_step"])

    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(str(tiny_model.diffusers_dir), safety_checker=None)
    before = _pipe_output(pipe)
    pipe.load_lora_weights(str(out))
    after = _pipe_output(pipe)
    assert abs(after - before).max() > 1e-3  # the trained LoRA changes the image


def _wait_for(sup, run, predicate, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = sup.state(run)
        if predicate(state) or not state.alive:
            return state
        time.sleep(0.2)
    return sup.state(run)


def test_control_requests_and_stop_mid_run(lora_config, tmp_path):
    config = lora_config(epochs=500, samples=[{"prompt": "a blue square", "height": 64, "width": 64, "diffusion_steps": 2}])
    sup = Supervisor(tmp_path / "ws")
    run = sup.start(config)
    assert _wait_for(sup, run, lambda s: s.progress.get("global_step", 0) >= 3).alive, run.log_tail()

    sup.request(run, "sample")
    sup.request(run, "backup")
    sup.request(run, "save")
    state = _wait_for(sup, run, lambda s: s.samples and s.backups and s.saved)
    assert state.samples and state.backups and state.saved, run.log_tail()
    assert "-step" in state.saved[0]  # an intermediate save goes to save/, not over the final file

    assert sup.stop(run) == "stop requested"
    assert sup.wait(run, timeout=120) == 0, run.log_tail()
    state = sup.state(run)
    assert state.status == "stopped", state
    assert state.progress["global_step"] < state.progress["total_steps"]
    backups = [p for p in RunDir(run.path).backup.iterdir() if (p / "COMPLETE").exists()]
    assert len(backups) == 2  # the requested one and the one written at the stop
    assert (tmp_path / "out" / "lora.safetensors").exists()
    assert len(state.samples) == 1  # a stop does not sample
