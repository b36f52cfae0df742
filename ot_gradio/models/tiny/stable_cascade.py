"""Tiny random Stable Cascade (`tiny:cascade`): prior and decoder folders, the EfficientNet
encoder file, and the prior as the original single file."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ot_gradio.fsutil import atomic_write
from ot_gradio.models.stable_cascade import COMMON_PRIOR, EFFNET_FILE, diffusers_classes, diffusers_to_original
from ot_gradio.models.tiny import TinyModelPaths, register_tiny
from ot_gradio.models.tiny.sd15 import tiny_clip_tokenizer
from ot_gradio.models.tiny.wuerstchen import tiny_effnet, tiny_paella_vq

TINY_CASCADE_VERSION = 1


def tiny_cascade_text_encoder(vocab_size: int, seed: int = 0):
    """A CLIPTextModelWithProjection like Stable Cascade's OpenCLIP bigG, at width 32."""
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    torch.manual_seed(seed)
    return CLIPTextModelWithProjection(CLIPTextConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, projection_dim=32, num_hidden_layers=2,
        num_attention_heads=2, max_position_embeddings=77, hidden_act="gelu",
        bos_token_id=vocab_size - 2, eos_token_id=vocab_size - 1, pad_token_id=vocab_size - 1,
    ))


def tiny_cascade_prior(seed: int = 0):
    torch.manual_seed(seed)
    return diffusers_classes()[0](**{
        **COMMON_PRIOR, "conditioning_dim": 32, "block_out_channels": [32, 32], "num_attention_heads": [2, 2],
        "down_num_layers_per_block": [1, 1], "up_num_layers_per_block": [1, 1], "clip_text_in_channels": 32,
        "clip_text_pooled_in_channels": 32, "clip_image_in_channels": 16, "dropout": [0.0, 0.0],
    })


@register_tiny("cascade", TINY_CASCADE_VERSION)
def save_tiny_cascade(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """`root/prior` (the base model), `root/decoder` (decoder model with `effnet_encoder.safetensors`
    at its top, as stabilityai/stable-cascade) and `root/stage_c.safetensors` (the prior in the
    original single-file layout)."""
    from diffusers import DDPMWuerstchenScheduler
    from safetensors.torch import save_file

    from ot_gradio.fsutil import atomic_write_dir

    root = Path(root)
    paths = TinyModelPaths(root / "prior", root / "stage_c.safetensors")
    if (paths.diffusers_dir / "model_index.json").is_file() and (root / "decoder" / EFFNET_FILE).is_file() and paths.single_file.is_file():
        return paths
    unet_cls, _, prior_pipe_cls, decoder_pipe_cls = diffusers_classes()
    tokenizer = tiny_clip_tokenizer()
    text_encoder = tiny_cascade_text_encoder(len(tokenizer), seed)
    prior = tiny_cascade_prior(seed)
    prior_pipe = prior_pipe_cls(tokenizer=tokenizer, text_encoder=text_encoder, prior=prior, scheduler=DDPMWuerstchenScheduler())
    torch.manual_seed(seed + 1)
    decoder = unet_cls(
        in_channels=4, out_channels=4, timestep_ratio_embedding_dim=64, patch_size=4, conditioning_dim=32,
        block_out_channels=[16, 32], num_attention_heads=[-1, 2], down_num_layers_per_block=[1, 1],
        up_num_layers_per_block=[1, 1], down_blocks_repeat_mappers=[1, 1], up_blocks_repeat_mappers=[2, 2],
        block_types_per_layer=[["SDCascadeResBlock", "SDCascadeTimestepBlock"],
                               ["SDCascadeResBlock", "SDCascadeTimestepBlock", "SDCascadeAttnBlock"]],
        clip_text_pooled_in_channels=32, clip_seq=4, effnet_in_channels=16, pixel_mapper_in_channels=3,
        dropout=[0.0, 0.0], self_attn=True, timestep_conditioning_type=["sca"], switch_level=None,
    )
    # the real decoder upsamples the prior's 24x24 latents 10.67x; 8x keeps the tiny ones divisible
    decoder_pipe = decoder_pipe_cls(
        decoder=decoder, tokenizer=tokenizer, text_encoder=text_encoder, scheduler=DDPMWuerstchenScheduler(),
        vqgan=tiny_paella_vq(seed), latent_dim_scale=8.0,
    )
    effnet = tiny_effnet(seed, affine_batch_norm=False)

    def write_decoder(tmp: Path) -> None:
        decoder_pipe.save_pretrained(tmp, safe_serialization=True)
        save_file({k: v.contiguous() for k, v in effnet.state_dict().items()}, str(tmp / EFFNET_FILE))

    atomic_write_dir(root / "prior", lambda tmp: prior_pipe.save_pretrained(tmp, safe_serialization=True))
    atomic_write_dir(root / "decoder", write_decoder)
    original = {k: v.contiguous() for k, v in diffusers_to_original(prior.state_dict()).items()}
    atomic_write(paths.single_file, lambda tmp: save_file(original, str(tmp)))
    return paths
