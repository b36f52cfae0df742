"""Stable Cascade (Würstchen 3): the stage C prior (`StableCascadeUNet`, full 3.6B or "lite" 1B)
trained on EffNet latents, conditioned on the CLIP ViT-bigG text encoder's last hidden states
(no final layer norm), its pooled projection and an all-zero CLIP image embedding, as OneTrainer
and the diffusers prior pipeline do.

Latents are the EffNet features as they are; r = t + 0.001. The lite models are subfolders of
the hub repos: base `stabilityai/stable-cascade-prior/prior_lite`, decoder
`stabilityai/stable-cascade/decoder_lite` (a local component folder such as
`.../stable-cascade-prior/prior_lite` works the same). `prior.model_name` may also be an
original-layout `stage_c*.safetensors` file, which is also the single-file output format.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType
from ot_gradio.fsutil import atomic_write
from ot_gradio.models.cascade_common import CascadeFamily
from ot_gradio.models.cascade_loading import Loader, Source, resolve_source
from ot_gradio.models.common import ModelLoadError, base_module, cast_state_dict, plain_state_dict, torch_dtype
from ot_gradio.models.registry import register_family
from ot_gradio.models.transformer_file import read_transformer_file

EFFNET_FILE = "effnet_encoder.safetensors"
# Depthwise convolutions cannot take a LoRA of most ranks, so "full" is every other Linear and
# Conv2d but the CLIP image mapper, whose input is always zero when training on text.
LORA_PRESETS = {
    "full": ["embedding", "clf", "clip_txt", "scalers", "channelwise", ".mapper", "kv_mapper", "attention"],
    "attn-mlp": ["attention", "kv_mapper", "channelwise"],
    "attn-only": ["attention"],
}
COMMON_PRIOR = {
    "in_channels": 16, "out_channels": 16, "timestep_ratio_embedding_dim": 64, "patch_size": 1,
    "down_blocks_repeat_mappers": [1, 1], "up_blocks_repeat_mappers": [1, 1],
    "block_types_per_layer": [["SDCascadeResBlock", "SDCascadeTimestepBlock", "SDCascadeAttnBlock"]] * 2,
    "clip_text_in_channels": 1280, "clip_text_pooled_in_channels": 1280, "clip_image_in_channels": 768, "clip_seq": 4,
    "effnet_in_channels": None, "pixel_mapper_in_channels": None, "kernel_size": 3, "dropout": [0.1, 0.1],
    "self_attn": True, "timestep_conditioning_type": ["sca", "crp"], "switch_level": [False],
}
# the released stage C priors (3.6B and lite), for a single file given without a matching base prior
PRIOR_CONFIGS = {
    "3.6B": {**COMMON_PRIOR, "conditioning_dim": 2048, "block_out_channels": [2048, 2048], "num_attention_heads": [32, 32],
             "down_num_layers_per_block": [8, 24], "up_num_layers_per_block": [24, 8]},
    "lite": {**COMMON_PRIOR, "conditioning_dim": 1536, "block_out_channels": [1536, 1536], "num_attention_heads": [24, 24],
             "down_num_layers_per_block": [4, 12], "up_num_layers_per_block": [12, 4]},
}


def diffusers_to_original(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The prior's weights in the layout of the released `stage_c.safetensors` (what ComfyUI and
    `StableCascadeUNet.from_single_file` read): attention as nn.MultiheadAttention, i.e. q/k/v
    fused into `attn.in_proj_weight`/`_bias` and `to_out.0` named `attn.out_proj`."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        head, sep, tail = key.partition(".attention.")
        if not sep:
            out[key] = value
        elif tail.startswith("to_q."):
            kind = tail.removeprefix("to_q.")
            parts = [state_dict[f"{head}.attention.to_{p}.{kind}"] for p in "qkv"]
            out[f"{head}.attention.attn.in_proj_{kind}"] = torch.cat(parts, 0)
        elif tail.startswith(("to_k.", "to_v.")):
            continue
        elif tail.startswith("to_out.0."):
            out[f"{head}.attention.attn.out_proj.{tail.removeprefix('to_out.0.')}"] = value
        else:
            out[key] = value
    return out


def original_to_diffusers(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    from diffusers.loaders.single_file_utils import convert_stable_cascade_unet_single_file_to_diffusers

    return convert_stable_cascade_unet_single_file_to_diffusers(dict(state_dict))


def diffusers_classes():
    from diffusers import StableCascadeDecoderPipeline, StableCascadePriorPipeline, StableCascadeUNet
    from diffusers.pipelines.deprecated.wuerstchen import PaellaVQModel

    return StableCascadeUNet, PaellaVQModel, StableCascadePriorPipeline, StableCascadeDecoderPipeline


@register_family(ModelType.STABLE_CASCADE_1)
class StableCascade(CascadeFamily):
    fp16_unstable = ("prior",)  # as OneTrainer (not Würstchen 2's)
    lora_base_model_version = "stable_cascade_v1"
    prompt_key = "clip_text"
    lora_layer_presets = {"prior": LORA_PRESETS}
    # timestep_scale 1.0 (r = t + 0.001) and 10 decoder steps: CascadeFamily's defaults
    hub_example = "stabilityai/stable-cascade-prior"
    family_name = "Stable Cascade"
    decoder_default = "stabilityai/stable-cascade"
    decoder_examples = "stabilityai/stable-cascade, stabilityai/stable-cascade/decoder_lite or a local copy"
    prior_example = "stabilityai/stable-cascade-prior/prior_lite"

    # ------------------------------------------------------------ loading

    @classmethod
    def default_effnet(cls, decoder: str, loader: Loader) -> str:
        """`effnet_encoder.safetensors` at the top of the decoder model, where Stability publishes it."""
        source = resolve_source(decoder, "decoder.model_name", "decoder", "stabilityai/stable-cascade")
        if source.local:
            path = Path(source.root) / EFFNET_FILE
            if not path.is_file():
                raise ModelLoadError(
                    f"effnet_encoder.model_name: no {EFFNET_FILE} in '{source.root}'; give the EffNet encoder file "
                    "(effnet_encoder.safetensors from stabilityai/stable-cascade)."
                )
            return str(path)
        return loader.hub_file(source.root, EFFNET_FILE, "effnet_encoder.model_name")

    @classmethod
    def tiny_effnet_path(cls, root: Path) -> Path:
        return root / "decoder" / EFFNET_FILE

    @classmethod
    def _load_prior_file(cls, path: Path, base_config: Mapping | None):
        """An original-layout stage C file: converted by diffusers' converter, built with the
        base prior's config when the weights fit it, else the released 3.6B or lite config."""

        unet_cls = diffusers_classes()[0]
        try:
            state_dict = original_to_diffusers(read_transformer_file(Path(path), torch.float32))
        except ModelLoadError:
            raise
        except Exception as e:
            raise ModelLoadError(f"prior.model_name: could not read {path} as a Stable Cascade stage C file ({e}).") from e
        candidates = [dict(base_config)] if base_config else []
        candidates.append(PRIOR_CONFIGS["3.6B" if any(k.startswith("down_blocks.0.23.") for k in state_dict) else "lite"])
        for config in candidates:
            config = {k: v for k, v in config.items() if not k.startswith("_")}
            with torch.device("meta"):
                shapes = {k: tuple(v.shape) for k, v in unet_cls(**config).state_dict().items()}
            if shapes == {k: tuple(v.shape) for k, v in state_dict.items()}:
                prior = unet_cls(**config)
                prior.load_state_dict(state_dict)
                return prior
        raise ModelLoadError(
            f"prior.model_name: {path} is not a Stable Cascade stage C prior that fits the base model's prior, "
            "nor the released 3.6B or lite one."
        )

    @classmethod
    def network_classes(cls) -> tuple[type, type, type, type]:
        from transformers import CLIPTextModelWithProjection

        unet_cls, vqgan_cls = diffusers_classes()[:2]
        return CLIPTextModelWithProjection, unet_cls, unet_cls, vqgan_cls

    @classmethod
    def _load_prior(cls, source: Source, override: str | None, loader: Loader):
        """An original-layout stage C file (`_load_prior_file`) or, as for Würstchen, a diffusers prior."""
        if override and Path(override).expanduser().is_file():
            unet_cls = diffusers_classes()[0]
            base_config = None
            try:
                base_config = unet_cls.load_config(
                    source.root, subfolder=source.subfolder, cache_dir=loader.cache_dir, token=loader.token,
                    local_files_only=loader.offline or source.local,
                )
            except Exception:
                pass  # the released configs are tried instead
            return cls._load_prior_file(Path(override).expanduser(), base_config)
        return super()._load_prior(source, override, loader)

    # ------------------------------------------------------------ training

    def _conditioning(self, text_encoder_output, layer_skip: int) -> dict[str, torch.Tensor]:
        return {
            "clip_text": text_encoder_output.hidden_states[-(max(0, layer_skip) + 1)],
            "clip_text_pooled": text_encoder_output.text_embeds.unsqueeze(1),
        }

    def _prior_forward(self, noisy, ratio, conditioning):
        clip_text = conditioning["clip_text"]
        clip_img = clip_text.new_zeros(clip_text.shape[0], 1, base_module(self.prior).config.clip_image_in_channels)
        return self.prior(
            sample=noisy,
            timestep_ratio=ratio,
            clip_text_pooled=conditioning["clip_text_pooled"],
            clip_text=clip_text,
            clip_img=clip_img,
        ).sample

    def lora_module_names(self) -> dict[str, dict[str, str]]:
        """Renames for kohya LoRA files: the prior's attention projections under the original
        stage C names ComfyUI gives them (`attention.attn.to_q`, `attention.attn.out_proj`), so
        `lora_prior_unet_..._attention_attn_to_q` lands on its weight; other layers keep their names."""
        names = {}
        for name, _ in base_module(self.prior).named_modules():
            head, sep, tail = name.partition(".attention.")
            if sep and tail in ("to_q", "to_k", "to_v"):
                names[name] = f"{head}.attention.attn.{tail}"
            elif sep and tail == "to_out.0":
                names[name] = f"{head}.attention.attn.out_proj"
        return {"prior": names}

    # ------------------------------------------------------------ sampling

    @classmethod
    def pipeline_classes(cls) -> tuple[type, type]:
        classes = diffusers_classes()
        return classes[2], classes[3]

    def _prior_call_kwargs(self, cond, uncond):
        kwargs = {"prompt_embeds": cond["clip_text"], "prompt_embeds_pooled": cond["clip_text_pooled"]}
        if uncond is not None:
            kwargs.update(negative_prompt_embeds=uncond["clip_text"], negative_prompt_embeds_pooled=uncond["clip_text_pooled"])
        return kwargs

    # ------------------------------------------------------------ saving

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The prior as an original-layout stage C file at `path` (ComfyUI's UNet loader,
        `StableCascadeUNet.from_single_file`, and `prior.model_name` here) and the text encoder
        beside it as `<name>.text_encoder.safetensors` (transformers key names), as OneTrainer
        writes stage_c.safetensors and text_encoder.safetensors. Both written atomically."""
        from safetensors.torch import save_file

        path = Path(path)
        dt = torch_dtype(dtype)
        metadata = {"format": "pt", **self.file_metadata("stable-cascade-v1-prior", metadata)}
        prior = cast_state_dict(diffusers_to_original(plain_state_dict(self.prior, "prior")), dt)
        text_encoder = cast_state_dict(plain_state_dict(self.text_encoder, "text_encoder"), dt)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: save_file(prior, str(tmp), metadata=metadata))
        te_path = path.with_name(path.stem + ".text_encoder.safetensors")
        atomic_write(te_path, lambda tmp: save_file(text_encoder, str(tmp), metadata={"format": "pt"}))
        return path
