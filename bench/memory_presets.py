"""The memory planner on OneTrainer's presets at full model size, without downloading anything.

    .venv/bin/python bench/memory_presets.py [--preset SUBSTRING ...] [--json FILE]

Each preset is imported unchanged from tests/config/data/onetrainer-training-presets/ (as `train`
imports it); its family's model is built on the meta device from the published config (the
family's diffusers and transformers classes; the parameter counts are checked against the ones
ot_gradio/config/family_info/ gives), and the planner (training/memory_meta.py, the same
probe and sums as memory_plan.py) estimates the run on a card of the size the preset's name
says. Printed: a Markdown table of the estimate (total and its parts) and whether it fits that
card at the planner's margin (90 %). Tokenizers are the tiny ones (the captions' token count
is the config's window either way); nothing is computed, so a preset takes seconds.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PRESETS = ROOT / "tests/config/data/onetrainer-training-presets"
GiB = 1024**3

# (file, card GB: what the name says; the SDXL and Flux.1 presets name none, so the card the
# family's description names: Flux.1's NF4 preset "fits a 16 GB card"; SDXL's LoRA a 24 GB one)
RUNS = [
    ("Flux Dev.1/#flux LoRA.json", 16),
    ("SDXL/#sdxl 1.0 LoRA.json", 24),
    ("QwenImage/#qwen LoRA 16GB.json", 16),
    ("QwenImage/#qwen LoRA 24GB.json", 24),
    ("Z-Image/#z-image LoRA 8GB.json", 8),
    ("Z-Image/#z-image LoRA 16GB.json", 16),
    ("Chroma/#chroma LoRA 8GB.json", 8),
    ("Chroma/#chroma LoRA 16GB.json", 16),
    # fine-tunes: Adafactor with the fused back pass, and trained weights offloaded
    ("Z-Image/#z-image Finetune 16GB.json", 16),
    ("Chroma/#chroma Finetune 16GB.json", 16),
    ("QwenImage/#qwen Finetune 24GB.json", 24),
    # SD 1.5 names no card either: 8 GB, the smallest many of its users train on
    # Flux.2 klein base 9B (Qwen3-8B): INT_W8A8 transformer, FLOAT_8 text encoder, compile on
    ("Flux 2/#flux2 LoRA 8GB.json", 8),
    ("Flux 2/#flux2 LoRA 16GB.json", 16),
    ("SD1.5/#sd 1.5 LoRA.json", 8),
    ("SD1.5/#sd 1.5 embedding.json", 8),
    # our Wan 2.2 TI2V 5B preset (OneTrainer has no Wan): half its clips image-to-video (per-token
    # timesteps: the planner measures that step), and the same run text-to-video only
    ("presets/wan22-ti2v-5b-lora.json", 24),
    ("presets/wan22-ti2v-5b-lora.json", 24, {"image_to_video_share": 0.0}),
    # our Wan 2.1 I2V 14B preset (FLOAT_8 transformer; 16.4B with its image keys and values)
    ("presets/wan21-i2v-14b-lora.json", 24),
    # our LTX-2 preset (FLOAT_8 transformer of 18.9B and Gemma 3 12B): half its clips image-to-video
    ("presets/ltx2-lora.json", 24),
]

CLIP_L = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
              max_position_embeddings=77, hidden_act="quick_gelu", projection_dim=768, vocab_size=49408)
CLIP_BIG_G = dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=20,
                  max_position_embeddings=77, hidden_act="gelu", projection_dim=1280, vocab_size=49408)
T5_XXL = dict(vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
              relative_attention_num_buckets=32, feed_forward_proj="gated-gelu", dropout_rate=0.0)
SD_VAE = dict(in_channels=3, out_channels=3, latent_channels=4, layers_per_block=2, block_out_channels=(128, 256, 512, 512),
              down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4)
FLUX_VAE = {**SD_VAE, "latent_channels": 16, "use_quant_conv": False, "use_post_quant_conv": False,
            "scaling_factor": 0.3611, "shift_factor": 0.1159}


def _clip(spec: dict, projection: bool = False):
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    return (CLIPTextModelWithProjection if projection else CLIPTextModel)(CLIPTextConfig(**spec))


def _t5():
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(**T5_XXL))


def flux() -> dict:
    from diffusers import AutoencoderKL, FluxTransformer2DModel

    # black-forest-labs/FLUX.1-dev: diffusers' defaults with the guidance embedder
    return {"transformer": FluxTransformer2DModel(guidance_embeds=True),
            "text_encoder": _clip(CLIP_L), "text_encoder_2": _t5(), "vae": AutoencoderKL(**FLUX_VAE)}


def chroma() -> dict:
    from diffusers import AutoencoderKL, ChromaTransformer2DModel

    return {"transformer": ChromaTransformer2DModel(), "text_encoder": _t5(),
            "vae": AutoencoderKL(**FLUX_VAE)}


def sd15() -> dict:
    from diffusers import AutoencoderKL, UNet2DConditionModel

    from bench.gpu import SD15_UNET
    return {"unet": UNet2DConditionModel(**SD15_UNET), "text_encoder": _clip(CLIP_L), "vae": AutoencoderKL(**SD_VAE)}


def sdxl() -> dict:
    from diffusers import AutoencoderKL, UNet2DConditionModel

    from bench.gpu import SDXL_UNET
    return {"unet": UNet2DConditionModel(**SDXL_UNET), "text_encoder": _clip(CLIP_L),
            "text_encoder_2": _clip(CLIP_BIG_G, projection=True), "vae": AutoencoderKL(**SD_VAE, scaling_factor=0.13025)}


def qwen_image() -> dict:
    from diffusers import AutoencoderKLQwenImage, QwenImageTransformer2DModel
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    # Qwen/Qwen-Image: the transformer's and VAE's defaults; Qwen2.5-VL 7B Instruct
    text = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                num_key_value_heads=4, max_position_embeddings=128000, rope_theta=1_000_000.0,
                rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]}, tie_word_embeddings=False)
    vision = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31])
    encoder = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False))
    return {"transformer": QwenImageTransformer2DModel(), "text_encoder": encoder,
            "vae": AutoencoderKLQwenImage()}


def z_image() -> dict:
    from diffusers import AutoencoderKL, ZImageTransformer2DModel
    from transformers import Qwen3Config, Qwen3Model

    # Tongyi-MAI/Z-Image: the transformer's defaults; Qwen3-4B as its text encoder
    encoder = Qwen3Model(Qwen3Config(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True))
    return {"transformer": ZImageTransformer2DModel(), "text_encoder": encoder,
            "vae": AutoencoderKL(**FLUX_VAE)}


def flux2_klein_9b() -> dict:
    from diffusers import AutoencoderKLFlux2, Flux2Transformer2DModel
    from transformers import Qwen3Config, Qwen3ForCausalLM

    # black-forest-labs/FLUX.2-klein-base-9B: 8 double and 24 single blocks of 32 x 128, Qwen3-8B's three
    # hidden states (3 x 4096) as its text input, no guidance embedder; Qwen3-8B; the Flux.2 VAE's defaults
    transformer = Flux2Transformer2DModel(num_layers=8, num_single_layers=24, num_attention_heads=32, attention_head_dim=128,
                                          joint_attention_dim=12288, guidance_embeds=False)
    encoder = Qwen3ForCausalLM(Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                                           num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False))
    return {"transformer": transformer, "text_encoder": encoder, "vae": AutoencoderKLFlux2()}


def wan22_ti2v_5b() -> dict:
    from diffusers import AutoencoderKLWan, WanTransformer3DModel

    # Wan-AI/Wan2.2-TI2V-5B-Diffusers: transformer/config.json, google/umt5-xxl's encoder and Wan 2.2's
    # VAE (the config's base width 160, decoder 256, 48 channels, patch 2)
    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=24, attention_head_dim=128, in_channels=48,
                                        out_channels=48, text_dim=4096, freq_dim=256, ffn_dim=14336, num_layers=30, cross_attn_norm=True,
                                        qk_norm="rms_norm_across_heads", eps=1e-6)
    encoder = umt5_xxl()
    vae = AutoencoderKLWan(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                           temperal_downsample=[False, True, True], is_residual=True, in_channels=12, out_channels=12, patch_size=2,
                           scale_factor_spatial=16, latents_mean=[0.0] * 48, latents_std=[1.0] * 48)
    return {"transformer": transformer, "text_encoder": encoder, "vae": vae}


def wan21_i2v_14b() -> dict:
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    # Wan-AI/Wan2.1-I2V-14B-480P-Diffusers: transformer/config.json (36 channels in, image_dim 1280, each
    # block's image keys and values), the same UMT5-XXL, Wan 2.1's VAE (its defaults) and CLIP ViT-H/14's vision tower
    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=40, attention_head_dim=128, in_channels=36,
                                        out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=13824, num_layers=40, cross_attn_norm=True,
                                        qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=1280, added_kv_proj_dim=5120, rope_max_seq_len=1024)
    encoder = CLIPVisionModel(CLIPVisionConfig(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=16,
                                               patch_size=14, image_size=224, hidden_act="gelu", layer_norm_eps=1e-5, projection_dim=1024))
    return {"transformer": transformer, "text_encoder": umt5_xxl(), "vae": AutoencoderKLWan(), "image_encoder": encoder,
            "image_processor": CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224}, resample=3)}


def ltx2() -> dict:
    import torch
    from diffusers import AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, LTX2VideoTransformer3DModel
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    # Lightricks/LTX-2: the transformer's, connectors' and VAEs' defaults (the 2.0 model), Gemma 3 12B
    # (text: 48 layers of 3840, 16 heads, 8 key/value heads of 256; SigLIP's vision tower)
    text = dict(vocab_size=262208, hidden_size=3840, intermediate_size=15360, num_hidden_layers=48, num_attention_heads=16,
                num_key_value_heads=8, head_dim=256)
    vision = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16, image_size=896, patch_size=14)
    gemma = Gemma3ForConditionalGeneration(Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=256))
    # the connectors load in the text encoder's compute type (models/ltx2.py), bfloat16 for a FLOAT_8 one
    return {"transformer": LTX2VideoTransformer3DModel(), "text_encoder": gemma, "connectors": LTX2TextConnectors().to(torch.bfloat16),
            "vae": AutoencoderKLLTX2Video(), "audio_vae": AutoencoderKLLTX2Audio(), "vocoder": LTX2Vocoder()}


def umt5_xxl():
    from transformers import UMT5Config, UMT5EncoderModel

    return UMT5EncoderModel(UMT5Config(vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
                                       relative_attention_num_buckets=32, feed_forward_proj="gated-gelu", dropout_rate=0.0))


BUILDERS = {"FLUX_2": flux2_klein_9b, "FLUX_DEV_1": flux, "CHROMA_1": chroma, "STABLE_DIFFUSION_15": sd15, "STABLE_DIFFUSION_XL_10_BASE": sdxl, "QWEN": qwen_image, "Z_IMAGE": z_image,
            "WAN_2_2_TI2V_5B": wan22_ti2v_5b, "WAN_2_1_I2V": wan21_i2v_14b, "LTX_2": ltx2}
# the tiny model's tokenizers and scheduler (built on the CPU; its modules are replaced)
TINY = {"FLUX_2": ("flux2", "klein"), "FLUX_DEV_1": "flux", "CHROMA_1": "chroma", "STABLE_DIFFUSION_15": "sd15", "STABLE_DIFFUSION_XL_10_BASE": "sdxl", "QWEN": "qwen_image", "Z_IMAGE": "z_image",
        "WAN_2_2_TI2V_5B": ("wan", 0, "2.2"), "WAN_2_1_I2V": "wan", "LTX_2": "ltx2"}


def build_on_meta(model_type: str):
    """The family's model at full size on the meta device (float32), and {part: (built, published) parameters}."""
    import importlib

    import torch

    from ot_gradio.config.families import family_info
    from ot_gradio.models.registry import get_family

    name, *args = (TINY[model_type],) if isinstance(TINY[model_type], str) else TINY[model_type]
    components = getattr(importlib.import_module(f"ot_gradio.models.tiny.{name}"), f"tiny_{name}_components")(*args)
    with torch.device("meta"):
        components.update(BUILDERS[model_type]())
    family = get_family(model_type)  # the SD families take the parts as keywords, the flow families a mapping
    model = family(**components) if model_type.startswith("STABLE_DIFFUSION") else family(components)
    # FLUX_2's family counts are Flux.2 dev's; the klein 9B presets are checked against the VAE's alone
    published = {"vae": family_info(model_type).params["vae"]} if model_type == "FLUX_2" else family_info(model_type).params
    counts = {part: (sum(p.numel() for p in module.parameters()), published.get(part)) for part, module in model.parts.items()}
    return model, counts


def run(relative: str, card_gb: int, changes: dict | None = None) -> dict:
    """`relative`: a file of OneTrainer's presets, or one of ours (presets/...); `changes`: set after the import."""
    from ot_gradio.config.io import load_config
    from ot_gradio.training.memory_meta import estimate_on_meta

    path = ROOT / relative if relative.startswith("presets/") else PRESETS / relative
    loaded = load_config(path)
    config = loaded.config.model_copy(update=changes or {})
    model, counts = build_on_meta(config.model_type)
    start = time.perf_counter()
    plan, on = estimate_on_meta(model, config, card_gb * GiB)
    part = lambda name: getattr(config, name)  # noqa: E731
    return {
        "preset": path.stem + "".join(f" ({k} {v})" for k, v in (changes or {}).items()), "card_gb": card_gb, "checkpointing": on, "seconds": round(time.perf_counter() - start, 1),
        "peak": plan.peak(on), "weights": plan.weight_bytes, "offloaded": plan.offloaded, "gradients": plan.gradients,
        "optimizer": plan.optimizer_state, "activations": plan.activations(on), "fits": plan.fits(on),
        "breakdown": plan.breakdown(on), "probe_error": plan.probe_error, "parked": plan.parked,
        "settings": f"{config.resolution} px, batch {config.batch_size}, " + ", ".join(
            f"{p} {part(p).weight_dtype.value}" + (f" offload {part(p).offload_fraction:g}" if part(p).offload_fraction else "")
            for p in (model.denoiser, *model.text_encoder_names) if p in model.parts),
        "params": {p: list(c) for p, c in counts.items()},
    }


def gb(n: int | None) -> str:
    return "-" if n is None else f"{n / GiB:.1f}"


def table(rows: list[dict]) -> str:
    lines = ["| preset | settings as imported | card | estimate (GiB) | weights on the card | offloaded to RAM | gradients | "
             "optimizer state | activations | in RAM while the steps run | fits at 90 % |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fits = "not measured: " + r["probe_error"] if r["peak"] is None else ("yes" if r["fits"] else "**no**")
        lines.append(f"| {r['preset']} | {r['settings']}, checkpointing {'on' if r['checkpointing'] else 'off'} | {r['card_gb']} GB "
                     f"| {gb(r['peak'])} | {gb(r['weights'])} | {gb(r['offloaded'])} | {gb(r['gradients'])} | "
                     f"{gb(r['optimizer'])} | {gb(r['activations'])} | {', '.join(r['parked']) or '-'} | {fits} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", nargs="*", default=[], help="only presets whose file name contains one of these")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a top-level option over every preset's own, e.g. temp_device=cuda")
    args = parser.parse_args()
    from bench.gpu_check import parse_set

    overrides = parse_set(args.set)
    if any(isinstance(value, dict) for value in overrides.values()):
        parser.error("--set: top-level options only (temp_device=cuda), not a section's")
    rows = []
    for relative, card, *changes in RUNS:
        if args.preset and not any(re.search(re.escape(s), relative, re.I) for s in args.preset):
            continue
        row = run(relative, card, {**(changes[0] if changes else {}), **overrides} or None)
        for part, (built, published) in row["params"].items():
            if published and abs(built - published) > 0.01 * published:
                print(f"warning: {row['preset']}: {part} built with {built:,} parameters, published {published:,}", file=sys.stderr)
        print(f"{row['preset']}: {row['breakdown']} ({row['seconds']} s)", file=sys.stderr)
        rows.append(row)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
