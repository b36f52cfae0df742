"""A VAE of the user's choice (`vae.model_name`, OneTrainer's `vae_model_name`): from a diffusers
VAE folder, a hub repo in the hub cache (as madebyollin/sdxl-vae-fp16-fix is), or a single file
with original key names (a whole checkpoint's `first_stage_model.` part, as A1111 users keep VAEs);
a VAE that does not fit the model is refused by name. The families read it through the one
`part_models` path the trainer and the sample tool give them."""

from __future__ import annotations

import json
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


# diffusers' names of a Wan VAE's modules -> Wan's original ones (both of its VAEs)
WAN_RESNET = {"norm1": "residual.0", "conv1": "residual.2", "norm2": "residual.3", "conv2": "residual.6", "conv_shortcut": "shortcut"}
WAN_FIXED = {"quant_conv": "conv1", "post_quant_conv": "conv2", "encoder.conv_in": "encoder.conv1", "decoder.conv_in": "decoder.conv1",
             "encoder.norm_out": "encoder.head.0", "encoder.conv_out": "encoder.head.2", "decoder.norm_out": "decoder.head.0",
             "decoder.conv_out": "decoder.head.2"}


def wan_vae_to_original(weights: dict) -> dict:
    """A Wan 2.1-architecture VAE's diffusers names in Wan's original ones, as ComfyUI's
    wan_2.1_vae / qwen_image_vae files have them (the inverse of diffusers' converter)."""
    import re

    out = {}
    for key, value in weights.items():
        module, _, leaf = key.rpartition(".")
        if module in WAN_FIXED:
            module = WAN_FIXED[module]
        elif m := re.fullmatch(r"(encoder|decoder)\.mid_block\.attentions\.0\.(.+)", module):
            module = f"{m[1]}.middle.1.{m[2]}"
        elif m := re.fullmatch(r"(encoder|decoder)\.mid_block\.resnets\.(\d)\.(\w+)", module):
            module = f"{m[1]}.middle.{2 * int(m[2])}.{WAN_RESNET[m[3]]}"
        elif m := re.fullmatch(r"encoder\.down_blocks\.(\d+)\.(norm1|conv1|norm2|conv2|conv_shortcut)", module):
            module = f"encoder.downsamples.{m[1]}.{WAN_RESNET[m[2]]}"
        elif m := re.fullmatch(r"encoder\.down_blocks\.(\d+)\.(.+)", module):
            module = f"encoder.downsamples.{m[1]}.{m[2]}"
        elif m := re.fullmatch(r"decoder\.up_blocks\.(\d)\.resnets\.(\d)\.(\w+)", module):
            module = f"decoder.upsamples.{4 * int(m[1]) + int(m[2])}.{WAN_RESNET[m[3]]}"
        elif m := re.fullmatch(r"decoder\.up_blocks\.(\d)\.upsamplers\.0\.(.+)", module):
            module = f"decoder.upsamples.{4 * int(m[1]) + 3}.{m[2]}"
        out[f"{module}.{leaf}"] = value
    return out


@pytest.mark.parametrize("model_type, tiny", [("QWEN", "qwen-image"), ("WAN_2_1", "wan"), ("ANIMA", "anima"), ("KREA_2", "krea2")])
def test_comfyuis_wan_layout_vae_files_load(model_type, tiny, tmp_path):
    """ComfyUI's qwen_image_vae / wan_2.1_vae (Wan's original names) for Qwen-Image, Wan 2.1, Anima
    (into the pipeline's loader) and Krea 2 (in place of the loaded VAE), on a VAE of the published architecture (4 stages of 2 residual blocks) at a small width;
    the file's names are those diffusers' own converter reads (none of its diffusers names is left)."""
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers
    from safetensors.torch import save_file

    from ot_gradio.models.registry import get_family

    folder = tmp_path / "model"
    shutil.copytree(resolve_tiny(f"tiny:{tiny}").diffusers_dir, folder)
    config = json.loads((folder / "vae" / "config.json").read_text())
    config.update(base_dim=8, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[], temperal_downsample=[False, True, True])
    config.pop("decoder_base_dim", None)
    cls = getattr(__import__("diffusers"), config["_class_name"])
    torch.manual_seed(0)
    shutil.rmtree(folder / "vae")
    cls.from_config(config).save_pretrained(folder / "vae")
    family = get_family(model_type)
    base = family.load(str(folder), offline=True)
    changed = {k: (v + 0.1).contiguous() for k, v in base.vae.state_dict().items()}
    original = wan_vae_to_original(changed)
    assert not any(word in k for k in original for word in ("down_blocks", "up_blocks", "mid_block", "resnets", "_in.", "_out.", "quant"))
    assert convert_wan_vae_to_diffusers(original).keys() == changed.keys()
    save_file(original, tmp_path / "wan_2.1_vae.safetensors")
    model = family.load(str(folder), offline=True, part_models={"vae": str(tmp_path / "wan_2.1_vae.safetensors")})
    assert _same(model.vae, changed)


def wan22_vae_to_original(weights: dict) -> dict:
    """Wan 2.2's VAE (AutoencoderKLWan with residual stages) in Wan 2.2's own names, as its
    Wan2.2_VAE.pth and ComfyUI's wan2.2_vae.safetensors have them (Wan2.2's vae2_2.py: each stage's
    blocks, then its resampler, in one `downsamples` / `upsamples` list)."""
    import re

    blocks = {}  # the number of residual blocks in each stage, the resampler's index
    for key in weights:
        if m := re.match(r"(encoder\.down|decoder\.up)_blocks\.(\d+)\.resnets\.(\d+)\.", key):
            blocks[(m[1], m[2])] = max(blocks.get((m[1], m[2]), 0), int(m[3]) + 1)
    out = {}
    for key, value in weights.items():
        module, _, leaf = key.rpartition(".")
        if module in WAN_FIXED:
            module = WAN_FIXED[module]
        elif m := re.fullmatch(r"(encoder|decoder)\.mid_block\.attentions\.0\.(.+)", module):
            module = f"{m[1]}.middle.1.{m[2]}"
        elif m := re.fullmatch(r"(encoder|decoder)\.mid_block\.resnets\.(\d)\.(\w+)", module):
            module = f"{m[1]}.middle.{2 * int(m[2])}.{WAN_RESNET[m[3]]}"
        elif m := re.fullmatch(r"(encoder\.down|decoder\.up)_blocks\.(\d+)\.resnets\.(\d+)\.(\w+)", module):
            inner = m[1].split(".")[1]
            module = f"{m[1]}samples.{m[2]}.{inner}samples.{m[3]}.{WAN_RESNET[m[4]]}"
        elif m := re.fullmatch(r"(encoder\.down|decoder\.up)_blocks\.(\d+)\.(?:down|up)sampler\.(.+)", module):
            inner = m[1].split(".")[1]
            module = f"{m[1]}samples.{m[2]}.{inner}samples.{blocks[(m[1], m[2])]}.{m[3]}"
        out[f"{module}.{leaf}"] = value
    return out


def test_wan22s_own_vae_file_loads(tmp_path):
    """Wan 2.2 TI2V 5B's VAE file in Wan 2.2's own layout (wan2.2_vae.safetensors), on the published
    architecture (4 residual stages, 2 blocks each, widths 1-2-4-4, so the shortcuts are there) at
    a small width: every weight read, into the right place."""
    from safetensors.torch import save_file

    from ot_gradio.models.wan_ti2v import Wan22TI2V5B

    folder = tmp_path / "model"
    shutil.copytree(resolve_tiny("tiny:wan22-5b").diffusers_dir, folder)
    config = json.loads((folder / "vae" / "config.json").read_text())
    config.update(base_dim=8, decoder_base_dim=12, dim_mult=[1, 2, 4, 4], num_res_blocks=2)
    torch.manual_seed(0)
    shutil.rmtree(folder / "vae")
    __import__("diffusers").AutoencoderKLWan.from_config(config).save_pretrained(folder / "vae")
    base = Wan22TI2V5B.load(str(folder), offline=True)
    changed = {k: (v + 0.1).contiguous() for k, v in base.vae.state_dict().items()}
    original = wan22_vae_to_original(changed)
    assert "encoder.downsamples.1.downsamples.2.time_conv.weight" in original  # a stage's resampler, after its blocks
    assert "decoder.upsamples.0.upsamples.3.resample.1.weight" in original  # (the decoder's stages have one block more)
    assert "encoder.downsamples.1.downsamples.0.shortcut.weight" in original
    assert not any(word in k for k in original for word in ("_blocks", "mid_block", "resnets", "_in.", "_out.", "quant", "sampler."))
    save_file(original, tmp_path / "wan2.2_vae.safetensors")
    model = Wan22TI2V5B.load(str(folder), offline=True, part_models={"vae": str(tmp_path / "wan2.2_vae.safetensors")})
    assert _same(model.vae, changed)


def test_a_wan_layout_vae_of_another_architecture_is_refused_by_name(tmp_path):
    """A Wan 2.1-layout file for a Wan 2.1-type VAE of an unpublished shape (here the tiny test
    model's 1 block per stage) is not guessed at: said, naming the field."""
    from safetensors.torch import save_file

    from ot_gradio.models.wan import Wan21

    folder = str(resolve_tiny("tiny:wan").diffusers_dir)
    base = Wan21.load(folder, offline=True)
    save_file(wan_vae_to_original({k: v.contiguous() for k, v in base.vae.state_dict().items()}), tmp_path / "vae.safetensors")
    with pytest.raises(ModelLoadError, match=r"vae.model_name: .*vae.safetensors holds a VAE in Wan's original layout"):
        Wan21.load(folder, offline=True, part_models={"vae": str(tmp_path / "vae.safetensors")})


def test_bfls_flux2_vae_file_loads(tmp_path):
    """BFL's flux2-vae.safetensors (as ComfyUI keeps it): LDM names, the quantization convolutions
    inside the encoder and decoder, and the latent batch norm's statistics; every weight read."""
    from safetensors.torch import save_file

    from ot_gradio.models.registry import get_family
    from ot_gradio.models.sd_single_file import vae_to_original

    family = get_family("FLUX_2")
    folder = str(resolve_tiny("tiny:flux2-dev").diffusers_dir)
    base = family.load(folder, offline=True)
    changed = {k: (v + 0.1 if v.is_floating_point() else v).contiguous() for k, v in base.vae.state_dict().items()}
    original = vae_to_original({k: v for k, v in changed.items() if not k.startswith("bn.")}, base.vae.config)
    for outer, inner in (("quant_conv.", "encoder.quant_conv."), ("post_quant_conv.", "decoder.post_quant_conv.")):
        for key in [k for k in original if k.startswith(outer)]:
            original[inner + key[len(outer):]] = original.pop(key)
    original.update({k: v for k, v in changed.items() if k in ("bn.running_mean", "bn.running_var")})
    assert "encoder.down.0.block.0.conv1.weight" in original and "quant_conv.weight" not in original
    save_file(original, tmp_path / "flux2-vae.sft")  # BFL's own name for a safetensors file
    model = family.load(folder, offline=True, part_models={"vae": str(tmp_path / "flux2-vae.sft")})
    got = model.vae.state_dict()
    assert got.keys() == changed.keys()
    assert all(torch.allclose(got[k].float(), changed[k].float()) for k in got if k != "bn.num_batches_tracked")
