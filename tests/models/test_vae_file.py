"""A VAE of the user's choice (`vae.model_name`, OneTrainer's `vae_model_name`): from a diffusers
VAE folder, a hub repo in the hub cache (as madebyollin/sdxl-vae-fp16-fix is), or a single file
with original key names (a whole checkpoint's `first_stage_model.` part, as A1111 users keep VAEs);
a VAE that does not fit the model is refused by name. The families read it through the one
`part_models` path the trainer and the sample tool give them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from ot_gradio.config.fields import PLANNED, field_meta
from ot_gradio.config.parts import VaePartConfig
from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.flux import FluxDev1 as Flux
from ot_gradio.models.sd15 import StableDiffusion15
from ot_gradio.models.sd_single_file import save_original_single_file
from ot_gradio.models.tiny import resolve_tiny
from ot_gradio.models.vae_override import load_vae_override

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def other_vae(tiny_sd15_paths, tmp_path_factory):
    """The tiny SD 1.5 with other VAE weights: saved as a diffusers VAE folder, as a hub cache
    entry, and as a whole original-layout checkpoint; and those weights."""
    model = StableDiffusion15.load(str(tiny_sd15_paths.diffusers_dir), offline=True)
    with torch.no_grad():
        for p in model.vae.parameters():
            p.add_(0.125)
    root = tmp_path_factory.mktemp("vae")
    model.vae.save_pretrained(root / "folder")
    snapshot = root / "hub" / "models--someone--tiny-vae"
    (snapshot / "refs").mkdir(parents=True)
    (snapshot / "refs" / "main").write_text(COMMIT)
    shutil.copytree(root / "folder", snapshot / "snapshots" / COMMIT)
    checkpoint = save_original_single_file(root / "whole.safetensors", model.unet, model.vae, model.text_encoder)
    return {"folder": root / "folder", "hub": root / "hub", "file": checkpoint,
            "weights": {k: v.clone() for k, v in model.vae.state_dict().items()}}


def _same(module: torch.nn.Module, expected: dict) -> bool:
    got = module.state_dict()
    return got.keys() == expected.keys() and all(torch.allclose(got[k], expected[k].to(got[k].dtype)) for k in got)


@pytest.mark.parametrize("source", ["folder", "file", "hub"])
def test_sd15_takes_the_vae_from_a_folder_a_single_file_or_the_hub_cache(tiny_sd15_paths, sd15, other_vae, source):
    base = sd15
    assert not _same(base.vae, other_vae["weights"])
    value = "someone/tiny-vae" if source == "hub" else str(other_vae[source])
    cache = str(other_vae["hub"]) if source == "hub" else None
    model = StableDiffusion15.load(str(tiny_sd15_paths.diffusers_dir), offline=True, cache_dir=cache, part_models={"vae": value},
                                   dtypes={"vae": torch.float16})
    assert _same(model.vae, other_vae["weights"])
    assert model.vae.dtype == torch.float16  # the part's weight dtype still applies
    assert _same(model.unet, base.unet.state_dict())  # the other parts stay the base model's
    assert model.vae_id != base.vae_id  # so cached latents are made again with it


def test_a_flow_family_reads_it_too_and_a_vae_of_another_model_is_refused(tiny_dir, tiny_sd15_paths, tmp_path):
    flux_dir = resolve_tiny("tiny:flux").diffusers_dir
    flux = Flux.load(str(flux_dir), offline=True, part_models={"vae": str(Path(flux_dir) / "vae")})
    assert flux.vae.config.latent_channels == 16
    with pytest.raises(ModelLoadError, match=r"vae\.model_name: .* makes latents of 16 channels; this model's denoiser takes 4"):
        StableDiffusion15.load(str(tiny_sd15_paths.diffusers_dir), offline=True, part_models={"vae": str(Path(flux_dir) / "vae")})
    # a VAE file goes into Flux's pipeline loader (models/vae_override.vae_from_file), checked the same way
    sd15_vae = Path(tiny_sd15_paths.diffusers_dir) / "vae" / "diffusion_pytorch_model.safetensors"
    with pytest.raises(ModelLoadError, match=r"vae\.model_name: .*diffusion_pytorch_model\.safetensors is not a VAE of this model's kind"):
        Flux.load(str(flux_dir), offline=True, part_models={"vae": str(sd15_vae)})


@pytest.mark.parametrize(("value", "message"), [
    ("missing/folder/vae", r"vae\.model_name: missing/folder/vae does not exist"),
    ("someone/not-cached", r"vae\.model_name: could not load the VAE someone/not-cached .* offline mode is on"),
    ("notes.txt", r"vae\.model_name: .*notes\.txt is not a weights file"),
    ("empty-dir", r"vae\.model_name: .*empty-dir has no config\.json"),
    ("unet.safetensors", r"vae\.model_name: .*unet\.safetensors is not a VAE of this model's kind"),
])
def test_a_wrong_vae_is_named_with_what_to_do(tiny_sd15_paths, sd15, tmp_path, monkeypatch, value, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("not weights")
    (tmp_path / "empty-dir").mkdir()
    shutil.copy(Path(tiny_sd15_paths.diffusers_dir) / "unet" / "diffusion_pytorch_model.safetensors", tmp_path / "unet.safetensors")
    with pytest.raises(ModelLoadError, match=message):
        load_vae_override(value, sd15.vae, cache_dir=str(tmp_path / "hub"), offline=True, token=None)


def test_the_field_is_shown_and_checked_not_planned():
    assert field_meta(VaePartConfig, "model_name").get("status") != PLANNED
