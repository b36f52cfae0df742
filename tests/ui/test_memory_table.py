"""The Model tab's memory table: parameter counts for every family the trainer aims at."""

import pytest

from ot_gradio.config.families import FAMILIES
from ot_gradio.ui.training_tab import PARAMS, memory_markdown


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_every_family_has_a_count_per_part(model_type):
    assert set(PARAMS[model_type.value]) == set(FAMILIES[model_type].parts)


def test_counts_match_the_published_sizes():
    # the reference page's fp32 sizes: SD 1.5 UNet 3.44 GB, SD 2 text encoder 1.36 GB,
    # SDXL UNet 10.3 GB and second text encoder 2.78 GB, Stable Cascade stage C 14.4 GB
    gb = {m: {p: n * 4 / 1e9 for p, n in parts.items()} for m, parts in PARAMS.items()}
    assert gb["STABLE_DIFFUSION_15"]["unet"] == pytest.approx(3.44, abs=0.01)
    assert gb["STABLE_DIFFUSION_21"]["text_encoder"] == pytest.approx(1.36, abs=0.01)
    assert gb["STABLE_DIFFUSION_XL_10_BASE"]["unet"] == pytest.approx(10.3, abs=0.05)
    assert gb["STABLE_DIFFUSION_XL_10_BASE"]["text_encoder_2"] == pytest.approx(2.78, abs=0.01)
    assert gb["STABLE_CASCADE_1"]["prior"] == pytest.approx(14.4, abs=0.1)
    assert PARAMS["PIXART_ALPHA"]["transformer"] == pytest.approx(611e6, rel=0.01)


def test_table_follows_the_weight_dtypes():
    config = {"model_type": "STABLE_DIFFUSION_XL_10_BASE", "unet": {"weight_dtype": "FLOAT_16"}}
    table = memory_markdown(config)
    assert "| unet | 2,567 M | FLOAT_16 | 4.78 GB |" in table
    assert "| text_encoder_2 | 695 M | FLOAT_32 | 2.59 GB |" in table
    assert "No parameter counts" in memory_markdown({"model_type": "NOT_A_MODEL"})
    for eight_bit in ("FLOAT_8", "INT_W8A8", "FLOAT_W8A8"):  # one byte per weight
        assert f"| unet | 2,567 M | {eight_bit} | 2.39 GB |" in memory_markdown({**config, "unet": {"weight_dtype": eight_bit}})


def test_frozen_modules_beside_the_parts_are_counted_where_they_wait():
    """LTX-2's text connectors (1.43 B, in Gemma's type, on the device) were missing from the
    table; Wan 2.2 A14B's other expert and Ideogram 4's unconditional transformer wait in RAM."""
    ltx2 = memory_markdown({"model_type": "LTX_2", "train_dtype": "BFLOAT_16", "text_encoder": {"weight_dtype": "FLOAT_8"},
                            "transformer": {"weight_dtype": "FLOAT_8"}, "vae": {"weight_dtype": "BFLOAT_16"}})
    assert "| connectors (frozen, with text_encoder) | 1,431 M | BFLOAT_16 | 2.67 GB |" in ltx2  # not quantized with Gemma
    assert "**33.89 GB**" in ltx2 and "in RAM" not in ltx2
    a14b = memory_markdown({"model_type": "WAN_2_2_T2V_A14B", "train_dtype": "BFLOAT_16", "transformer": {"weight_dtype": "BFLOAT_16"},
                            "text_encoder": {"weight_dtype": "BFLOAT_16"}, "vae": {"weight_dtype": "FLOAT_32"}})
    assert "| other expert (waits in RAM) | 14,288 M | BFLOAT_16 | 26.61 GB |" in a14b
    assert "+ 26.61 GB in RAM" in a14b
    assert "unconditional_transformer (waits in RAM)" in memory_markdown({"model_type": "IDEOGRAM_4"})
    left_out = memory_markdown({"model_type": "IDEOGRAM_4", "unconditional_transformer": {"include": False}})  # not loaded
    assert "| unconditional_transformer | 9,279 M | left out (Include off) | 0.00 GB |" in left_out and "in RAM" not in left_out
    depth = memory_markdown({"model_type": "STABLE_DIFFUSION_20_DEPTH", "vae": {"weight_dtype": "FLOAT_32"}})
    assert "| depth_estimator (waits in RAM) | 122 M | FLOAT_32 | 0.46 GB |" in depth and "+ 0.46 GB in RAM" in depth  # SD 2 depth's DPT


@pytest.mark.parametrize(("model_type", "base", "family"), [
    ("STABLE_DIFFUSION_15", "tiny:flux", "Flux.1"),
    ("STABLE_DIFFUSION_15", "black-forest-labs/FLUX.1-dev", "Flux.1"),
    ("FLUX_DEV_1", "/models/sd_xl_base_1.0.safetensors", "Stable Diffusion XL"),
    ("QWEN", "folder", "Stable Diffusion 3"),  # a diffusers folder: its model_index.json
    ("FLUX_DEV_1", "black-forest-labs/FLUX.1-dev", None),
    ("PIXART_SIGMA", "PixArt-alpha/PixArt-Sigma-XL-2-1024-MS", None),
    ("STABLE_DIFFUSION_21", "tiny:sd15", None),  # SD 1.5 and 2.x share a pipeline: not told apart
    ("STABLE_DIFFUSION_XL_10_BASE", "/models/juggernaut_v9.safetensors", None),  # a name that says nothing
    ("STABLE_DIFFUSION_3", "folder", None),
    ("QWEN", "modular folder", "Anima"),  # a modular pipeline's folder: its modular_model_index.json
    ("ANIMA", "modular folder", None),
    ("WAN_2_2_T2V_A14B", "Wan-AI/Wan2.2-Animate-14B", None),  # "anima" inside another word is no sign of Anima
    # text- and image-to-video Wan are told apart before tens of GB download and the loader refuses them
    ("WAN_2_2_T2V_A14B", "Wan-AI/Wan2.2-I2V-A14B-Diffusers", "Wan 2.2 image-to-video"),
    ("WAN_2_2_I2V_A14B", "Wan-AI/Wan2.2-T2V-A14B-Diffusers", "Wan text-to-video"),
    ("WAN_2_2_I2V_A14B", "i2v folder", None),
    ("WAN_2_1", "i2v folder", "Wan 2.1 image-to-video or Wan 2.2 image-to-video"),  # one pipeline class: either I2V type
    ("WAN_2_1_I2V", "i2v folder", None),
    ("WAN_2_2_I2V_A14B", "Wan-AI/Wan2.2-I2V-A14B-Diffusers", None),
    ("WAN_2_1", "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers", "Wan 2.1 image-to-video"),
    ("WAN_2_2_I2V_A14B", "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers", "Wan 2.1 image-to-video"),
    ("WAN_2_1_I2V", "/models/wan2.2_i2v_high_noise_14B_fp16.safetensors", "Wan 2.2 image-to-video"),
    ("WAN_2_1_I2V", "/models/wan2.1_i2v_480p_14B_bf16.safetensors", None),
])
def test_a_base_model_of_another_family_is_named_above_the_table(tmp_path, model_type, base, family):
    if base == "folder":
        base = str(tmp_path / "my-model")
        (tmp_path / "my-model").mkdir()
        (tmp_path / "my-model" / "model_index.json").write_text('{"_class_name": "StableDiffusion3Pipeline"}')
    if base == "modular folder":
        base = str(tmp_path / "anima")
        (tmp_path / "anima").mkdir()
        (tmp_path / "anima" / "modular_model_index.json").write_text('{"_class_name": "AnimaModularPipeline"}')
    if base == "i2v folder":
        base = str(tmp_path / "i2v")
        (tmp_path / "i2v").mkdir()
        (tmp_path / "i2v" / "model_index.json").write_text('{"_class_name": "WanImageToVideoPipeline"}')
    text = memory_markdown({"model_type": model_type, "base_model_name": base})
    assert ("looks like" in text) == (family is not None), text
    if family:
        assert f"looks like {family}" in text and model_type in text.split("\n")[0]
    assert "| **total** |" in text


def test_a_gguf_transformer_counts_its_files_bytes(tmp_path):
    gguf = tmp_path / "z.gguf"
    with gguf.open("wb") as f:
        f.truncate(3 * 1024**3)  # sparse: its size without the bytes
    table = memory_markdown({"model_type": "Z_IMAGE", "transformer": {"weight_dtype": "GGUF", "model_name": str(gguf)}})
    assert "| transformer | 6,155 M | GGUF | 3.00 GB |" in table
    table = memory_markdown({"model_type": "Z_IMAGE", "transformer": {"weight_dtype": "GGUF", "model_name": "elsewhere.gguf"}})
    assert "| transformer | 6,155 M | GGUF | the .gguf file's size (give a local transformer file) |" in table


def test_the_step_estimate_counts_training_images_not_their_companion_files(tmp_path):
    """An editing model's `-control` and a depth model's `-depth` images go with a training image;
    the Training tab's steps per epoch counted them as images of their own."""
    from PIL import Image

    from ot_gradio.ui.training_tab import steps_per_epoch

    for name in ("a.png", "a-control.png", "b.png", "b-control.jpg", "c.png", "c-depth.png", "c-masklabel.png"):
        Image.new("RGB", (8, 8)).save(tmp_path / name)
    config = {"concepts": [{"path": str(tmp_path)}], "batch_size": 1}
    assert steps_per_epoch({**config, "model_type": "QWEN_IMAGE_EDIT"}) == 4  # a, b, c, c-depth
    assert steps_per_epoch({**config, "model_type": "STABLE_DIFFUSION_20_DEPTH"}) == 5  # a, a-control, b, b-control, c
    assert steps_per_epoch({**config, "model_type": "STABLE_DIFFUSION_15"}) == 6  # every image but the mask
    (tmp_path / "clip.mp4").write_bytes(b"x")
    (tmp_path / "clip.mkv").write_bytes(b"x")
    assert steps_per_epoch({**config, "model_type": "WAN_2_1"}) == 8  # a video model's clips are items too
    assert steps_per_epoch({**config, "model_type": "STABLE_DIFFUSION_15"}) == 6
