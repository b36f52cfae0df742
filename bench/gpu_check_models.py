"""Full-size models with random weights for bench/gpu_check.py, built from the published configs.

Nothing is downloaded: each part is built from the layout its model repo publishes (the config
values are written out below), with random weights, on the device given (a GPU builds a 12 B
transformer in seconds) in 16-bit, and saved as a diffusers folder that the trainer then loads
through its real loading code. The tokenizers are the tiny ones of `ot_gradio.models.tiny`, built
in memory: a tokenizer's vocabulary does not change a step's cost, only its ids must fit the
text encoder's embedding table (they do: a few hundred ids).

- SD 1.5 / SDXL: bench/gpu.py's builders (its published UNet, VAE and CLIP layouts).
- Flux.1 dev: FluxTransformer2DModel (19 double + 38 single blocks, 3072 wide, guidance
  embedding), T5 v1.1 XXL encoder (24 layers, 4096 wide), CLIP ViT-L, the 16-channel Flux VAE.
- Z-Image: ZImageTransformer2DModel (30 layers, 3840 wide: diffusers' defaults are the published
  config), Qwen3-4B as the text encoder, the Flux VAE.

`shallow`: the same models with two blocks of each kind (SHALLOW below) at full width: every layer
shape, and so every kernel and quantization path, of the full model, built, saved and quantized
in a fraction of the time (a first look on a GPU, or a failure's traceback; step times and peaks
are not the full model's). SD 1.5 and SDXL build in seconds and stay whole.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

FLUX_TRANSFORMER = dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
                        num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
                        axes_dims_rope=(16, 56, 56))
T5_XXL = dict(vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64, relative_attention_num_buckets=32,
              relative_attention_max_distance=128, feed_forward_proj="gated-gelu", dropout_rate=0.0, layer_norm_epsilon=1e-6,
              pad_token_id=0, eos_token_id=1, tie_word_embeddings=False)
CLIP_L = dict(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
              max_position_embeddings=77, hidden_act="quick_gelu", projection_dim=768, pad_token_id=1, bos_token_id=0, eos_token_id=2)
FLUX_VAE = dict(in_channels=3, out_channels=3, latent_channels=16, block_out_channels=(128, 256, 512, 512), layers_per_block=2,
                down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4, sample_size=1024,
                scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False)
FLUX_SCHEDULER = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                      base_image_seq_len=256, max_image_seq_len=4096)
Z_IMAGE_TRANSFORMER: dict[str, Any] = {}  # diffusers' ZImageTransformer2DModel defaults are Z-Image's published config
QWEN3_4B = dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                tie_word_embeddings=True)

# gpu_check --shallow: the transformers' and text encoders' depths (the widths stay the published ones)
SHALLOW = {"flux": 2, "t5": 2, "z-image": 2, "qwen3": 2}


@contextlib.contextmanager
def building_on(device: str, dtype_name: str) -> Iterator[None]:
    """Modules made inside are made on `device` in `dtype_name` (float16/bfloat16): no float32
    copy on the CPU first."""
    import torch

    dtype = getattr(torch, dtype_name)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous)


def flux_pipeline(shallow: bool = False):
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    from ot_gradio.models.tiny.pixart import tiny_t5_tokenizer
    from ot_gradio.models.tiny.sd15 import tiny_clip_tokenizer

    transformer = {**FLUX_TRANSFORMER, **({"num_layers": SHALLOW["flux"], "num_single_layers": SHALLOW["flux"]} if shallow else {})}
    t5 = {**T5_XXL, **({"num_layers": SHALLOW["t5"]} if shallow else {})}
    return FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**FLUX_SCHEDULER), vae=AutoencoderKL(**FLUX_VAE),
        text_encoder=CLIPTextModel(CLIPTextConfig(**CLIP_L)), tokenizer=tiny_clip_tokenizer(),
        text_encoder_2=T5EncoderModel(T5Config(**t5)), tokenizer_2=tiny_t5_tokenizer(model_max_length=512),
        transformer=FluxTransformer2DModel(**transformer),
    )


def z_image_pipeline(shallow: bool = False):
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImagePipeline, ZImageTransformer2DModel
    from transformers import Qwen3Config, Qwen3Model

    from ot_gradio.models.tiny.z_image import tiny_qwen_tokenizer

    tokenizer = tiny_qwen_tokenizer()
    transformer = {**Z_IMAGE_TRANSFORMER, **({"n_layers": SHALLOW["z-image"]} if shallow else {})}
    qwen = {**QWEN3_4B, **({"num_hidden_layers": SHALLOW["qwen3"]} if shallow else {})}
    return ZImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=False),
        vae=AutoencoderKL(**FLUX_VAE), text_encoder=Qwen3Model(Qwen3Config(**qwen, pad_token_id=tokenizer.pad_token_id)),
        tokenizer=tokenizer, transformer=ZImageTransformer2DModel(**transformer),
    )


def sd_pipeline(family: str) -> Callable[..., Any]:
    def build(shallow: bool = False):  # (built whole: seconds)
        from bench.gpu import build_pipeline

        return build_pipeline(family)

    return build


# model name in gpu_check's runs -> (builder, dtype it is saved in)
BUILDERS: dict[str, tuple[Callable[..., Any], str]] = {
    "sd15": (sd_pipeline("sd15"), "float16"),
    "sdxl": (sd_pipeline("sdxl"), "float16"),
    "flux": (flux_pipeline, "bfloat16"),
    "z-image": (z_image_pipeline, "bfloat16"),
}


def tiny_pipeline(name: str) -> Callable[[], Any]:
    """The tiny model of `name` (ot_gradio.models.tiny's builders), for `--tiny`: it goes through
    the same building, saving and loading as the full-size one."""

    def build():
        import diffusers

        from ot_gradio.models.tiny.flux import tiny_flux_components
        from ot_gradio.models.tiny.sd15 import tiny_sd15_pipeline
        from ot_gradio.models.tiny.sdxl import tiny_sdxl_pipeline
        from ot_gradio.models.tiny.z_image import tiny_z_image_components

        return {
            "sd15": tiny_sd15_pipeline, "sdxl": tiny_sdxl_pipeline,
            "flux": lambda: diffusers.FluxPipeline(**tiny_flux_components()),
            "z-image": lambda: diffusers.ZImagePipeline(**tiny_z_image_components()),
        }[name]()

    return build


def model_folder(root: Path, name: str, tiny: bool, shallow: bool = False) -> Path:
    return Path(root) / f"{name}-{'tiny' if tiny else 'shallow' if shallow and name in SHALLOW else 'full'}"


def full_size_model(name: str, root: Path, device: str, tiny: bool = False, shallow: bool = False) -> Path:
    """The diffusers folder of model `name` under `root`, built (on `device`) and saved once;
    with `tiny` the tiny model of the family, in float32; with `shallow` two blocks of each kind
    (SHALLOW)."""
    import torch

    from ot_gradio.fsutil import atomic_write_dir

    folder = model_folder(root, name, tiny, shallow)
    if (folder / "model_index.json").is_file():
        return folder
    builder, dtype = (tiny_pipeline(name), "float32") if tiny else BUILDERS[name]
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with building_on(device, dtype):
        pipes = [builder() if tiny else builder(shallow=shallow)]
    built = time.perf_counter() - t0
    atomic_write_dir(folder, lambda tmp: pipes[0].save_pretrained(tmp, safe_serialization=True))
    pipes.clear()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    print(f"{name}: built the {folder.name.rsplit('-', 1)[1]} random model in {built:.0f} s, saved in {time.perf_counter() - t0 - built:.0f} s "
          f"({sum(f.stat().st_size for f in folder.rglob('*') if f.is_file()) / 1e9:.1f} GB)", flush=True)
    return folder
