"""A base model given as a Hugging Face file address (a single-file checkpoint on the hub, as
Pony or Illustrious are shared) trains: the file downloads once into the hub cache, its component
configs come from the family's default config repo, both through huggingface_hub's and diffusers'
own download code from a local stand-in for the hub (tests/fake_hub.py)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ot_gradio.models.registry import get_family
from tests.fake_hub import FakeHub

ROOT = Path(__file__).resolve().parents[2]
ADDRESS = "https://huggingface.co/someone/checkpoints/blob/main/my-sd15-model.safetensors"


def test_a_hub_file_address_as_base_model_downloads_and_trains(tmp_path, tiny_model, lora_config):
    """Both repos gated, as Flux.1-dev's is: the config's token reaches every download (it is moved
    to the workspace's secrets.json, the worker reads it from there)."""
    family = get_family("STABLE_DIFFUSION_15")
    shutil.copy(tiny_model.single_file, (tmp_path / "repo").mkdir() or tmp_path / "repo" / "my-sd15-model.safetensors")
    repos = {"someone/checkpoints": tmp_path / "repo", family.default_config_repo: tiny_model.diffusers_dir}
    config = lora_config(base_model_name=ADDRESS, huggingface_cache_dir=str(tmp_path / "hf"), epochs=1, samples=[],
                         secrets={"huggingface_token": "hf_granted"})
    (tmp_path / "c.json").write_text(json.dumps(config))
    with FakeHub(repos, gated=dict.fromkeys(repos, "hf_granted")) as hub:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0",
               "HF_HOME": str(tmp_path / "home")}
        out = subprocess.run([sys.executable, "-m", "ot_gradio", "train", "--config", str(tmp_path / "c.json")], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert Path(config["output_model_destination"]).is_file() and hub.refused == []
    fetched = {path for method, path in hub.requests if method == "GET" and "/resolve/" in path}
    assert any(path.endswith("/my-sd15-model.safetensors") for path in fetched)
    assert any(path.startswith(f"/{family.default_config_repo}/resolve/") for path in fetched)  # the configs
    cached = list((tmp_path / "hf").rglob("my-sd15-model.safetensors"))
    assert cached and cached[0].read_bytes() == tiny_model.single_file.read_bytes()
    # the run said what it downloaded while loading (the page shows the status; models/download_watch.py)
    statuses = [json.loads(line) for events in Path(config["workspace_dir"]).rglob("events.jsonl") for line in events.read_text().splitlines()]
    said = [e["message"] for e in statuses if e.get("type") == "status" and e.get("status") == "loading"]
    assert any(m.startswith(f"loading {ADDRESS}: downloaded ") for m in said), said


def test_a_web_address_of_another_site_is_named_before_the_run(tmp_path, lora_config):
    config = lora_config(base_model_name="https://example.com/files/model.safetensors")
    (tmp_path / "c.json").write_text(json.dumps(config))
    out = subprocess.run([sys.executable, "-m", "ot_gradio", "train", "--config", str(tmp_path / "c.json")], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "base_model_name" in out.stderr and "not of a Hugging Face file" in out.stderr, out.stderr[-2000:]


def test_a_civitai_model_as_base_model_downloads_with_the_key_and_trains(tmp_path, tiny_model, lora_config):
    """Pony, Illustrious and most SDXL merges are shared on Civitai: its page address trains. The
    key given in the config goes to the workspace's secrets.json and from there to the download.
    The run starts from a LoRA shared there too (*Base LoRA*): its rank, not the config's, is trained;
    and uses an embedding shared there as an A1111 `.pt` (an additional embedding, not trained)."""
    import torch
    from safetensors.torch import load_file

    from tests.fake_civitai import FakeCivitai, Version
    from tests.tools.lora_files import random_lora_files

    family = get_family("STABLE_DIFFUSION_15")
    start = random_lora_files("STABLE_DIFFUSION_15", tiny_model.diffusers_dir, ("SAFETENSORS",), tmp_path)["SAFETENSORS"]  # rank 4
    config = lora_config(base_model_name="https://civitai.com/models/4384/dreamshaper", huggingface_cache_dir=str(tmp_path / "hf"),
                         epochs=1, samples=[], secrets={"civitai_token": "civitai-key"}, lora_rank=8,
                         lora_model_name="https://civitai.com/models/77/my-style?modelVersionId=770",
                         additional_embeddings=[{"model_name": "https://civitai.com/models/88?modelVersionId=880", "placeholder": "<ti>",
                                                 "train": False}])
    vectors = torch.randn(2, 32)  # the tiny text encoder's width
    torch.save({"string_to_param": {"*": vectors}, "name": "ti", "step": 500}, tmp_path / "ti.pt")
    (tmp_path / "c.json").write_text(json.dumps(config))
    version = Version(128713, 4384, {"dreamshaper_8.safetensors": tiny_model.single_file})
    style = Version(770, 77, {"my_style.safetensors": start}, model_type="LORA")
    ti = Version(880, 88, {"ti.pt": tmp_path / "ti.pt"}, model_type="TextualInversion")
    with (FakeHub({family.default_config_repo: tiny_model.diffusers_dir}) as hub,
          FakeCivitai([version, style, ti], key="civitai-key") as civitai):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0",
               "HF_HOME": str(tmp_path / "home"), "CIVITAI_ENDPOINT": civitai.url}
        out = subprocess.run([sys.executable, "-m", "ot_gradio", "train", "--config", str(tmp_path / "c.json")], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert Path(config["output_model_destination"]).is_file()
    assert [auth for _, path, auth, _ in civitai.requests if path.startswith("/api/download/")] == ["Bearer civitai-key"] * 3
    used = load_file(str(Path(config["output_model_destination"]).with_name("lora_embeddings") / "ti.safetensors"))["emp_params"]
    assert torch.equal(used.float(), vectors)  # the downloaded embedding's vectors, used as they are
    cached = tmp_path / "hf" / "civitai" / "128713" / "dreamshaper_8.safetensors"
    assert cached.read_bytes() == tiny_model.single_file.read_bytes()
    assert (tmp_path / "hf" / "civitai" / "770" / "my_style.safetensors").read_bytes() == start.read_bytes()
    trained = load_file(config["output_model_destination"])
    downs = [t for k, t in trained.items() if k.endswith("lora_down.weight")]
    assert downs and {t.shape[0] for t in downs} == {4}  # the start file's rank, not lora_rank 8
    statuses = [json.loads(line) for events in Path(config["workspace_dir"]).rglob("events.jsonl") for line in events.read_text().splitlines()]
    said = [e["message"] for e in statuses if e.get("type") == "status" and e.get("status") == "loading"]
    assert any(m.startswith(f"loading {config['base_model_name']}: downloaded ") for m in said), said  # the page shows it
    warned = [e["message"] for e in statuses if e.get("type") == "warning"]
    assert any("names no version, so this run trains on the newest, 128713" in w and "?modelVersionId=128713" in w
               for w in warned), warned  # the page's address without a version: how to keep this one
    files = [*Path(config["workspace_dir"]).rglob("*"), Path(config["output_model_destination"])]
    assert any(p.name == "secrets.json" for p in files)
    for file in files:  # the key only in secrets.json: not in the run's config, events, backups or the model
        if file.is_file() and file.name != "secrets.json":
            assert b"civitai-key" not in file.read_bytes(), file
