"""The headless CLI: `python -m ot_gradio ...`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(args, cwd, timeout=600, **env):
    return subprocess.run(
        [sys.executable, "-m", "ot_gradio", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_help_lists_commands(tmp_path):
    out = _run(["--help"], tmp_path)
    assert out.returncode == 0
    for command in ("train", "validate", "presets", "app"):
        assert command in out.stdout


def test_bad_config_is_one_line_and_nonzero(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"batch_size": 0}')
    out = _run(["train", "--config", str(bad)], tmp_path)
    assert out.returncode != 0
    assert "batch_size" in out.stderr and "Traceback" not in out.stderr


def test_missing_concept_folder_fails_before_training(tmp_path, lora_config):
    import json

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(lora_config(concepts=[{"name": "x", "path": str(tmp_path / "nope")}])))
    out = _run(["train", "--config", str(cfg)], tmp_path)
    assert out.returncode == 2  # refused before a run folder is made (the same check as validate's)
    assert "concepts[0].path: folder" in out.stderr and "nope" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_demo_preset_trains_offline_with_a_progress_bar(tmp_path):
    out = _run(["train", "--config", "demo"], tmp_path, OT_GRADIO_TINY_DIR=str(tmp_path / "tiny"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "step/s" in out.stderr or "s/step" in out.stderr  # tqdm's rate, either way round by speed
    lora = tmp_path / "workspace" / "demo" / "models" / "demo-lora.safetensors"
    assert lora.exists()


def test_validate_imports_a_onetrainer_preset_and_converts_it(tmp_path):
    preset = ROOT / "tests" / "config" / "data" / "onetrainer-presets" / "sd-1.5-LoRA.json"
    out = _run(["validate", "--config", str(preset), "--output", str(tmp_path / "ours.json")], tmp_path)
    # converted and written; a preset has no concepts, so it cannot train as it is (train would refuse it)
    assert out.returncode == 2 and "written:" in out.stdout, out.stderr
    assert "error: concepts: there is no concept" in out.stderr
    import json

    ours = json.loads((tmp_path / "ours.json").read_text())
    assert ours["config_version"] >= 1 and ours["output_model_format"] == "KOHYA_LORA"
    assert ours["unet"]["weight_dtype"] == "FLOAT_16" and ours["layer_filter_preset"] == "attn-mlp"


def test_set_overrides_reach_the_config(tmp_path):
    out = _run(["validate", "--config", "demo", "--set", "epochs=3", "--set", "optimizer.beta2=0.99", "--output", str(tmp_path / "c.json")], tmp_path)
    assert out.returncode == 0, out.stderr
    # the estimate loads the model quietly: no advice to install torchvision (the README says never to) or `kernels`
    assert "torchvision" not in out.stderr + out.stdout and "kernels" not in out.stderr + out.stdout, out.stderr
    import json

    data = json.loads((tmp_path / "c.json").read_text())
    assert data["epochs"] == 3 and data["optimizer"]["beta2"] == 0.99
    bad = _run(["validate", "--config", "demo", "--set", "no_such.key=1"], tmp_path)
    assert bad.returncode == 2 and "no_such" in bad.stderr


def test_images_that_never_train_are_named(tmp_path, lora_config, shapes):
    """The demo set less one of its two 64x96 (tall) images: with batch size 2 the tall bucket of one
    image never fills a batch, and the run names that image (the demo set itself has none such)."""
    import json
    import shutil

    from PIL import Image

    data = tmp_path / "data"
    shutil.copytree(shapes, data)
    tall = [p for p in sorted(data.glob("*.png")) if Image.open(p).size == (64, 96)]
    assert len(tall) == 2
    tall[0].unlink()
    tall[0].with_suffix(".txt").unlink()
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(lora_config(epochs=1, samples=[], concepts=[{"name": "shapes", "path": str(data)}])))
    out = _run(["train", "--config", str(cfg)], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "1 image(s) will never be trained" in out.stderr
    assert tall[1].name in out.stderr  # the only tall image left


def test_checks_before_start_refuse_adafactor_constant_mode_with_relative_step(tmp_path):
    out = _run(["train", "--config", "demo", "--set", "optimizer.optimizer=ADAFACTOR", "--set", "optimizer.relative_step=true",
                "--set", "optimizer.scale_parameter=false"], tmp_path)
    assert out.returncode == 2
    assert "relative_step" in out.stderr and "Traceback" not in out.stderr


def test_multi_gpu_from_the_command_line_runs_two_processes(tmp_path):
    """`train` with multi_gpu starts the worker, which launches one process per listed index
    (two CPU processes here), and shows their events like a single-process run."""
    out = _run(["train", "--config", "demo", "--set", "multi_gpu=true", "--set", "train_device=cpu",
                "--set", "device_indexes=0,1", "--set", "batch_size=1", "--set", "epochs=2",
                "--set", "sample_after_unit=NEVER"], tmp_path, OT_GRADIO_TINY_DIR=str(tmp_path / "tiny"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "starting 2 processes on cpu (gloo)" in out.stderr
    assert "done: model saved to" in out.stderr
    runs = sorted((tmp_path / "workspace" / "demo" / "runs").iterdir())
    log = (runs[-1] / "log.txt").read_text()
    assert "process 0/2: epoch 2: trained" in log and "process 1/2: epoch 2: trained" in log


def test_a_kohya_ss_config_trains_its_repeats_folders_from_the_command_line(tmp_path, tiny_model, four_shapes):
    """A kohya_ss LoRA config (its dataset folder of `<repeats>_<name>` folders) trains unchanged:
    4 images x 2 repeats at batch 2 is 4 steps, and the file has kohya's keys."""
    import json
    import shutil

    from safetensors import safe_open

    shutil.copytree(four_shapes, tmp_path / "img" / "2_shapes")
    config = {"LoRA_type": "Standard", "pretrained_model_name_or_path": str(tiny_model.diffusers_dir), "train_data_dir": str(tmp_path / "img"),
              "output_dir": str(tmp_path / "out"), "output_name": "mylora", "save_model_as": "safetensors", "network_dim": 4,
              "network_alpha": 2, "learning_rate": 1e-3, "train_batch_size": 2, "epoch": 1, "max_resolution": "64,64",
              "optimizer": "AdamW", "lr_scheduler": "constant", "mixed_precision": "no", "sample_prompts": ""}
    (tmp_path / "kohya.json").write_text(json.dumps(config))
    out = _run(["train", "--config", str(tmp_path / "kohya.json"), "--set", "train_device=cpu"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "read as kohya_ss's" in out.stderr
    with safe_open(str(tmp_path / "out" / "mylora.safetensors"), "pt") as f:
        keys, meta = list(f.keys()), f.metadata()
    assert keys and all(k.startswith(("lora_unet_", "lora_te_")) for k in keys)
    assert meta["ss_steps"] == "4" and meta["ss_network_dim"] == "4"


def test_an_ai_toolkit_job_trains_from_the_command_line(tmp_path, tiny_model, four_shapes):
    """ai-toolkit's YAML job (an SD 1.5 LoRA here, to be quick) trains unchanged: 8 steps of 4
    images at batch 2 is 4 epochs, and the LoRA lands in training_folder/name/name.safetensors."""
    from safetensors import safe_open

    job = f"""job: extension
config:
  name: shapes_lora
  process:
    - type: sd_trainer
      training_folder: {tmp_path / "output"}
      device: cuda:0
      network: {{type: lora, linear: 4, linear_alpha: 2}}
      save: {{dtype: float16, save_every: 1000, max_step_saves_to_keep: 2}}
      datasets:
        - folder_path: {four_shapes}
          caption_ext: txt
          resolution: [64]
      train: {{batch_size: 2, steps: 8, lr: 1e-3, optimizer: adamw, dtype: fp32, train_text_encoder: false}}
      model: {{name_or_path: {tiny_model.diffusers_dir}, arch: sd1}}
      sample: {{sample_every: 1000, prompts: ["a [trigger] shape"]}}
"""
    (tmp_path / "job.yaml").write_text(job)
    out = _run(["train", "--config", str(tmp_path / "job.yaml"), "--set", "train_device=cpu"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "read as ai-toolkit's job 'shapes_lora'" in out.stderr and "train.steps 8: 4 epochs" in out.stderr
    with safe_open(str(tmp_path / "output" / "shapes_lora" / "shapes_lora.safetensors"), "pt") as f:
        keys, meta = list(f.keys()), f.metadata()
    assert keys and all(k.startswith("lora_unet_") for k in keys)  # the text encoder is not trained
    assert meta["ss_steps"] == "8" and meta["ss_network_dim"] == "4"


def test_a_musubi_tuner_wan_config_trains_from_the_command_line(tmp_path, four_shapes):
    """musubi-tuner's Wan config with its dataset TOML and its `dit` file trains here (the base
    model, its hub repo, given as a local folder with --set, as a user offline would): 2 steps of
    4 images at batch 2 is 1 epoch; the transformer is read from the file."""
    from safetensors import safe_open

    from ot_gradio.models.tiny import resolve_tiny
    from ot_gradio.models.wan import Wan21

    folder = resolve_tiny("tiny:wan").diffusers_dir
    dit = Wan21.load(str(folder), offline=True).save_single_file(tmp_path / "wan2.1_t2v_1.3B_bf16.safetensors", None)
    (tmp_path / "dataset.toml").write_text(f'[general]\nresolution = [64, 64]\ncaption_extension = ".txt"\nbatch_size = 2\n\n'
                                          f'[[datasets]]\nimage_directory = "{four_shapes}"\ncache_directory = "{tmp_path / "cache"}"\n')
    (tmp_path / "musubi.toml").write_text(
        f'task = "t2v-1.3B"\ndit = "{dit}"\ndataset_config = "{tmp_path / "dataset.toml"}"\nnetwork_module = "networks.lora_wan"\n'
        f'network_dim = 4\nnetwork_alpha = 2\nlearning_rate = 1e-3\noptimizer_type = "AdamW"\nmax_train_steps = 2\n'
        f'mixed_precision = "no"\ntimestep_sampling = "shift"\ndiscrete_flow_shift = 3.0\noutput_dir = "{tmp_path / "out"}"\n'
        f'output_name = "wan-lora"\n')
    out = _run(["train", "--config", str(tmp_path / "musubi.toml"), "--set", f"base_model_name={folder}", "--set", "train_device=cpu"],
               tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "read as musubi-tuner's" in out.stderr and "max_train_steps 2: 1 epochs" in out.stderr
    assert f"the transformer is read from {dit}" in out.stderr
    with safe_open(str(tmp_path / "out" / "wan-lora.safetensors"), "pt") as f:
        assert list(f.keys())


def test_a_diffusion_pipe_wan_config_trains_from_the_command_line(tmp_path, four_shapes):
    """diffusion-pipe's Wan config, its dataset TOML beside it in examples/ (paths relative to the
    checkout's root, as it runs) and its ComfyUI transformer file: 1 epoch of 4 images at batch 2
    (2 steps), the LoRA saved as the import names it."""
    from safetensors import safe_open

    from ot_gradio.models.tiny import resolve_tiny
    from ot_gradio.models.wan import Wan21

    folder = resolve_tiny("tiny:wan").diffusers_dir
    (tmp_path / "examples").mkdir()
    dit = Wan21.load(str(folder), offline=True).save_single_file(tmp_path / "wan2.1_t2v_1.3B_bf16.safetensors", None)
    (tmp_path / "examples" / "dataset.toml").write_text(f"resolutions = [64]\n[[directory]]\npath = '{four_shapes}'\n")
    (tmp_path / "examples" / "wan.toml").write_text(
        f"output_dir = '{tmp_path / 'out'}'\ndataset = 'examples/dataset.toml'\nepochs = 1\nmicro_batch_size_per_gpu = 2\n"
        f"[model]\ntype = 'wan'\nckpt_path = '{tmp_path / 'Wan2.1-T2V-1.3B'}'\ntransformer_path = '{dit}'\ndtype = 'float32'\n"
        f"[adapter]\ntype = 'lora'\nrank = 4\n[optimizer]\ntype = 'adamw_optimi'\nlr = 1e-3\n")
    out = _run(["train", "--config", str(tmp_path / "examples" / "wan.toml"), "--set", f"base_model_name={folder}",
                "--set", "train_device=cpu"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "read as diffusion-pipe trains it" in out.stderr and "Wan-AI/Wan2.1-T2V-1.3B-Diffusers by the folder's name" in out.stderr
    with safe_open(str(tmp_path / "out" / "wan.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert keys and all(".lora_" in k or k.endswith(".alpha") for k in keys)


def test_a_simpletuner_wan_config_trains_from_the_command_line(tmp_path, four_shapes):
    """SimpleTuner's config.json (keys with `--`) and its multidatabackend.json in config/, the
    dataset's folder relative to the checkout's root: 1 epoch of 4 images at batch 2, the LoRA saved
    where SimpleTuner saves it."""
    import shutil

    from safetensors import safe_open

    from ot_gradio.models.tiny import resolve_tiny

    folder = resolve_tiny("tiny:wan").diffusers_dir
    (tmp_path / "config").mkdir()
    shutil.copytree(four_shapes, tmp_path / "datasets" / "shapes")
    (tmp_path / "config" / "multidatabackend.json").write_text(
        '[{"id": "shapes", "type": "local", "instance_data_dir": "datasets/shapes", "caption_strategy": "textfile",'
        ' "resolution": 64, "resolution_type": "pixel_area"}]')
    (tmp_path / "config" / "config.json").write_text(
        f'{{"--model_family": "wan", "--model_type": "lora", "--lora_rank": 4, "--num_train_epochs": 1, "--train_batch_size": 2,'
        f' "--learning_rate": "1e-3", "--optimizer": "torch-adamw", "--mixed_precision": "no", "--output_dir": "{tmp_path / "out"}"}}')
    out = _run(["train", "--config", str(tmp_path / "config" / "config.json"), "--set", f"base_model_name={folder}",
                "--set", "train_device=cpu"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "read as SimpleTuner trains it" in out.stderr
    with safe_open(str(tmp_path / "out" / "pytorch_lora_weights.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert keys and all("lora" in k for k in keys)
