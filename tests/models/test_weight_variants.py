"""A diffusers folder downloaded with only the half-precision copies of its weights
(`*.fp16.safetensors`) loads as the whole folder does (models/weight_variants.py), through each
loading path: the SD pipeline, PixArt's, the flow-matching families', Anima's part by part,
HiDream's Llama, Stable Cascade's, a VAE folder."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.weight_variants import folder_variant, part_variant

_PLAIN = re.compile(r"^(diffusion_pytorch_model|model)(-\d+-of-\d+)?\.safetensors$")


def variant_copy(source: Path, target: Path, variant: str = "fp16", keep: tuple[str, ...] = ()) -> Path:
    """`source` with every weights file renamed to its `variant` copy (sharded: the index too), as the
    hub names them, except in the parts `keep`."""
    shutil.copytree(source, target)
    for file in sorted(target.rglob("*")):
        if file.parent.name in keep:
            continue
        match = _PLAIN.match(file.name)
        if match:
            file.rename(file.with_name(f"{match[1]}.{variant}{match[2] or ''}.safetensors"))
        elif file.name.endswith(".safetensors.index.json"):
            file.rename(file.with_name(file.name.replace(".index.json", f".index.{variant}.json")))
    return target


FAMILIES = [
    ("STABLE_DIFFUSION_15", "sd15"), ("STABLE_DIFFUSION_20_DEPTH", "sd2-depth"), ("PIXART_SIGMA", "pixart-sigma"),
    ("FLUX_DEV_1", "flux"), ("ANIMA", "anima"), ("HI_DREAM_FULL", "hidream"), ("STABLE_CASCADE_1", "cascade"),
]


@pytest.mark.parametrize("model_type, tiny", FAMILIES, ids=[f for f, _ in FAMILIES])
def test_a_folder_of_fp16_copies_loads_as_the_whole_folder(model_type, tiny, tmp_path):
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny

    family = get_family(model_type)
    source = resolve_tiny(f"tiny:{tiny}").diffusers_dir
    cascade = tiny == "cascade"  # a prior folder beside its decoder's, named by part_models
    copies = variant_copy(source.parent if cascade else source, tmp_path / "fp16-only") / (source.name if cascade else "")
    assert not list(copies.rglob("diffusion_pytorch_model.safetensors")) and folder_variant(copies) == "fp16"

    def load(folder: Path):
        decoder = {"part_models": {"decoder": str(folder.parent / "decoder")}} if cascade else {}
        return family.load(str(folder), offline=True, **decoder)

    expected, got = load(source), load(copies)
    assert got.parts.keys() == expected.parts.keys()
    for part, module in expected.parts.items():
        a, b = module.state_dict(), got.parts[part].state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), part


def test_the_variant_is_named_only_where_a_part_lacks_plain_weights(tmp_path):
    from ot_gradio.models.tiny import resolve_tiny

    source = resolve_tiny("tiny:sd15").diffusers_dir
    assert folder_variant(source) is None and part_variant(source / "unet") is None
    both = variant_copy(source, tmp_path / "both")
    for part in ("unet", "vae", "text_encoder"):  # the hub's usual layout: the plain file beside the copy
        shutil.copy(source / part / next(f.name for f in (source / part).iterdir() if f.suffix == ".safetensors"), both / part)
    assert folder_variant(both) is None  # plain weights win, as diffusers loads them without a variant
    mixed = variant_copy(source, tmp_path / "mixed", keep=("vae",))  # diffusers takes the VAE's plain weights
    assert folder_variant(mixed) == "fp16" and part_variant(mixed / "vae") is None
    odd = variant_copy(source, tmp_path / "odd", keep=("vae",))
    variant_copy(source / "vae", tmp_path / "vae-bf16", "bf16")
    shutil.rmtree(odd / "vae")
    shutil.copytree(tmp_path / "vae-bf16", odd / "vae")
    with pytest.raises(ModelLoadError, match=r"different variants \(text_encoder: fp16, unet: fp16, vae: bf16\)"):
        folder_variant(odd)
    # the safety checker a SD 1.5 folder may hold is never loaded, so its files choose nothing
    (mixed / "safety_checker").mkdir()
    (mixed / "safety_checker" / "model.bf16.safetensors").write_bytes(b"")
    assert folder_variant(mixed) == "fp16"


def test_a_vae_folder_of_fp16_copies_loads_as_the_vae_override(tmp_path):
    from ot_gradio.models.tiny import resolve_tiny
    from ot_gradio.models.vae_override import load_vae_override

    source = resolve_tiny("tiny:sd15").diffusers_dir / "vae"
    from diffusers import AutoencoderKL

    base = AutoencoderKL.from_pretrained(str(source))
    vae = load_vae_override(str(variant_copy(source, tmp_path / "vae")), base, cache_dir=None, offline=True, token=None)
    assert all(torch.equal(a, b) for a, b in zip(base.state_dict().values(), vae.state_dict().values(), strict=True))


@pytest.mark.parametrize("names, variant", [
    (["diffusion_pytorch_model.fp16.safetensors", "config.json"], "fp16"),
    (["model.bf16-00001-of-00002.safetensors", "model.bf16-00002-of-00002.safetensors", "model.safetensors.index.bf16.json"], "bf16"),
    (["model-00001-of-00002.fp16.safetensors", "model.safetensors.fp16.index.json"], "fp16"),  # diffusers' older names
    (["diffusion_pytorch_model.fp16.bin"], "fp16"),
    (["diffusion_pytorch_model-00001-of-00002.safetensors", "diffusion_pytorch_model.fp16-00001-of-00002.safetensors"], None),
    (["diffusion_pytorch_model.bin", "diffusion_pytorch_model.fp16.safetensors"], None),  # plain weights load without one
    (["model.safetensors.index.json", "model.fp16.safetensors"], None),
    (["tokenizer.json", "vocab.json", "merges.txt"], None),
])
def test_the_part_variant_by_file_names(names, variant, tmp_path):
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert part_variant(tmp_path) == variant


def hub_cache(cache: Path, repo: str, snapshot: Path) -> Path:
    """`snapshot` as the cached download of the hub repo `repo` in the Hugging Face cache `cache`."""
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text("0" * 40)
    shutil.copytree(snapshot, root / "snapshots" / ("0" * 40))
    return root


HUB = [("STABLE_DIFFUSION_15", "sd15"), ("PIXART_SIGMA", "pixart-sigma"), ("FLUX_DEV_1", "flux")]


@pytest.mark.parametrize("model_type, tiny", HUB, ids=[f for f, _ in HUB])
def test_a_cached_hub_repo_of_fp16_copies_loads_offline(model_type, tiny, tmp_path):
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny
    from ot_gradio.models.weight_variants import hub_variant

    family = get_family(model_type)
    source = resolve_tiny(f"tiny:{tiny}").diffusers_dir
    hub_cache(tmp_path / "hf", "someone/fp16-only", variant_copy(source, tmp_path / "copies"))
    assert hub_variant("someone/fp16-only", cache_dir=str(tmp_path / "hf"), offline=True) == {"variant": "fp16"}
    got = family.load("someone/fp16-only", cache_dir=str(tmp_path / "hf"), offline=True)
    expected = family.load(str(source), offline=True)
    for part, module in expected.parts.items():
        assert all(torch.equal(a, b) for a, b in zip(module.state_dict().values(), got.parts[part].state_dict().values(),
                                                      strict=True)), part


HUB_LOAD = """
import json, sys, torch
from ot_gradio.models.registry import get_family
result = {}
for model_type, repo, local in json.loads(sys.argv[1]):
    family = get_family(model_type)
    got, expected = family.load(repo, cache_dir=sys.argv[2], offline=False), family.load(local, offline=True)
    result[model_type] = {part: all(torch.equal(a, b) for a, b in zip(module.state_dict().values(),
                                                                       got.parts[part].state_dict().values(), strict=True))
                          for part, module in expected.parts.items()}
print("RESULT " + json.dumps(result))
"""


def test_a_hub_repo_of_fp16_copies_downloads_and_loads(tmp_path):
    """Through huggingface_hub's and diffusers' own download code, from a local stand-in for the
    hub (tests/fake_hub.py): the repo's file list names the variant, and only its copies are fetched."""
    import json
    import os
    import subprocess
    import sys

    from ot_gradio.models.tiny import resolve_tiny
    from tests.fake_hub import FakeHub

    repos, jobs = {}, []
    for model_type, tiny in HUB:
        source = resolve_tiny(f"tiny:{tiny}").diffusers_dir
        repos[f"someone/{tiny}-fp16"] = variant_copy(source, tmp_path / tiny)
        jobs.append((model_type, f"someone/{tiny}-fp16", str(source)))
    with FakeHub(repos) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0",
               "HF_HOME": str(tmp_path / "home"), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        out = subprocess.run([sys.executable, "-c", HUB_LOAD, json.dumps(jobs), str(tmp_path / "cache")], env=env,
                             capture_output=True, text=True, timeout=600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, out.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert {t: all(parts.values()) and bool(parts) for t, parts in result.items()} == {t: True for t, _ in HUB}, result
    fetched = {path.split("/resolve/", 1)[1].split("/", 1)[1] for method, path in hub.requests if method == "GET" and "/resolve/" in path}
    weights = {name for name in fetched if name.endswith(".safetensors")}
    assert weights and all(".fp16." in name for name in weights), weights
    assert any(path.startswith("/api/models/someone/sd15-fp16/tree/") for _, path in hub.requests)  # the file list asked


def test_a_hub_repo_s_file_list_names_the_variant(monkeypatch):
    import huggingface_hub

    from ot_gradio.models import weight_variants

    listings = {
        "a/fp16-only": ["model_index.json", "unet/config.json", "unet/diffusion_pytorch_model.fp16.safetensors",
                        "vae/diffusion_pytorch_model.fp16.safetensors", "text_encoder/model.fp16.safetensors",
                        "tokenizer/vocab.json", "safety_checker/model.safetensors"],
        "a/both": ["unet/diffusion_pytorch_model.safetensors", "unet/diffusion_pytorch_model.fp16.safetensors",
                   "sd_xl_base_1.0.safetensors"],
        "a/vae": ["config.json", "diffusion_pytorch_model.bf16.safetensors"],
    }
    asked = []

    def listing(repo, token=None):
        asked.append(repo)
        if repo not in listings:
            raise OSError("not found")
        return listings[repo]

    monkeypatch.setattr(huggingface_hub, "list_repo_files", listing)
    weight_variants._repo_files.cache_clear()
    assert weight_variants.hub_variant("a/fp16-only") == {"variant": "fp16"}
    assert weight_variants.hub_variant("a/fp16-only", "unet") == {"variant": "fp16"}
    assert weight_variants.hub_variant("a/fp16-only", "tokenizer") == {}
    assert weight_variants.hub_variant("a/both") == {}
    assert weight_variants.hub_variant("a/vae", "") == {"variant": "bf16"}
    assert weight_variants.hub_variant("a/missing") == {}  # diffusers' own error names the repo
    # Anima loads part by part with the pipeline's hub keywords
    assert weight_variants.part_keywords("a/fp16-only", "vae", {"cache_dir": None, "local_files_only": False}) == {"variant": "fp16"}
    assert asked.count("a/fp16-only") == 1  # one request a repo
    weight_variants._repo_files.cache_clear()
