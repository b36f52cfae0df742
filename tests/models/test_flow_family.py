"""The flow-matching families' base class (models/flow_family.py): what it does once for every
family, checked on the tiny Z-Image (loading's refusals, the parts parked for a sample and put
back, also when sampling fails, the layer-skip check and the DDPM-only options refused)."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.config.enums import ModelType
from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.flow_family import FlowFamily
from ot_gradio.models.registry import get_family
from ot_gradio.models.z_image import ZImage
from tests.models.family_checks import family_fixtures

FLOW_TYPES = (ModelType.FLUX_DEV_1, ModelType.FLUX_FILL_DEV_1, ModelType.CHROMA_1, ModelType.STABLE_DIFFUSION_3,
              ModelType.STABLE_DIFFUSION_35, ModelType.Z_IMAGE, ModelType.FLUX_2, ModelType.SANA)


z_paths, zimage = family_fixtures("z-image", ZImage, "z_paths", "zimage")


def test_every_flow_family_is_one_subclass_with_its_own_name():
    families = [get_family(t) for t in FLOW_TYPES]
    assert all(issubclass(f, FlowFamily) and f.schedule_kind == "flow_matching" for f in families)
    names = [f.family_name for f in families]
    assert all(names) and len(set(names)) == len(names)
    # what a model without its text encoders is told it needs: from the description's labels, unless the family says more
    described = {t: FlowFamily.text_encoder_description.fget(get_family(t)) for t in (ModelType.Z_IMAGE, ModelType.HUNYUAN_VIDEO)}
    assert described == {ModelType.Z_IMAGE: "its Qwen3 text encoder", ModelType.HUNYUAN_VIDEO: "its Llama and CLIP-L text encoders"}
    assert "Mistral3 (dev) or Qwen3 (Klein)" in get_family(ModelType.FLUX_2).text_encoder_description


def test_loading_refuses_what_it_cannot_load_with_what_to_do(tmp_path, z_paths, tiny_dir):
    from ot_gradio.models.flux2 import Flux2
    from ot_gradio.models.sana import Sana

    with pytest.raises(ValueError, match=r"Unknown model part\(s\) \['unet'\] in dtypes; expected transformer, text_encoder, vae"):
        ZImage.load(str(z_paths.diffusers_dir), dtypes={"unet": torch.float16})
    with pytest.raises(ModelLoadError, match="No base model given"):
        ZImage.load("  ")
    text = tmp_path / "notes.txt"
    text.write_text("x")
    with pytest.raises(ModelLoadError, match="is a file but not a checkpoint"):
        ZImage.load(str(text))
    class FoldersOnly(Sana):  # a family without a single-file layout refuses files with advice
        single_file_layout = None

    with pytest.raises(ModelLoadError, match="SANA loads from a diffusers folder.*SanaTransformer2DModel.from_single_file"):
        FoldersOnly.load(str(z_paths.single_file))
    with pytest.raises(ModelLoadError, match=r"config folder .* \(no model_index.json\); point it to a diffusers folder of Z-Image"):
        ZImage.load(str(z_paths.single_file), config_dir=str(tmp_path), offline=True)
    with pytest.raises(ModelLoadError, match=r"is not a Flux.2 model \(no Flux.2 transformer\)"):
        Flux2.load(str(z_paths.diffusers_dir), offline=True)


def test_loaded_parts_take_their_dtypes(z_paths):
    model = ZImage.load(str(z_paths.diffusers_dir), offline=True, dtypes={"transformer": torch.bfloat16})
    assert {p: m.dtype for p, m in model.parts.items()} == {
        "transformer": torch.bfloat16, "text_encoder": torch.float32, "vae": torch.float32}
    assert model.tokenizers == {"text_encoder": model.tokenizer}


def test_sample_parks_the_parts_and_puts_them_back(zimage, monkeypatch):
    zimage.transformer.train()
    zimage.text_encoder.train()
    zimage.vae.eval()
    seen = {}
    inputs = type(zimage).pipeline_inputs

    def recording(self, *args):
        seen.update({p: m.training for p, m in self.parts.items()})
        return inputs(self, *args)

    monkeypatch.setattr(type(zimage), "pipeline_inputs", recording)
    image = zimage.sample("a red circle", height=40, width=24, steps=1)
    assert image.size == (24, 40)  # generated at 48 x 32, resized back
    assert seen == {"transformer": False, "text_encoder": False, "vae": False}
    assert zimage.transformer.training and zimage.text_encoder.training and not zimage.vae.training

    def failing(self, latents, height, width):
        raise RuntimeError("decoder broke")

    monkeypatch.setattr(type(zimage), "decode_sample", failing)
    with pytest.raises(RuntimeError, match="decoder broke"):
        zimage.sample("a red circle", height=32, width=32, steps=1)
    assert zimage.transformer.training and zimage.text_encoder.training and not zimage.vae.training
    with pytest.raises(ValueError, match="Z_IMAGE samples from a prompt alone; it takes no image"):
        zimage.sample("a red circle", height=32, width=32, steps=1, image="x.png")


def test_options_the_flow_families_refuse_or_check(zimage):
    with pytest.raises(ValueError, match="force_v_prediction / force_epsilon_prediction: Z-Image is a flow-matching model"):
        zimage.configure_noise_schedule(prediction_type="v_prediction")
    with pytest.raises(ValueError, match="rescale_noise_scheduler_to_zero_terminal_snr"):
        zimage.configure_noise_schedule(zero_terminal_snr=True)
    zimage.configure_noise_schedule()  # nothing asked, nothing refused
    top = zimage.text_encoder.config.num_hidden_layers - 1
    with pytest.raises(ValueError, match=f"text_encoder_layer_skip: {top + 1} is out of range; .* allows 0 to {top}"):
        zimage.layer_skips = {"text_encoder": top + 1}
    zimage.layer_skips = {"text_encoder": "1"}
    assert zimage.layer_skips == {"text_encoder": 1}
    zimage.layer_skips = {}
    with pytest.raises(ValueError, match="attention_mechanism: FLASH needs a CUDA GPU"):
        zimage.set_attention("FLASH", "cpu")
