"""LoRA layer names shared by the writer (lora_format.py) and the reader (lora_reading.py): kohya
prefixes per part and base model, kohya names of module paths and back, the diffusers/PEFT
header keys. See lora_format.py for the layouts."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ot_gradio.models.comfy_lora_names import is_full_name
from ot_gradio.training.lora_layer_entries import check_layer, group_layers

# SD 1.x: the text encoder is `lora_te_`, which every SD 1 loader reads; A1111/Forge map
# `lora_te1_` (what diffusers' convert_state_dict_to_kohya writes) to SDXL's first encoder only.
# PixArt: the transformer is `lora_transformer_` and T5 `lora_te_`, as OneTrainer names them.
_KOHYA_PREFIX = {"unet": "lora_unet_", "transformer": "lora_transformer_", "text_encoder": "lora_te_", "text_encoder_2": "lora_te2_",
                 "prior": "lora_prior_unet_", "text_encoder_3": "lora_te3_"}
_KOHYA_READ_PREFIX = {
    "lora_unet_": "unet", "lora_transformer_": "transformer", "lora_te1_": "text_encoder", "lora_te2_": "text_encoder_2",
    "lora_te_": "text_encoder", "lora_prior_unet_": "prior", "lora_prior_te_": "text_encoder", "lora_te3_": "text_encoder_3",
    "lycoris_": "unet",  # LyCORIS's wrapper names the one module it wraps so (SimpleTuner: the denoiser)
}


def kohya_read_prefixes(base_model_version: str = "") -> dict[str, str]:
    """kohya prefix -> part, for reading. Flux.1's T5 is sd-scripts' `lora_te3_` too (networks/lora_flux.py;
    ComfyUI reads lora_te2_ and lora_te3_ as its T5)."""
    if str(base_model_version).startswith("flux1"):
        return {**_KOHYA_READ_PREFIX, "lora_te3_": "text_encoder_2"}
    return dict(_KOHYA_READ_PREFIX)


# Würstchen 2 / Stable Cascade: `lora_prior_unet_` and `lora_prior_te_`, as OneTrainer writes and ComfyUI reads them.
_PRIOR_VERSIONS = ("wuerstchen", "stable_cascade")
# Qwen-Image's and HiDream's transformers are written `lora_unet_` (ComfyUI's generic rule reads that for
# both, their ComfyUI models having diffusers' layer names; diffusers' Qwen converter too)
_TRANSFORMER_AS_UNET_VERSIONS = ("qwen_image", "hidream")
_TEXT_PARTS = ("text_encoder", "text_encoder_2", "text_encoder_3")
# text-encoder paths not put under `text_model.` (T5's `encoder.block.N...` never had that wrapper)
_OUTSIDE_TEXT_MODEL = ("text_model.", "text_projection", "encoder.block.")
_DIFFUSERS_METADATA_KEY = "lora_adapter_metadata"
# diffusers/PEFT files hold alpha / rank folded into the weights (lora_B, hada_w1_a, lokr_w1[_a]) and
# say alpha = rank: ComfyUI reads no alpha from such a file (it looks for `<layer>.alpha` tensors,
# which diffusers does not expect) and applies scale 1, diffusers and peft read `lora_alpha` from
# the adapter metadata; both then apply what was trained. This key keeps the trained alpha, so our
# reader can undo the fold and a continued run trains at the same alpha.
FOLDED_ALPHA_KEY = "ot_gradio_folded_alpha"
COMFY_PREFIX = "diffusion_model."  # ComfyUI's name of the denoiser's original keys

# Multi-word names in SD UNet / CLIP / PixArt / T5 module paths, to turn kohya's `_`-joined names back into
# dotted paths without the model at hand.
_COMPOUND_WORDS = sorted(
    (
        tuple(w.split("_"))
        for w in (
            "down_blocks up_blocks mid_block transformer_blocks proj_in proj_out to_q to_k to_v to_out conv_in "
            "conv_out conv_shortcut conv_norm_out time_embedding time_emb_proj linear_1 linear_2 add_embedding "
            "class_embedding text_model self_attn q_proj k_proj v_proj out_proj text_projection final_layer_norm "
            "layer_norm1 layer_norm2 pos_embed caption_projection adaln_single timestep_embedder resolution_embedder "
            "aspect_ratio_embedder wi_0 wi_1 kv_mapper mapper_crp mapper_sca cond_mapper clip_txt_mapper "
            "clip_txt_pooled_mapper clip_img_mapper down_downscalers up_upscalers "
            # language-model text encoders (Qwen-Image's Qwen2.5-VL, Z-Image's Qwen3, Sana's Gemma 2)
            "language_model embed_tokens o_proj gate_proj up_proj down_proj "
            # Flux.1 / Chroma transformers (models/flux_keys.py)
            "single_transformer_blocks x_embedder context_embedder time_text_embed text_embedder guidance_embedder "
            "to_add_out add_q_proj add_k_proj add_v_proj norm1_context ff_context proj_mlp norm_out "
            # Chroma's approximator (distilled_guidance_layer.in_proj / out_proj)
            "distilled_guidance_layer in_proj"
        ).split()
    ),
    key=len,
    reverse=True,
)


# -- names ----------------------------------------------------------------------------------


def kohya_prefixes(base_model_version: str = "sd_v1") -> dict[str, str]:
    """Part -> kohya prefix: SDXL's and Flux.1's CLIP-L is `lora_te1_` (sd-scripts, A1111, ComfyUI
    and diffusers read it so; diffusers' Flux loader reads no `lora_te_`), SD 1.x/2.x's one encoder `lora_te_`."""
    if str(base_model_version).startswith(("sdxl", "sd3", "flux1")):  # SD 3: lora_te1_/2_/3_ (models/sd3_keys.py)
        return {**_KOHYA_PREFIX, "text_encoder": "lora_te1_"}
    if str(base_model_version).startswith(_PRIOR_VERSIONS):
        return {**_KOHYA_PREFIX, "text_encoder": "lora_prior_te_"}
    if str(base_model_version).startswith(_TRANSFORMER_AS_UNET_VERSIONS):
        return {**_KOHYA_PREFIX, "transformer": "lora_unet_"}
    return dict(_KOHYA_PREFIX)


def kohya_name(
    part: str, module_path: str, base_model_version: str = "sd_v1", module_names: Mapping[str, str] | None = None
) -> str:
    """`lora_unet_down_blocks_0_...` / `lora_te_text_model_encoder_layers_0_self_attn_q_proj`;
    `module_names` renames the part's module paths first (SDXL's original UNet names); a rename
    that is a whole layer name (models/comfy_lora_names.py) is the name."""
    module_path = (module_names or {}).get(module_path, module_path)
    if is_full_name(module_path):
        return module_path
    if part in _TEXT_PARTS and not module_path.startswith(_OUTSIDE_TEXT_MODEL):
        module_path = "text_model." + module_path
    return kohya_prefixes(base_model_version)[part] + module_path.replace(".", "_")


def module_path_from_kohya(flat: str) -> str:
    """`down_blocks_0_attentions_0_proj_in` -> `down_blocks.0.attentions.0.proj_in`."""
    tokens = flat.split("_")
    out: list[str] = []
    i = 0
    while i < len(tokens):
        for word in _COMPOUND_WORDS:
            if tuple(tokens[i : i + len(word)]) == word:
                out.append("_".join(word))
                i += len(word)
                break
        else:
            out.append(tokens[i])
            i += 1
    return ".".join(out)


def _strip_text_model(part: str, path: str) -> str:
    return path.removeprefix("text_model.") if part in _TEXT_PARTS else path


def _split_layers(part: str, sd: Mapping[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """{module path: {state name: tensor}} of one part, each layer checked to be one whole adapter."""
    layers = group_layers(sd, f"peft LoRA key in {part}")
    for path, tensors in layers.items():
        check_layer(f"{part}.{path}", tensors)
    return layers
