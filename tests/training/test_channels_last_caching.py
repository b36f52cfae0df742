"""On CPU the VAE encodes the latent cache in channels-last layout (training/device.py: oneDNN's
convolutions are faster so): every family's VAE gives the same latents that way, or is left as it
is (Qwen-Image's video VAE), and is laid out as loaded afterwards."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.training.device import channels_last_on_cpu

FAMILIES = [
    ("STABLE_DIFFUSION_15", "tiny:sd15"), ("STABLE_DIFFUSION_XL_10_BASE", "tiny:sdxl"), ("PIXART_SIGMA", "tiny:pixart-sigma"),
    ("STABLE_DIFFUSION_3", "tiny:sd3"), ("FLUX_DEV_1", "tiny:flux"), ("QWEN", "tiny:qwen-image"), ("KREA_2", "tiny:krea2"), ("ANIMA", "tiny:anima"),
    ("Z_IMAGE", "tiny:z-image"), ("FLUX_2", "tiny:flux2-klein"), ("SANA", "tiny:sana"),
    ("WAN_2_1", "tiny:wan"),
    ("HUNYUAN_VIDEO", "tiny:hunyuan_video"),
    ("LTX_2", "tiny:ltx2"),
    ("IDEOGRAM_4", "tiny:ideogram4"),
    ("HI_DREAM_FULL", "tiny:hidream"),
    ("ERNIE", "tiny:ernie"),
    ("STABLE_DIFFUSION_20_DEPTH", "tiny:sd2-depth"),
]


def _layout_of(vae) -> list[bool]:
    return [p.is_contiguous() for p in vae.parameters()]


@pytest.mark.parametrize("model_type, base", FAMILIES, ids=[f for f, _ in FAMILIES])
def test_same_latents_and_the_layout_put_back(model_type, base):
    from ot_gradio.models.registry import get_family

    model = get_family(model_type).load(base)
    vae = model.parts["vae"]
    loaded = _layout_of(vae)
    pixels = torch.rand(2, 3, 64, 64) * 2 - 1
    expected = model.encode_images(pixels, sample=False)
    with channels_last_on_cpu(vae, torch.device("cpu")) as layout:
        convs = [m.weight for m in vae.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size != (1, 1)]
        if all(p.dim() <= 4 for p in vae.parameters()):
            assert convs and all(w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous() for w in convs)
        else:
            assert _layout_of(vae) == loaded and layout(pixels) is pixels  # a video VAE: left as it is
        got = model.encode_images(layout(pixels), sample=False)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert _layout_of(vae) == loaded


def test_other_devices_keep_their_layout():
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3))
    with channels_last_on_cpu(conv, torch.device("cuda")) as layout:  # only the device's type is read
        assert conv[0].weight.is_contiguous()
        pixels = torch.rand(1, 3, 8, 8)
        assert layout(pixels) is pixels
