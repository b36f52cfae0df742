"""kohya_ss / sd-scripts settings of the flow-matching families it trains (Flux.1, SD 3 / 3.5):
their timesteps and guidance, with sd-scripts' defaults where ours differ, and the keys kohya_ss's
page saves for every model but sends only for its own family (kohya_import.py's helpers)."""

from __future__ import annotations

from typing import Any

from .enums import ModelType as M
from .kohya_reader import KohyaReader

ANIMA_KEYS = frozenset({"qwen3", "llm_adapter_path", "t5_tokenizer_path", "qwen3_max_token_length", "t5_max_token_length",
                        "attn_mode", "split_attn", "vae_chunk_size", "vae_disable_cache", "qwen_image_vae_2d", "llm_adapter_lr",
                        "self_attn_lr", "cross_attn_lr", "mlp_lr", "mod_lr"})
# keys kohya_ss's page saves for every model but sends only for its family (its `if flux1_checkbox` /
# `if sd3_checkbox`): read for that family, and for another one not listed as left out
FAMILY_KEYS = {
    "flux": frozenset({"ae", "apply_t5_attn_mask", "double_blocks_to_swap", "single_blocks_to_swap", "guidance_scale", "mem_eff_save",
                       "split_mode", "t5xxl_max_token_length", "cpu_offload_checkpointing", "discrete_flow_shift",
                       "model_prediction_type", "timestep_sampling", "sigmoid_scale", "train_blocks", "split_qkv", "img_attn_dim",
                       "img_mlp_dim", "img_mod_dim", "single_dim", "txt_attn_dim", "txt_mlp_dim", "txt_mod_dim", "single_mod_dim",
                       "in_dims", "train_double_block_indices", "train_single_block_indices", "flux1_clip_l", "flux1_t5xxl",
                       "model_type"}),
    "sd3": frozenset({"clip_g", "clip_g_dropout_rate", "clip_l_dropout_rate", "sd3_clip_l_dropout_rate", "enable_scaled_pos_embed",
                      "sd3_enable_scaled_pos_embed", "logit_mean", "logit_std", "mode_scale", "pos_emb_random_crop_rate", "save_clip",
                      "save_t5xxl", "t5_dropout_rate", "sd3_t5_dropout_rate", "t5xxl_device", "t5xxl_dtype", "text_encoder_batch_size",
                      "sd3_text_encoder_batch_size", "weighting_scheme", "training_shift", "sd3_fused_backward_pass"}),
    "anima": ANIMA_KEYS,
}
# kohya_ss's page names the settings of its newer families with a prefix of theirs
PREFIXES = {"anima": "anima_", "lumina": "lumina_", "hunyuan": "hunyuan_"}
SD3_TYPES = (M.STABLE_DIFFUSION_3, M.STABLE_DIFFUSION_35)
# sd-scripts' timestep defaults per family (timestep_sampling, discrete_flow_shift): Flux's script (Chroma runs it too)
# draws uniformly, shifted by 3; Anima's a logit-normal, unshifted (anima_train_utils.py)
FLOW_DEFAULTS = {M.FLUX_DEV_1: ("sigma", 3.0), M.CHROMA_1: ("sigma", 3.0), M.ANIMA: ("sigmoid", 1.0)}
# musubi-tuner's (its parser's defaults: sigma, unshifted; Ideogram 4's script: its own shift), for the families it trains here
MUSUBI_FLOWS = (M.WAN_2_1, M.WAN_2_1_I2V, M.WAN_2_2_TI2V_5B, M.WAN_2_2_T2V_A14B, M.WAN_2_2_I2V_A14B, M.QWEN, M.QWEN_IMAGE_EDIT,
                M.FLUX_2, M.Z_IMAGE, M.KREA_2, M.IDEOGRAM_4, M.HUNYUAN_VIDEO)
FLOW_DEFAULTS |= dict.fromkeys(MUSUBI_FLOWS, ("sigma", 1.0)) | {M.IDEOGRAM_4: ("ideogram4_shift", 1.0)}
# musubi-tuner's shifts by the image size (here: Dynamic timestep shifting, with the model's own constants)
SIZE_SHIFTS = ("flux_shift", "flux2_shift", "qwen_shift", "krea2_shift", "ideogram4_shift")


def _family(model_type: M) -> str | None:
    return ("flux" if model_type in (M.FLUX_DEV_1, M.CHROMA_1) else "sd3" if model_type in SD3_TYPES
            else "anima" if model_type == M.ANIMA else None)


def other_family_keys(r: KohyaReader, model_type: M) -> None:
    """Mark the other families' keys read: kohya_ss did not send them for this model."""
    family = _family(model_type)
    for key in list(r.data):
        owner = next((name for name, prefix in PREFIXES.items() if key.startswith(prefix)), None)
        owners = {owner} if owner else {name for name, keys in FAMILY_KEYS.items() if key in keys}
        if owners and family not in owners:
            r.get(key)


def flow_timesteps(r: KohyaReader, out: dict[str, Any], model_type: M, notes: list[str]) -> None:
    """SD 3's timesteps (`_sd3_timesteps`); sd-scripts' Flux, Chroma and Anima timesteps, with its
    defaults where ours differ (FLOW_DEFAULTS): `sigma` (uniform, shifted by `discrete_flow_shift`),
    `uniform`, `sigmoid` (a logit-normal of std `sigmoid_scale`), `shift` (that, shifted) and
    `flux_shift` (that, shifted by the image size); Flux's guidance input, 3.5."""
    if model_type in SD3_TYPES or model_type in FLOW_DEFAULTS:
        r.get("max_token_length")  # CLIP's window: sd-scripts' scripts for these families do not use it
    if model_type in SD3_TYPES:
        _sd3_timesteps(r, out, notes)
        _sd3_text(r, out, notes, model_type)
    if model_type not in FLOW_DEFAULTS:
        return

    def key(name: str) -> str:  # kohya_ss's page saves Anima's as anima_<name>; sd-scripts' TOML without the prefix
        return f"anima_{name}" if model_type == M.ANIMA and r.given(f"anima_{name}") else name

    default_sampling, default_shift = FLOW_DEFAULTS[model_type]
    sampling = str(r.get(key("timestep_sampling")) or default_sampling).lower()
    shift = r.number(key("discrete_flow_shift")) if r.given(key("discrete_flow_shift")) else default_shift
    scale = r.number(key("sigmoid_scale")) if r.given(key("sigmoid_scale")) else 1.0
    musubi = model_type in MUSUBI_FLOWS
    if sampling == "ideogram4_shift":  # a logit-normal of std 1.5 whatever sigmoid_scale says, its mean by the image size
        out.update(timestep_distribution="LOGIT_NORMAL", noising_weight=0.5, noising_bias=0.0)
    elif sampling in ("sigmoid", "shift", *SIZE_SHIFTS):
        out.update(timestep_distribution="LOGIT_NORMAL", noising_weight=scale - 1.0, noising_bias=0.0)
    elif sampling == "sigma" and musubi and r.given("weighting_scheme"):  # musubi-tuner draws sigma's timesteps by it
        _sd3_timesteps(r, out, notes)
    elif sampling in ("sigma", "uniform"):
        out["timestep_distribution"] = "UNIFORM"
    else:
        notes.append(f"timestep_sampling '{sampling}' has no counterpart here: UNIFORM is used")
    # musubi-tuner's sigma indexes its scheduler's unshifted timesteps (the shift is its sampling's alone)
    out["timestep_shift"] = shift if sampling == "shift" or (sampling == "sigma" and not musubi) else 1.0
    out["dynamic_timestep_shifting"] = sampling in SIZE_SHIFTS
    if musubi and sampling == "flux_shift" and model_type != M.FLUX_2:
        notes.append("timestep_sampling 'flux_shift': musubi-tuner shifts by Flux's constants; here by the model's own")
    if model_type not in (M.FLUX_DEV_1, M.CHROMA_1, M.ANIMA):  # musubi-tuner's families: the rest is sd-scripts' own
        return
    # the T5 / Qwen3 tokens read: sd-scripts' default 512 (Flux.1 dev, Chroma, Anima); here Flux's T5
    # window defaults to OneTrainer's 77, so a kohya config states it
    length_key, ours = {M.FLUX_DEV_1: ("t5xxl_max_token_length", "text_encoder_2_sequence_length"),
                        M.CHROMA_1: ("t5xxl_max_token_length", "text_encoder_sequence_length"),
                        M.ANIMA: (key("qwen3_max_token_length"), "text_encoder_sequence_length")}[model_type]
    out[ours] = r.number(length_key, int) if r.given(length_key) else 512
    transformer = out.setdefault("transformer", {})
    if model_type == M.FLUX_DEV_1:  # Flux.1 dev's guidance input (Chroma and Anima have none)
        transformer["guidance_scale"] = r.number("guidance_scale") if r.given("guidance_scale") else 3.5
    if r.flag("apply_t5_attn_mask"):  # T5's padding kept out of the prompt: Chroma always reads T5 with its mask here
        if model_type == M.FLUX_DEV_1:
            transformer["attention_mask"] = True
            notes.append("apply_t5_attn_mask: here the padding tokens' prompt embeddings are zeroed (the transformer's "
                         "Attention mask, as OneTrainer does), where sd-scripts masks them in T5 and the transformer's attention")
    if r.given("blocks_to_swap"):
        n = r.number("blocks_to_swap", int)
        # Flux / Chroma: sd-scripts swaps n // 2 of the 19 double blocks and twice the rest of the 38 single ones; Anima: n of 28
        share = min(1.0, round(n / 28 if model_type == M.ANIMA else (n // 2 + (n - n // 2) * 2) / 57, 2))
        transformer["offload_fraction"] = share
        notes.append(f"blocks_to_swap {n}: the transformer's Offload fraction is {share} here (that share of its blocks kept in "
                     "CPU memory)")
    prediction = str(r.get("model_prediction_type") or ("raw" if model_type == M.ANIMA else "sigma_scaled")).lower()
    if prediction != "raw":
        notes.append(f"model_prediction_type '{prediction}': sd-scripts weighs that loss by the noise level squared; here the "
                     "velocity loss is unweighted, as with 'raw'")


def _sd3_text(r: KohyaReader, out: dict[str, Any], notes: list[str], model_type: M) -> None:
    """sd-scripts' SD 3 text encoders: T5 reads `t5xxl_max_token_length` tokens (256 when unset, and
    from kohya_ss's page, which saves its Flux page's value but sends it for Flux alone; OneTrainer's
    default is 77); its `t5xxl_dtype` does nothing there ("DOES NOT WORK"). The text encoders' own
    files (`clip_l`, `clip_g`, `t5xxl`) are the import's part files (kohya_model.PART_FIELDS)."""
    sent = r.given("t5xxl_max_token_length") and "sd3_checkbox" not in r.data
    tokens = r.number("t5xxl_max_token_length", int) if sent else 256
    if tokens > 512:
        notes.append(f"t5xxl_max_token_length {tokens}: T5 reads at most 512 tokens here")
    out["text_encoder_3_sequence_length"] = min(tokens, 512)
    r.get("t5xxl_dtype")


def _sd3_timesteps(r: KohyaReader, out: dict[str, Any], notes: list[str]) -> None:
    """sd-scripts' SD 3 timesteps: `weighting_scheme` (default uniform) draws them, shifted by
    `training_shift` (default 1: none); logit_normal is a logit-normal of `logit_mean` and
    `logit_std`, mode the heavy tail of `mode_scale` (OneTrainer's HEAVY_TAIL is that formula)."""
    scheme = str(r.get("weighting_scheme") or "uniform").lower()
    if scheme == "logit_normal":
        mean = r.number("logit_mean") if r.given("logit_mean") else 0.0
        std = r.number("logit_std") if r.given("logit_std") else 1.0
        out.update(timestep_distribution="LOGIT_NORMAL", noising_bias=mean, noising_weight=std - 1.0)
    elif scheme == "mode":
        out.update(timestep_distribution="HEAVY_TAIL", noising_weight=r.number("mode_scale") if r.given("mode_scale") else 1.29)
    elif scheme == "cosmap":  # sd-scripts draws uniformly and weighs the loss by that density: here it is drawn from it
        out["timestep_distribution"] = "COS_MAP"
    else:
        out["timestep_distribution"] = "UNIFORM"
        if scheme == "sigma_sqrt":
            notes.append("weighting_scheme 'sigma_sqrt': sd-scripts weighs the loss by 1 / sigma squared, which has no counterpart "
                         "here; the timesteps are drawn uniformly, as there, and the loss is not weighted")
    for key in ("logit_mean", "logit_std", "mode_scale"):
        r.get(key)  # used by one scheme, kohya_ss saves all three
    out["timestep_shift"] = shift = r.number("training_shift") if r.given("training_shift") else 1.0
    ranged = [k for k in ("min_noising_strength", "max_noising_strength") if k in out]
    if shift != 1.0 and ranged:  # sd-scripts shifts the draw, then maps it into the range; here the range is shifted
        for key in ranged:
            del out[key]
        notes.append(f"min_timestep / max_timestep with training_shift {shift}: sd-scripts shifts the timesteps drawn and then "
                     "maps them into that range, while here the range itself would be shifted (piling the timesteps at its "
                     "top): every timestep is trained, shifted as there")
