"""Tiny random Würstchen v2 (`tiny:wuerstchen2`): prior, decoder and EfficientNet folders, and the
tiny EfficientNet encoder and Paella VQGAN that tiny Stable Cascade shares."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny
from ot_gradio.models.tiny.sd15 import tiny_clip_text_model, tiny_clip_tokenizer
from ot_gradio.models.wuerstchen import diffusers_classes

TINY_WUERSTCHEN_VERSION = 1
TINY_EFFNET = {"c_latent": 16, "c_cond": 32, "widths": [8, 8, 8, 16, 16, 16, 32], "depths": [1, 1, 1, 1, 1, 1]}


def tiny_effnet(seed: int = 0, affine_batch_norm: bool = True):
    """An EfficientNetV2-S-shaped encoder at width 8-32 whose batch norms have non-trivial statistics."""
    from ot_gradio.models.effnet import EfficientNetEncoder

    torch.manual_seed(seed)
    encoder = EfficientNetEncoder(**TINY_EFFNET, affine_batch_norm=affine_batch_norm)
    with torch.no_grad():
        for module in encoder.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    return encoder.eval()


def tiny_paella_vq(seed: int = 0):
    from diffusers.pipelines.deprecated.wuerstchen import PaellaVQModel

    torch.manual_seed(seed)
    return PaellaVQModel(bottleneck_blocks=1, embed_dim=16, latent_channels=4, num_vq_embeddings=16).eval()


@register_tiny("wuerstchen2", TINY_WUERSTCHEN_VERSION)
def save_tiny_wuerstchen2(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """`root/prior` (the base model), `root/decoder` (decoder model) and `root/effnet` (EffNet
    folder, as warp-ai/EfficientNetEncoder): each a complete diffusers layout, written atomically."""
    from diffusers import DDPMWuerstchenScheduler

    from ot_gradio.fsutil import atomic_write_dir

    root = Path(root)
    paths = TinyModelPaths(root / "prior", root / "effnet" / "diffusion_pytorch_model.safetensors")
    done = [root / "prior" / "model_index.json", root / "decoder" / "model_index.json", root / "effnet" / "config.json"]
    if all(p.is_file() for p in done):
        return paths
    prior_cls, decoder_cls, _, prior_pipe_cls, decoder_pipe_cls = diffusers_classes()
    tokenizer = tiny_clip_tokenizer()
    torch.manual_seed(seed)
    prior = prior_cls(c_in=16, c=32, c_cond=32, c_r=64, depth=2, nhead=2, dropout=0.0)
    prior_pipe = prior_pipe_cls(
        tokenizer=tokenizer,
        text_encoder=tiny_clip_text_model(len(tokenizer), seed=seed, hidden_act="gelu"),
        prior=prior,
        scheduler=DDPMWuerstchenScheduler(),
    )
    torch.manual_seed(seed + 1)
    decoder = decoder_cls(
        c_in=4, c_out=4, c_r=64, patch_size=2, c_cond=32, c_hidden=[16, 32], nhead=[-1, 2], blocks=[1, 1],
        level_config=["CT", "CTA"], inject_effnet=[False, True], effnet_embd=16, clip_embd=32, dropout=0.0,
    )
    # the real decoder upsamples the prior's 24x24 latents 10.67x; 8x keeps the tiny ones divisible
    decoder_pipe = decoder_pipe_cls(
        tokenizer=tokenizer,
        text_encoder=tiny_clip_text_model(len(tokenizer), seed=seed + 2, hidden_act="gelu"),
        decoder=decoder,
        scheduler=DDPMWuerstchenScheduler(),
        vqgan=tiny_paella_vq(seed),
        latent_dim_scale=8.0,
    )
    atomic_write_dir(root / "prior", lambda tmp: prior_pipe.save_pretrained(tmp, safe_serialization=True))
    atomic_write_dir(root / "decoder", lambda tmp: decoder_pipe.save_pretrained(tmp, safe_serialization=True))
    effnet = tiny_effnet(seed)
    atomic_write_dir(root / "effnet", lambda tmp: effnet.save_pretrained(tmp, safe_serialization=True))
    return paths
