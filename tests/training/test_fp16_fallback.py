"""fallback_train_dtype (training/fp16_fallback.py): in a float16 run the parts that overflow in
float16 (each family's `fp16_unstable`) compute at the fallback type; other runs leave them alone.
CPU autocast does float16 too, so the contexts are exercised here as on a GPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ot_gradio.config.doctor import errors
from ot_gradio.config.enums import ModelType
from ot_gradio.config.families import family_info
from ot_gradio.config.schema import TrainConfig
from ot_gradio.models.registry import get_family
from ot_gradio.training.fp16_fallback import install_fp16_fallback, load_dtype

FP16 = dict(device_type="cpu", dtype=torch.float16)


class Model:
    """A text encoder whose activations pass float16's largest value (65504), and a denoiser."""

    fp16_unstable = ("text_encoder",)

    def __init__(self):
        self.text_encoder, self.unet = nn.Linear(4, 4), nn.Linear(4, 4)
        with torch.no_grad():
            self.text_encoder.weight.fill_(300.0)
        self.text_encoder.requires_grad_(False)


@pytest.mark.parametrize(("fallback", "dtype"), [("BFLOAT_16", torch.bfloat16), ("FLOAT_32", torch.float32)])
def test_an_unstable_part_runs_at_the_fallback_type_in_a_float16_run(fallback, dtype):
    model, x = Model(), torch.full((2, 4), 100.0)
    with torch.autocast(**FP16):
        assert torch.isinf(model.text_encoder(x)).all()  # 4 x 300 x 100 = 120000: past float16
        model.unet(x)  # the denoiser's weights cast (and cached) at float16 first
    assert install_fp16_fallback(model, fallback) == ["text_encoder"]
    with torch.autocast(**FP16):
        out = model.text_encoder(x)
        assert out.dtype == dtype and torch.isfinite(out).all()
        assert model.unet(x).dtype == torch.float16  # the rest of the run stays float16
        with torch.autocast(**FP16):  # nested float16 autocast, as the trainer's step inside its own
            assert model.text_encoder(x).dtype == dtype
    with torch.autocast("cpu", dtype=torch.bfloat16):  # a bfloat16 run leaves the part alone
        assert model.text_encoder(x).dtype == torch.bfloat16
    assert model.text_encoder(x).dtype == torch.float32  # no autocast: no change
    install_fp16_fallback(model, "FLOAT_32")  # installed again: only the type changes
    with torch.autocast(**FP16):
        assert model.text_encoder(x).dtype == torch.float32


def test_the_unstable_parts_are_onetrainers_and_load_at_the_fallback_type_when_quantized():
    expected = {ModelType.FLUX_DEV_1: ("text_encoder_2",), ModelType.STABLE_DIFFUSION_3: ("text_encoder_3",),
                ModelType.HI_DREAM_FULL: ("transformer", "text_encoder_3"), ModelType.STABLE_CASCADE_1: ("prior",),
                ModelType.QWEN: ("text_encoder",), ModelType.STABLE_DIFFUSION_XL_10_BASE: ("vae",),
                ModelType.SANA: ("text_encoder", "vae"), ModelType.STABLE_DIFFUSION_15: (), ModelType.WUERSTCHEN_2: ()}
    for model_type, parts in expected.items():
        assert get_family(model_type).fp16_unstable == parts, model_type
    for model_type in ModelType:  # every name is a part of its family
        assert set(get_family(model_type).fp16_unstable) <= set(family_info(model_type).parts), model_type
    flux = get_family(ModelType.FLUX_DEV_1)
    assert load_dtype("text_encoder_2", flux, torch.float16, "BFLOAT_16") == torch.bfloat16
    assert load_dtype("text_encoder_2", flux, torch.float16, "FLOAT_32") == torch.float32
    assert load_dtype("transformer", flux, torch.float16, "FLOAT_32") == torch.float16
    assert load_dtype("text_encoder_2", flux, torch.bfloat16, "FLOAT_32") == torch.bfloat16


def test_only_bfloat16_and_float32_are_fallback_types():
    assert not [e for e in errors(TrainConfig()) if "fallback_train_dtype" in e]
    (line,) = [e for e in errors(TrainConfig(fallback_train_dtype="FLOAT_16")) if "fallback_train_dtype" in e]
    assert "use BFLOAT_16 or FLOAT_32" in line


# the families' own ways into the part: T5 through flow_family's t5_hidden_states (Flux) or PixArt's
# encode_prompt, a Qwen2.5-VL called by the family, Flux.2's Qwen3 through the diffusers pipeline's helper
@pytest.mark.parametrize(("model_type", "tiny"), [(ModelType.FLUX_DEV_1, "flux"), (ModelType.PIXART_ALPHA, "pixart"),
                                                  (ModelType.QWEN, "qwen-image"), (ModelType.FLUX_2, "flux2-klein")])
def test_a_familys_prompt_encoding_runs_its_unstable_part_at_the_fallback_type(model_type, tiny, tiny_dir):
    from ot_gradio.models.common import base_module
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import configure_model

    model = get_family(model_type).load(f"tiny:{tiny}", offline=True)
    config = TrainConfig(model_type=model_type)
    config.text_encoder.train = False  # (Flux.2 trains its transformer only)
    configure_model(model, config, torch.device("cpu"), Precision("FLOAT_32", torch.device("cpu")))
    (part,) = model.fp16_unstable
    seen = []  # what the part's Linear layers compute in
    for layer in base_module(getattr(model, part)).modules():
        if isinstance(layer, nn.Linear):
            layer.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    with torch.no_grad(), torch.autocast(**FP16):
        model.encode_text(["a cat"])
    assert seen and set(seen) == {torch.bfloat16}  # under the fallback's autocast, not the run's float16


@pytest.mark.parametrize(("model_type", "tiny"), [(ModelType.STABLE_DIFFUSION_XL_10_BASE, "sdxl"), (ModelType.SANA, "sana")])
def test_the_vae_encodes_and_decodes_at_the_fallback_type_in_a_float16_step(model_type, tiny, tiny_dir):
    """As OneTrainer's vae_autocast_context: SDXL's and Sana's VAE overflow in float16, and a run
    without latent caching encodes inside the step's float16 autocast. A sample afterwards wraps
    and unwraps the VAE for its own types and leaves the fallback in place."""
    from ot_gradio.models.common import base_module
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import configure_model

    model = get_family(model_type).load(f"tiny:{tiny}", offline=True)
    configure_model(model, TrainConfig(model_type=model_type), torch.device("cpu"), Precision("FLOAT_32", torch.device("cpu")))
    vae = base_module(model.vae)
    seen = []
    for layer in vae.modules():
        if isinstance(layer, nn.Conv2d):
            layer.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    with torch.no_grad(), torch.autocast(**FP16):
        model.decode_latents(model.encode_images(torch.zeros(1, 3, 64, 64)))
    assert len(seen) > 2 and set(seen) == {torch.bfloat16}
    wrapped = vae.decode, vae.encode
    model.sample("a cat", height=32, width=32, steps=1, device="cpu")
    assert (vae.decode, vae.encode) == wrapped

def test_float16_inputs_enter_an_unstable_part_at_the_fallback_type():
    """A float16 run's latents entering a part at the bfloat16 fallback (Stable Cascade's prior with
    float16 weights): autocast refuses to concatenate float16 tensors in a bfloat16 region, so they
    come in at the fallback type; a FLOAT_32 fallback on the CPU (autocast off) leaves them alone."""

    class Prior(nn.Module):
        fp16_unstable = ("prior",)

        def forward(self, x, extra=None):
            return torch.cat([x, extra["t"]], dim=1)

    model = Model()
    model.prior = Prior()
    model.fp16_unstable = ("prior",)
    x = torch.ones(2, 3, dtype=torch.float16)
    install_fp16_fallback(model, "BFLOAT_16")
    with torch.autocast(**FP16):
        assert model.prior(x, extra={"t": x}).dtype == torch.bfloat16
    assert model.prior(x, extra={"t": x}).dtype == torch.float16  # no autocast: no change
    install_fp16_fallback(model, "FLOAT_32")
    with torch.autocast(**FP16):
        assert model.prior(x, extra={"t": x}).dtype == torch.float16


def test_a_float32_fallback_is_a_float32_autocast_on_cuda():
    """OneTrainer's FLOAT_32 fallback on CUDA: an autocast to float32, which casts half-precision
    weights up op by op (autocast off would compute them in float16, where they overflow). No GPU
    here: the float16 autocast is switched on for CUDA by its flag, and the context is read."""
    from ot_gradio.training.fp16_fallback import fallback_autocast

    was = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", torch.float16)
    try:
        with pytest.warns(UserWarning, match="CUDA is not available"):  # (what a CPU-only torch says of any CUDA autocast)
            region = fallback_autocast(torch.float32)
            bf16 = fallback_autocast(torch.bfloat16)
        assert isinstance(region, torch.autocast) and (region.device, region.fast_dtype) == ("cuda", torch.float32)
        assert (bf16.device, bf16.fast_dtype) == ("cuda", torch.bfloat16)
    finally:
        torch.set_autocast_enabled("cuda", was[0])
        torch.set_autocast_dtype("cuda", was[1])
    with torch.autocast(**FP16):
        cpu_off = fallback_autocast(torch.float32)
    assert (cpu_off.device, cpu_off._enabled) == ("cpu", False)


# the families whose text encoding stacks or concatenates an LLM's hidden states: a float16 run with
# their weights in bfloat16 (as a GPU loads them; a CPU loads float32) failed there before the family's
# whole encode_text ran at the fallback type ("Unexpected floating ScalarType in at::autocast::prioritize")
@pytest.mark.parametrize(("model_type", "tiny"), [(ModelType.FLUX_2, "flux2-klein"), (ModelType.KREA_2, "krea2"),
                                                  (ModelType.IDEOGRAM_4, "ideogram4"), (ModelType.LTX_2, "ltx2")])
def test_a_float16_run_encodes_text_with_bfloat16_weights(model_type, tiny, tiny_dir, tmp_path):
    from ot_gradio.data.text_cache import TextEmbeddingCache
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import configure_model

    model = get_family(model_type).load(f"tiny:{tiny}", offline=True)
    config = TrainConfig(model_type=model_type)
    config.text_encoder.train = False
    configure_model(model, config, torch.device("cpu"), Precision("FLOAT_32", torch.device("cpu")))
    for module in model.parts.values():
        module.to(torch.bfloat16)
    cache = TextEmbeddingCache(tmp_path, "fallback-test")
    with torch.no_grad(), torch.autocast(**FP16):
        direct = model.encode_text(["a cat", "a red circle"])
        cached = cache.encode(["a cat", "a red circle"], model.encode_text)
        again = cache.encode(["a red circle", "a cat"], model.encode_text)  # read back from the files
    assert cache.encode_calls == 2 and cache.hits == 2
    for name, value in direct.items():
        if value.is_floating_point():
            assert torch.isfinite(value.float()).all(), name
            torch.testing.assert_close(cached[name], value, msg=name)
            torch.testing.assert_close(again[name].flip(0), value, msg=name)
