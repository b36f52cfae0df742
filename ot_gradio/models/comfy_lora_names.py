"""The names ComfyUI gives LoRA layers, per family, for KOHYA_LORA / COMFY_LORA files.

ComfyUI builds one key map per loaded model (comfy/lora.py `model_lora_keys_unet` and
`model_lora_keys_clip`) and skips every file entry the map lacks. What it maps, by family:
- Every model: `lora_unet_<original key, `_`-joined>` and `diffusion_model.<original key>` for each
  weight of the model in its original (single-file) layout; every text encoder weight as
  `text_encoders.<ComfyUI's key>`.
- Flux.1 / Chroma / Flux.2 (all Flux models to it): `lora_transformer_<diffusers path>` for the
  layers of `comfy/utils.py flux_to_diffusers` (q/k/v land on rows of the fused weights). Flux.2's
  own layers (`ff.linear_in/out`, the single blocks' `to_qkv_mlp_proj` / `to_out`, the shared
  modulations, `time_guidance_embed`) and Chroma's `distilled_guidance_layer` are whole weights of
  the original layout, so they are written under their original names (`lora_unet_...`).
- Z-Image (ComfyUI's Lumina2 model): `diffusion_model.<diffusers path>` for the layers of
  `z_image_to_diffusers`; diffusers' Z-Image loader reads the same names.
- PixArt: `transformer.<diffusers path>` for the layers of `pixart_to_diffusers`.
- Ideogram 4: `diffusion_model.<original key>` (OneTrainer's COMFY_LORA names): the original layout
  is diffusers' but for `attention.to_out.0` (`attention.o`) and q, k, v fused into `attention.qkv`;
  the three layers named `attention.qkv` are written as one fused layer (training/lora_fusion.py).
- HunyuanVideo: `diffusion_model.<original key>`, q/k/v (and the single blocks' MLP input, wider)
  one fused layer each (`img_attn.qkv`, `linear1`), `norm_out.linear` as `final_layer.adaLN_modulation.1`
  with its halves swapped; Llama and CLIP-L as `text_encoders.llama.transformer.model.<path>`,
  `text_encoders.clip_l.transformer.text_model.<path>`.
- T5 alone (Chroma, PixArt): `lora_te1_<path>`; CLIP-L + T5 (Flux.1): `lora_te2_`.
- Wan 2.1: only the original layout (`lora_unet_blocks_0_self_attn_q`; ComfyUI has no map from
  diffusers' Wan names); its UMT5 as `text_encoders.umt5xxl.transformer.<path>` (the same paths).
- Qwen2.5-VL (Qwen-Image) and Qwen3 (Z-Image): only `text_encoders.<name>.transformer.model.<path>`
  (`qwen25_7b`, `qwen3_4b`), the language model's layers.

A value here is a whole layer name (lora_format writes `<name>.lora_down.weight`, `.lora_up.weight`
and `.alpha`, the kohya/LyCORIS entries ComfyUI reads for any name) and reads back to its path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from torch import nn

from ot_gradio.models.flux2_names import ORIGINAL_NAMED_DOUBLE, ORIGINAL_NAMED_SINGLE, ORIGINAL_NAMED_TOP
from ot_gradio.models.key_layout import LayerName, fused_groups, fused_qkv_name, layer_paths

# a rename that starts so is the whole layer name in the file, not a module path under the part's prefix
FULL_NAME_PREFIXES = ("lora_unet_", "lora_transformer_", "lora_te", "lycoris_", "transformer.", "diffusion_model.",
                      "text_encoders.")

def is_full_name(name: str) -> bool:
    return name.startswith(FULL_NAME_PREFIXES)


def _unet(original: str) -> str:
    return "lora_unet_" + original.replace(".", "_")


def _block(path: str, blocks: str) -> tuple[str, str] | None:
    """`transformer_blocks.3.ff.linear_in` -> ("3", "ff.linear_in") when `path` is under `blocks`."""
    if not path.startswith(blocks + "."):
        return None
    index, _, rest = path[len(blocks) + 1 :].partition(".")
    return index, rest


def flux2_original(path: str) -> str | None:
    """The original key of a Flux.2 layer ComfyUI's Flux map lacks (None: the map names it)."""
    if (hit := _block(path, "transformer_blocks")) and hit[1] in ORIGINAL_NAMED_DOUBLE:
        return f"double_blocks.{hit[0]}.{ORIGINAL_NAMED_DOUBLE[hit[1]]}"
    if (hit := _block(path, "single_transformer_blocks")) and hit[1] in ORIGINAL_NAMED_SINGLE:
        return f"single_blocks.{hit[0]}.{ORIGINAL_NAMED_SINGLE[hit[1]]}"
    return ORIGINAL_NAMED_TOP.get(path)


def chroma_original(path: str) -> str | None:
    """The original key of a layer of Chroma's approximator (None: another layer)."""
    root = "distilled_guidance_layer."
    if not path.startswith(root):
        return None
    rest = path[len(root) :]
    if rest.startswith("layers."):
        rest = rest.replace(".linear_1", ".in_layer").replace(".linear_2", ".out_layer")
    return root + rest


def flux2(paths: Mapping[str, Iterable[str]]) -> dict[str, dict[str, str]]:
    return {"transformer": {p: _unet(o) for p in paths.get("transformer", ()) if (o := flux2_original(p))}}


def chroma(paths: Mapping[str, Iterable[str]]) -> dict[str, dict[str, str]]:
    return {"transformer": {p: _unet(o) for p in paths.get("transformer", ()) if (o := chroma_original(p))},
            "text_encoder": {p: "lora_te1_" + p.replace(".", "_") for p in paths.get("text_encoder", ())}}


def z_image(paths: Mapping[str, Iterable[str]]) -> dict[str, dict[str, str]]:
    return {"transformer": {p: "diffusion_model." + p for p in paths.get("transformer", ())},
            "text_encoder": {p: "text_encoders.qwen3_4b.transformer.model." + p for p in paths.get("text_encoder", ())}}


def qwen_image(paths: Mapping[str, Iterable[str]]) -> dict[str, dict[str, str]]:
    """The transformer keeps its names (`lora_unet_` + diffusers path: ComfyUI's Qwen-Image keys are
    diffusers'); the language model's layers are `text_encoders.qwen25_7b.transformer.model.layers...`;
    the vision tower and `lm_head` have no name (ComfyUI's Qwen2.5-VL has no `lm_head`, other vision names)."""
    te = {}
    for p in paths.get("text_encoder", ()):
        rest = p.removeprefix("model.").removeprefix("language_model.")
        if rest.startswith("layers."):
            te[p] = "text_encoders.qwen25_7b.transformer.model." + rest
    return {"text_encoder": te}


def pixart(paths: Mapping[str, Iterable[str]]) -> dict[str, dict[str, str]]:
    return {"transformer": {p: "transformer." + p for p in paths.get("transformer", ())},
            "text_encoder": {p: "lora_te1_" + p.replace(".", "_") for p in paths.get("text_encoder", ())}}


# Wan's diffusers layer names -> the original ones (diffusers' convert_wan_transformer_to_diffusers inverted)
WAN_BLOCK = {"attn1.to_q": "self_attn.q", "attn1.to_k": "self_attn.k", "attn1.to_v": "self_attn.v", "attn1.to_out.0": "self_attn.o",
             "attn2.to_q": "cross_attn.q", "attn2.to_k": "cross_attn.k", "attn2.to_v": "cross_attn.v", "attn2.to_out.0": "cross_attn.o",
             "attn2.add_k_proj": "cross_attn.k_img", "attn2.add_v_proj": "cross_attn.v_img",
             "ffn.net.0.proj": "ffn.0", "ffn.net.2": "ffn.2"}
WAN_TOP = {"condition_embedder.time_embedder.linear_1": "time_embedding.0", "condition_embedder.time_embedder.linear_2": "time_embedding.2",
           "condition_embedder.text_embedder.linear_1": "text_embedding.0", "condition_embedder.text_embedder.linear_2": "text_embedding.2",
           "condition_embedder.time_proj": "time_projection.1", "proj_out": "head.head", "patch_embedding": "patch_embedding",
           # Wan 2.1 I2V's projection of the CLIP image embeddings
           "condition_embedder.image_embedder.ff.net.0.proj": "img_emb.proj.1", "condition_embedder.image_embedder.ff.net.2": "img_emb.proj.3"}


def wan_original(path: str) -> str | None:
    """The original key of a Wan transformer layer (None: a layer the original model has not)."""
    if (hit := _block(path, "blocks")) and hit[1] in WAN_BLOCK:
        return f"blocks.{hit[0]}.{WAN_BLOCK[hit[1]]}"
    return WAN_TOP.get(path)


def wan(paths: Mapping[str, Iterable[str]]) -> dict[str, dict[str, str]]:
    return {"transformer": {p: _unet(o) for p in paths.get("transformer", ()) if (o := wan_original(p))},
            "text_encoder": {p: "text_encoders.umt5xxl.transformer." + p for p in paths.get("text_encoder", ())}}


# Anima's diffusers layer names -> its DiT's (diffusers' _convert_non_diffusers_anima_lora_to_diffusers
# inverted; OneTrainer's AnimaModel._diffusers_to_dit): the keys ComfyUI's Anima model has under
# `diffusion_model.`, the checkpoint's `net.` wrapper stripped
ANIMA_BLOCK = {"norm1.linear_1": "adaln_modulation_self_attn.1", "norm1.linear_2": "adaln_modulation_self_attn.2",
               "norm2.linear_1": "adaln_modulation_cross_attn.1", "norm2.linear_2": "adaln_modulation_cross_attn.2",
               "norm3.linear_1": "adaln_modulation_mlp.1", "norm3.linear_2": "adaln_modulation_mlp.2",
               "attn1.to_q": "self_attn.q_proj", "attn1.to_k": "self_attn.k_proj", "attn1.to_v": "self_attn.v_proj",
               "attn1.to_out.0": "self_attn.output_proj", "attn2.to_q": "cross_attn.q_proj", "attn2.to_k": "cross_attn.k_proj",
               "attn2.to_v": "cross_attn.v_proj", "attn2.to_out.0": "cross_attn.output_proj",
               "ff.net.0.proj": "mlp.layer1", "ff.net.2": "mlp.layer2"}
ANIMA_TOP = {"patch_embed.proj": "x_embedder.proj.1", "time_embed.t_embedder.linear_1": "t_embedder.1.linear_1",
             "time_embed.t_embedder.linear_2": "t_embedder.1.linear_2", "norm_out.linear_1": "final_layer.adaln_modulation.1",
             "norm_out.linear_2": "final_layer.adaln_modulation.2", "proj_out": "final_layer.linear"}


def anima_original(path: str) -> str | None:
    """The DiT key of an Anima transformer layer (None: a layer the original model has not)."""
    if (hit := _block(path, "transformer_blocks")) and hit[1] in ANIMA_BLOCK:
        return f"blocks.{hit[0]}.{ANIMA_BLOCK[hit[1]]}"
    return ANIMA_TOP.get(path)


def anima(paths: Mapping[str, Iterable[str]]) -> dict[str, dict[str, str]]:
    """The transformer as OneTrainer's KOHYA_LORA / COMFY_LORA writes it (`lora_unet_` + the DiT key;
    diffusers' Anima loader reads the same keys under `diffusion_model.`). No text encoder: OneTrainer
    trains Anima's transformer only, and a kohya text encoder is refused (config/family_info/anima.py)."""
    return {"transformer": {p: _unet(o) for p in paths.get("transformer", ()) if (o := anima_original(p))}}


# Ideogram 4's original names, q/k/v aside (OneTrainer's IdeogramModel.diffusers_to_original)
IDEOGRAM4_RENAMES = ((".attention.to_out.0", ".attention.o"),)


def ideogram4(paths: Mapping[str, Iterable[str]]) -> dict[str, dict[str, str]]:
    """The transformer under ComfyUI's `diffusion_model.` + original key, q/k/v all `attention.qkv`
    (one fused layer). No text encoder: Ideogram 4 trains its transformer only."""
    return {"transformer": {p: "diffusion_model." + fused_qkv_name(p, IDEOGRAM4_RENAMES) for p in paths.get("transformer", ())}}


# HunyuanVideo's diffusers layer names -> ComfyUI's (comfy/ldm/hunyuan_video/model.py, whose double and
# single blocks are Flux's; OneTrainer's HunyuanVideoModel.diffusers_to_original spells the same layers
# as the original repository does, which ComfyUI also maps). Several paths to one name are one fused
# weight, in this order: q, k, v (and the single blocks' MLP input, wider, in `linear1`).
HUNYUAN_REFINER = {"attn.to_q": "self_attn.qkv", "attn.to_k": "self_attn.qkv", "attn.to_v": "self_attn.qkv",
                   "attn.to_out.0": "self_attn.proj", "ff.net.0.proj": "mlp.0", "ff.net.2": "mlp.2",
                   "norm_out.linear": "adaLN_modulation.1"}
HUNYUAN_DOUBLE = {"attn.to_q": "img_attn.qkv", "attn.to_k": "img_attn.qkv", "attn.to_v": "img_attn.qkv",
                  "attn.add_q_proj": "txt_attn.qkv", "attn.add_k_proj": "txt_attn.qkv", "attn.add_v_proj": "txt_attn.qkv",
                  "attn.to_out.0": "img_attn.proj", "attn.to_add_out": "txt_attn.proj", "norm1.linear": "img_mod.lin",
                  "norm1_context.linear": "txt_mod.lin", "ff.net.0.proj": "img_mlp.0", "ff.net.2": "img_mlp.2",
                  "ff_context.net.0.proj": "txt_mlp.0", "ff_context.net.2": "txt_mlp.2"}
HUNYUAN_SINGLE = {"attn.to_q": "linear1", "attn.to_k": "linear1", "attn.to_v": "linear1", "proj_mlp": "linear1",
                  "proj_out": "linear2", "norm.linear": "modulation.lin"}
HUNYUAN_TOP = {"context_embedder.time_text_embed.timestep_embedder.linear_1": "txt_in.t_embedder.in_layer",
               "context_embedder.time_text_embed.timestep_embedder.linear_2": "txt_in.t_embedder.out_layer",
               "context_embedder.time_text_embed.text_embedder.linear_1": "txt_in.c_embedder.in_layer",
               "context_embedder.time_text_embed.text_embedder.linear_2": "txt_in.c_embedder.out_layer",
               "context_embedder.proj_in": "txt_in.input_embedder",
               "time_text_embed.timestep_embedder.linear_1": "time_in.in_layer", "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
               "time_text_embed.text_embedder.linear_1": "vector_in.in_layer", "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
               "time_text_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
               "time_text_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
               "norm_out.linear": "final_layer.adaLN_modulation.1", "proj_out": "final_layer.linear"}
HUNYUAN_SWAPPED = ("norm_out.linear",)  # the original's (scale, shift) is diffusers' (shift, scale)
# OneTrainer's spelling of those keys (HunyuanVideoModel.diffusers_to_original: the original repository's,
# which ComfyUI also maps in the blocks), read back as the same layers
HUNYUAN_ONETRAINER_RENAMES = (("_mod.lin.", "_mod.linear."), ("_attn.qkv.", "_attn_qkv."), ("_attn.proj.", "_attn_proj."),
                              ("mlp.0.", "mlp.fc1."), ("mlp.2.", "mlp.fc2."), (".modulation.lin.", ".modulation.linear."))
HUNYUAN_ONETRAINER_TOP = {"time_in.in_layer": "time_in.mlp.0", "time_in.out_layer": "time_in.mlp.2",
                          "guidance_in.in_layer": "guidance_in.mlp.0", "guidance_in.out_layer": "guidance_in.mlp.2",
                          "txt_in.t_embedder.in_layer": "txt_in.t_embedder.mlp.0", "txt_in.t_embedder.out_layer": "txt_in.t_embedder.mlp.2",
                          "txt_in.c_embedder.in_layer": "txt_in.c_embedder.linear_1", "txt_in.c_embedder.out_layer": "txt_in.c_embedder.linear_2"}


def hunyuan_video_onetrainer(original: str) -> str:
    """OneTrainer's name of a key of ComfyUI's HunyuanVideo model."""
    if original in HUNYUAN_ONETRAINER_TOP:
        return HUNYUAN_ONETRAINER_TOP[original]
    key = original + "."
    for a, b in HUNYUAN_ONETRAINER_RENAMES:
        key = key.replace(a, b)
    return key[:-1]


def hunyuan_video_original(path: str) -> str | None:
    """The key ComfyUI's HunyuanVideo model gives a diffusers layer (None: a layer it has not)."""
    if (hit := _block(path, "context_embedder.token_refiner.refiner_blocks")) and hit[1] in HUNYUAN_REFINER:
        return f"txt_in.individual_token_refiner.blocks.{hit[0]}.{HUNYUAN_REFINER[hit[1]]}"
    if (hit := _block(path, "transformer_blocks")) and hit[1] in HUNYUAN_DOUBLE:
        return f"double_blocks.{hit[0]}.{HUNYUAN_DOUBLE[hit[1]]}"
    if (hit := _block(path, "single_transformer_blocks")) and hit[1] in HUNYUAN_SINGLE:
        return f"single_blocks.{hit[0]}.{HUNYUAN_SINGLE[hit[1]]}"
    return HUNYUAN_TOP.get(path)


def hunyuan_video(transformer: nn.Module, paths: Mapping[str, Iterable[str]]) -> dict[str, dict[str, str]]:
    """The transformer under ComfyUI's `diffusion_model.` + its key, fused weights as one layer each
    with the members' widths read from `transformer` (LayerName), `norm_out.linear` swapped, OneTrainer's
    spelling read too; the
    text encoders (`paths`, CLIP's without `text_model.`) under ComfyUI's generic
    `text_encoders.<key>` of its HunyuanVideoClipModel (`llama.transformer.model.`, `clip_l.transformer.text_model.`)."""
    text = {"text_encoder": {p: "text_encoders.llama.transformer.model." + p for p in paths.get("text_encoder", ())},
            "text_encoder_2": {p: "text_encoders.clip_l.transformer.text_model." + p for p in paths.get("text_encoder_2", ())}}
    names = {p: "diffusion_model." + o for p in layer_paths(transformer) if (o := hunyuan_video_original(p))}
    out: dict[str, str] = {}
    for name, members in fused_groups(names).items():
        members.sort(key=hunyuan_video_row_order)  # the fused weight's row order (q, k, v, MLP), not the modules' (add_k_proj first)
        widths = [_out_features(transformer.get_submodule(p)) for p in members] if len(members) > 1 else None
        alias = "diffusion_model." + hunyuan_video_onetrainer(name.removeprefix("diffusion_model."))
        layer = LayerName(name, widths, swap=len(members) == 1 and members[0] in HUNYUAN_SWAPPED, aliases=(alias,))
        out.update(dict.fromkeys(members, layer))
    return {"transformer": out, **{part: names for part, names in text.items() if names}}


def hunyuan_video_row_order(path: str) -> int:
    """Where a layer's rows sit in its fused weight of the original layout (q, k, v, then the MLP input)."""
    for blocks, table in (("context_embedder.token_refiner.refiner_blocks", HUNYUAN_REFINER), ("transformer_blocks", HUNYUAN_DOUBLE),
                          ("single_transformer_blocks", HUNYUAN_SINGLE)):
        if (hit := _block(path, blocks)) and hit[1] in table:
            return list(table).index(hit[1])
    return 0


def _out_features(module: nn.Module) -> int:
    return int(getattr(module, "base_layer", module).weight.shape[0])
