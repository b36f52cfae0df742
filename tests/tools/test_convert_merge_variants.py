"""`convert merge` of DoRA (both axes), LoHa, LoKr and OFT v2: the merged model gives the outputs the
adapted model gave in training (within 1e-5), from kohya and from PEFT files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ot_gradio.tools.convert import merged_weight
from ot_gradio.tools.jobs import run_inline
from ot_gradio.training.lora import add_lora
from ot_gradio.training.lora_format import save_lora
from ot_gradio.training.lora_variants import AdapterSpec

SD15 = "STABLE_DIFFUSION_15"
VARIANTS = {
    "dora_in": (AdapterSpec(decompose=True), 2),
    "dora_out": (AdapterSpec(decompose=True, output_axis=True, norm_epsilon=False), 2),
    "loha": (AdapterSpec(peft_type="LOHA"), 2),
    "lokr": (AdapterSpec(peft_type="LOKR"), 2),
    "lokr_full": (AdapterSpec(peft_type="LOKR"), 8),  # two full factor matrices
    "lokr_tucker_both": (AdapterSpec(peft_type="LOKR", decompose_both=True, decompose_factor=8, use_tucker=True), 1),
    # OneTrainer's LoKr switches: DoRA on LoKr on each axis, w2 one whole matrix
    "lokr_dora_out_full": (AdapterSpec(peft_type="LOKR", lokr_decompose=True, lokr_full_matrix=True), 1),
    "lokr_dora_in": (AdapterSpec(peft_type="LOKR", lokr_decompose=True, lokr_dora_output=False), 2),
    # OFT v2: the layers rotated (linear W·Rᵀ, convolution W·R), as OneTrainer trains them
    "oft": (AdapterSpec(peft_type="OFT_2", oft_block_size=8), 1),
    "oft_scaled_shared": (AdapterSpec(peft_type="OFT_2", oft_block_size=4, oft_block_share=True, oft_scaled=True), 1),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from ot_gradio.models.tiny.sd15 import save_tiny_sd15

    return save_tiny_sd15(tmp_path_factory.mktemp("tiny-sd15"))


def _inputs():
    g = torch.Generator().manual_seed(1)
    return dict(ids=torch.randint(0, 500, (2, 77), generator=g), latents=torch.randn(2, 4, 8, 8, generator=g),
                timesteps=torch.tensor([10, 700]), hidden=torch.randn(2, 77, 32, generator=g))


def _outputs(unet, text_encoder):
    inputs = _inputs()
    with torch.no_grad():
        text = text_encoder(inputs["ids"]).last_hidden_state
        noise = unet(inputs["latents"], inputs["timesteps"], encoder_hidden_states=inputs["hidden"]).sample
    return text, noise


def _adapted(spec, rank):
    """The tiny SD 1.5 (the saved model's weights) with the adapter on every layer, its weights
    moved at random as training would (DoRA magnitudes by up to 20%)."""
    from ot_gradio.models.tiny.sd15 import tiny_sd15_pipeline

    pipe = tiny_sd15_pipeline(0)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for module, kind in ((pipe.unet, "unet"), (pipe.text_encoder, "text_encoder")):
            for p in add_lora(module, kind=kind, rank=rank, alpha=1.0, dropout=0.0, layer_preset="full", spec=spec):
                noise = torch.randn(p.shape, generator=g)
                p.copy_(p * (1 + 0.2 * noise) if _is_magnitude(module, p) else 0.1 * noise)
            module.eval()
    return pipe


def _is_magnitude(module, param):
    return any(param is p for n, p in module.named_parameters() if "lora_magnitude_vector" in n)


def _merged_outputs(tiny, lora: Path, out: Path, weight=1.0):
    from diffusers import UNet2DConditionModel
    from transformers import CLIPTextModel

    result = run_inline("convert", {"operation": "merge", "model_type": SD15, "base": str(tiny.diffusers_dir), "lora": str(lora),
                                    "weight": weight, "output": str(out), "format": "diffusers"})
    folder = Path(result["output"])
    unet = UNet2DConditionModel.from_pretrained(folder / "unet").eval()
    return result, _outputs(unet, CLIPTextModel.from_pretrained(folder / "text_encoder").eval())


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_merge_gives_what_training_applied(variant, tiny, tmp_path):
    spec, rank = VARIANTS[variant]
    pipe = _adapted(spec, rank)
    trained = _outputs(pipe.unet, pipe.text_encoder)
    # input-axis DoRA and DoRA on LoKr have no PEFT form
    formats = ["kohya"] + ([] if variant == "dora_in" or variant.startswith("lokr_dora") else ["diffusers"])
    for fmt in formats:
        lora = save_lora(tmp_path / f"{fmt}.safetensors", unet=pipe.unet, text_encoder=pipe.text_encoder, lora_format=fmt)
        result, (text, noise) = _merged_outputs(tiny, lora, tmp_path / f"merged-{fmt}")
        assert result["layers"] > 0
        torch.testing.assert_close(noise, trained[1], rtol=0, atol=1e-5)
        torch.testing.assert_close(text, trained[0], rtol=0, atol=1e-5)
    from ot_gradio.models.tiny.sd15 import tiny_sd15_pipeline

    base = tiny_sd15_pipeline(0)
    assert not torch.allclose(trained[1], _outputs(base.unet, base.text_encoder)[1], atol=1e-3)  # the adapter matters


@pytest.mark.parametrize("output_axis", [False, True])
def test_dora_merge_at_a_strength_goes_part_way(output_axis):
    """W + s (W' - W): half strength is half the change, zero the base; conv kernels keep their shape."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 4, 3, 3, generator=g)
    shape = (1, 6, 1, 1) if output_axis else (1, 4, 1, 1)
    key = "lora_magnitude_vector" if output_axis else "dora_scale"
    tensors = {"lora_A.weight": torch.randn(2, 4, 3, 3, generator=g), "lora_B.weight": torch.randn(6, 2, 1, 1, generator=g),
               key: torch.rand(shape, generator=g) + 0.5}
    full = merged_weight(w, tensors, 0.5, 1.0)
    assert full.shape == w.shape
    torch.testing.assert_close(merged_weight(w, tensors, 0.5, 0.5), (w + full) / 2)
    torch.testing.assert_close(merged_weight(w, tensors, 0.5, 0.0), w)
    # the decomposed axis's norms are the magnitudes
    norms = full.reshape(6, -1).norm(dim=1) if output_axis else full.transpose(0, 1).reshape(4, -1).norm(dim=1)
    torch.testing.assert_close(norms, tensors[key].reshape(-1))
