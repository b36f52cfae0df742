"""Tiny random LTX-2 (`tiny:ltx2`): the real classes at a fraction of the width, built in memory
in well under a second and saved in the diffusers layout of Lightricks/LTX-2 (model_index.json
names LTX2Pipeline, Gemma3ForConditionalGeneration, GemmaTokenizerFast, LTX2TextConnectors,
AutoencoderKLLTX2Video, AutoencoderKLLTX2Audio, LTX2Vocoder, LTX2VideoTransformer3DModel and
FlowMatchEulerDiscreteScheduler), so tests go through the real loading code.

- Text encoder: a 2-layer Gemma 3 (Gemma3ForConditionalGeneration with a 1-layer vision tower
  the text path never runs) with the in-memory Gemma tokenizer of tiny/sana.py.
- Connectors: LTX2TextConnectors over the Gemma's 3 stacked hidden states, 1 layer of 4 heads x 8
  per stream (the width of the Gemma, as the real ones).
- Transformer: LTX2VideoTransformer3DModel, 2 blocks; video 2 heads x 8, audio 2 heads x 4.
- VAE: AutoencoderKLLTX2Video with one spatial down stage (2x per side, 2x in time here: the
  real one is 32x and 8x; the family reads the ratios from the VAE) and 4 latent channels, with
  latents_mean / latents_std set away from 0 / 1 so the normalisation is tested.
- Audio VAE and vocoder: the smallest the pipeline accepts; samples discard the audio.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny
from ot_gradio.models.tiny.flux import visible_output
from ot_gradio.models.tiny.sana import tiny_gemma_tokenizer

TINY_LTX2_VERSION = 1
GEMMA_WIDTH = 32
GEMMA_LAYERS = 2


def tiny_gemma3_encoder(tokenizer, seed: int = 0):
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    text = {"vocab_size": len(tokenizer), "hidden_size": GEMMA_WIDTH, "intermediate_size": 64, "num_hidden_layers": GEMMA_LAYERS,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 2048,
            "pad_token_id": tokenizer.pad_token_id, "bos_token_id": 2, "eos_token_id": 1, "sliding_window": 512}
    vision = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
              "image_size": 28, "patch_size": 14}
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, boi_token_index=len(tokenizer) - 3,
                          eoi_token_index=len(tokenizer) - 2, image_token_index=len(tokenizer) - 1)
    torch.manual_seed(seed)
    return Gemma3ForConditionalGeneration(config).eval()


def tiny_ltx2_components(seed: int = 0) -> dict:
    from diffusers import AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, FlowMatchEulerDiscreteScheduler, LTX2VideoTransformer3DModel
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    tokenizer = tiny_gemma_tokenizer(1024)
    tokenizer.padding_side = "left"
    text_encoder = tiny_gemma3_encoder(tokenizer, seed)
    torch.manual_seed(seed)
    transformer = LTX2VideoTransformer3DModel(
        in_channels=4, out_channels=4, patch_size=1, patch_size_t=1, num_attention_heads=2, attention_head_dim=8,
        cross_attention_dim=16, audio_in_channels=4, audio_out_channels=4, audio_num_attention_heads=2, audio_attention_head_dim=4,
        audio_cross_attention_dim=8, num_layers=2, qk_norm="rms_norm_across_heads", caption_channels=GEMMA_WIDTH,
        vae_scale_factors=(2, 2, 2), rope_double_precision=False, rope_type="split",
    )
    visible_output(transformer.proj_out)
    torch.manual_seed(seed)
    connectors = LTX2TextConnectors(
        caption_channels=GEMMA_WIDTH, text_proj_in_factor=GEMMA_LAYERS + 1, video_connector_num_attention_heads=4,
        video_connector_attention_head_dim=8, video_connector_num_layers=1, video_connector_num_learnable_registers=None,
        audio_connector_num_attention_heads=4, audio_connector_attention_head_dim=8, audio_connector_num_layers=1,
        audio_connector_num_learnable_registers=None, connector_rope_base_seq_len=32, rope_double_precision=False, rope_type="split",
    )
    torch.manual_seed(seed)
    vae = AutoencoderKLLTX2Video(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8,), decoder_block_out_channels=(8,),
        layers_per_block=(1,), decoder_layers_per_block=(1, 1), spatio_temporal_scaling=(True,),
        decoder_spatio_temporal_scaling=(True,), decoder_inject_noise=(False, False), downsample_type=("spatiotemporal",),
        upsample_residual=(False,), upsample_factor=(1,), timestep_conditioning=False, patch_size=1, patch_size_t=1,
        encoder_causal=True, decoder_causal=False,
    )
    with torch.no_grad():
        vae.latents_mean.copy_(torch.tensor([0.1, -0.2, 0.05, 0.3]))
        vae.latents_std.copy_(torch.tensor([0.8, 1.3, 0.9, 1.1]))
    torch.manual_seed(seed)
    audio_vae = AutoencoderKLLTX2Audio(
        base_channels=4, output_channels=2, ch_mult=(1,), num_res_blocks=1, attn_resolutions=None, in_channels=2, resolution=32,
        latent_channels=2, norm_type="pixel", causality_axis="height", dropout=0.0, mid_block_add_attention=False,
        sample_rate=16000, mel_hop_length=160, is_causal=True, mel_bins=8,
    )
    torch.manual_seed(seed)
    vocoder = LTX2Vocoder(in_channels=4 * 2 * 2, hidden_channels=8, out_channels=2, upsample_kernel_sizes=[4], upsample_factors=[2],
                          resnet_kernel_sizes=[3], resnet_dilations=[[1]], leaky_relu_negative_slope=0.1, output_sampling_rate=16000)
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True, base_shift=0.95,
                                                max_shift=2.05, base_image_seq_len=1024, max_image_seq_len=4096,
                                                shift_terminal=0.1, time_shift_type="exponential")
    return {"tokenizer": tokenizer, "text_encoder": text_encoder, "connectors": connectors, "transformer": transformer, "vae": vae,
            "audio_vae": audio_vae, "vocoder": vocoder, "scheduler": scheduler}


def _hub_model_index(folder: Path) -> None:
    """model_index.json as the hub repo has it (the tokenizer class is GemmaTokenizerFast there)."""
    path = folder / "model_index.json"
    index = json.loads(path.read_text())
    index["tokenizer"] = ["transformers", "GemmaTokenizerFast"]
    for optional in ("processor", "prompt_enhancer", "duration_head"):
        index.pop(optional, None)
    path.write_text(json.dumps(index, indent=2))


@register_tiny("ltx2", TINY_LTX2_VERSION)
def save_tiny_ltx2(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny LTX-2 as a diffusers folder (no single file: LTX-2 loads from folders here)."""
    from diffusers import LTX2Pipeline

    return save_tiny(root, "no-single-file", lambda: LTX2Pipeline(**tiny_ltx2_components(seed)), finish_folder=_hub_model_index)
