"""Output formats: which format each training method writes, and where a LoRA file of a family
loads in that format (A1111, Forge, ComfyUI, diffusers). The doctor says these before the run;
the LORA method refuses the same before it touches the model."""

from __future__ import annotations

from typing import Any

from .enums import LORA_FORMATS, ModelFormat, ModelType, TrainingMethod
from .families import (
    DIFFUSERS_LORA_COMFY_GAPS,
    DIFFUSERS_LORA_TEXT_ENCODERS,
    KOHYA_LORA_UNREAD,
    TEXT_ENCODER_NAMES,
    family_info,
    lora_layout,
)
from .schema import TrainConfig


def output_format_warnings(config: Any) -> list[str]:
    """A format that is written as another one, or not at all for this method."""
    fmt, method = ModelFormat(config.output_model_format), config.training_method
    if method == TrainingMethod.LORA and fmt == ModelFormat.ORIGINAL_LORA:
        return ["Model → Output format ORIGINAL_LORA (newer OneTrainer's original-namespace names) is written with kohya "
                "names, as KOHYA_LORA: the programs that read one read the other (ComfyUI; A1111 and Forge for "
                "SD 1.x/2.x/SDXL)."]
    if method == TrainingMethod.EMBEDDING and fmt != ModelFormat.SAFETENSORS:
        return [f"Embedding training with output format {fmt.value}: an embedding is saved as SAFETENSORS (the A1111 embedding "
                "file A1111, ComfyUI and diffusers read); choose SAFETENSORS."]
    return []


def kohya_lora_problem(config: Any) -> str | None:
    """kohya's LoRA options: `lora_max_norm` (scale_weight_norms) caps the up and down matrices of
    LoRA and DoRA layers, `lora_rank_dropout` / `lora_module_dropout` act on plain LoRA layers;
    the other adapter types have none."""
    if config.training_method != TrainingMethod.LORA:
        return None
    peft = str(getattr(config.peft_type, "value", config.peft_type))
    if config.lora_max_norm > 0 and peft != "LORA":
        return (f"lora_max_norm: the max norm (kohya's scale_weight_norms) caps LoRA and DoRA layers, not {peft}; set it "
                "to 0, or choose the LORA adapter type.")
    for field, label in (("lora_rank_dropout", "rank dropout"), ("lora_module_dropout", "module dropout")):
        if getattr(config, field) > 0 and (peft != "LORA" or config.lora_decompose):
            kind = "DoRA" if peft == "LORA" else peft
            return (f"{field}: kohya's {label} acts on plain LoRA layers, not {kind}; set it to 0, or train a plain LoRA "
                    "(adapter type LORA, DoRA off).")
    return None


def output_format_problems(config: Any) -> list[str]:
    """A training method with an output format it does not write: refused before the model loads
    (the method's own check would stop the run only after loading it)."""
    fmt, method = config.output_model_format, config.training_method
    layout = lora_layout(config.model_type, fmt)
    if method == TrainingMethod.LORA and layout is None:
        return [f"output_model_format: LoRA training writes KOHYA_LORA or COMFY_LORA (A1111, ComfyUI, Forge) or "
                f"DIFFUSERS_LORA (diffusers keys) or SAFETENSORS (kohya keys for SD 1.x/2.x/SDXL, diffusers keys otherwise), "
                f"not {fmt.value}; choose one of those."]
    if (method == TrainingMethod.LORA and layout == "diffusers" and config.lokr_weight_decompose
            and str(getattr(config.peft_type, "value", config.peft_type)) == "LOKR"):
        return [f"output_model_format: {fmt.value} writes diffusers/PEFT keys, and peft's LoKr layers have no DoRA; save as "
                "KOHYA_LORA (LyCORIS keys with dora_scale), or turn lokr_weight_decompose off"]
    if (method == TrainingMethod.LORA and layout == "diffusers" and config.lora_decompose and not config.lora_decompose_output_axis
            and str(getattr(config.peft_type, "value", config.peft_type)) == "LORA"):
        return [f"output_model_format: {fmt.value} writes diffusers/PEFT keys for {ModelType(config.model_type).value}, and "
                "peft/diffusers take DoRA's norm on the output axis; turn lora_decompose_output_axis on, or save as KOHYA_LORA "
                "(ComfyUI)"]
    if method in (TrainingMethod.FINE_TUNE, TrainingMethod.FINE_TUNE_VAE) and (fmt in LORA_FORMATS - {ModelFormat.SAFETENSORS} or fmt in (ModelFormat.CKPT, ModelFormat.INTERNAL)):
        why = "holds LoRA weights" if fmt in LORA_FORMATS else "is not written by the trainer"
        return [f"output_model_format: a fine-tune is a whole model and {fmt.value} {why}; choose SAFETENSORS or "
                "ORIGINAL_SINGLE_FILE (one .safetensors checkpoint) or DIFFUSERS (a folder)."]
    info = family_info(config.model_type)
    if (method in (TrainingMethod.FINE_TUNE, TrainingMethod.FINE_TUNE_VAE) and info is not None and not info.single_file
            and fmt != ModelFormat.DIFFUSERS):
        return [f"output_model_format: {ModelType(config.model_type).value} is saved as a diffusers folder here; {fmt.value} "
                "(one file) is not written for it, so the run would train and then fail to save: choose DIFFUSERS."]
    if (method in (TrainingMethod.FINE_TUNE, TrainingMethod.FINE_TUNE_VAE) and info is not None and not info.transformer_file
            and fmt in (ModelFormat.ORIGINAL_TRANSFORMER, ModelFormat.COMFY_TRANSFORMER)):
        return [f"output_model_format: {fmt.value} is the transformer alone, which {ModelType(config.model_type).value} does not "
                "write; choose SAFETENSORS or ORIGINAL_SINGLE_FILE (one .safetensors checkpoint) or DIFFUSERS (a folder)."]
    return []


def lora_reader_problems(config: Any) -> list[str]:
    """A trained part that no reader loads from the chosen LoRA file layout (the family's
    `lora_unread`): refused before the run rather than trained and silently dropped on load."""
    info = family_info(config.model_type)
    fmt = ModelFormat(config.output_model_format)
    layout = lora_layout(config.model_type, fmt)
    if info is None or config.training_method != TrainingMethod.LORA or layout is None:
        return []
    out = []
    for where, part, why in info.lora_unread:
        if where != layout or not getattr(getattr(config, part, None), "train", False):
            continue
        other = "KOHYA_LORA" if layout == "diffusers" else "DIFFUSERS_LORA"
        elsewhere = any(w != layout and p == part for w, p, _ in info.lora_unread) or (
            layout == "kohya" and part in info.text_encoders and part not in DIFFUSERS_LORA_TEXT_ENCODERS.get(config.model_type, ("", (part,)))[1])
        fix = f"turn off training {part}" if elsewhere else f"save as {other}, or turn off training {part}"
        out.append(f"{part}.train: a {config.model_type.value} {part} LoRA saved as {fmt.value} would load nowhere: {why}; {fix}.")
    return out


def comfy_gap_warnings(config: Any) -> list[str]:
    """A diffusers-layout LoRA whose trained layers include some that ComfyUI skips in that layout
    (diffusers loads them): said once, with the format that loads every layer in ComfyUI."""
    gap = DIFFUSERS_LORA_COMFY_GAPS.get(config.model_type)
    if (gap is None or config.training_method != TrainingMethod.LORA
            or lora_layout(config.model_type, config.output_model_format) != "diffusers"
            or config.layer_filter_preset not in gap[1]):
        return []
    if family_info(config.model_type).safetensors_lora == "kohya":  # SD 1.x/2.x, SDXL
        return [f"Model → Output format {ModelFormat(config.output_model_format).value}: diffusers keys load in diffusers only: "
                f"ComfyUI skips {config.model_type.value}'s {gap[0]} layers in them, and A1111 and Forge load none; to use "
                "this LoRA there, save it as SAFETENSORS or KOHYA_LORA (kohya keys, which diffusers loads too)."]
    return [f"Model → Output format {ModelFormat(config.output_model_format).value}: ComfyUI skips {config.model_type.value}'s "
            f"{gap[0]} layers in a diffusers-format LoRA (diffusers loads them); to use this LoRA in ComfyUI, "
            f"save it as COMFY_LORA, which ComfyUI loads whole."]


def kohya_unread_warnings(config: Any) -> list[str]:
    """A kohya-layout LoRA of a family whose kohya file no other program loads (our own tools
    still read and convert it)."""
    why = KOHYA_LORA_UNREAD.get(config.model_type)
    if not why or config.training_method != TrainingMethod.LORA or lora_layout(config.model_type, config.output_model_format) != "kohya":
        return []
    return [f"Model → Output format {ModelFormat(config.output_model_format).value}: {why}; choose DIFFUSERS_LORA "
            f"(or convert the file afterwards with the convert tool)."]


def lokr_dora_warnings(config: Any) -> list[str]:
    """LoKr in a kohya file where the common loaders do not apply it as trained.

    - DoRA on the output axis: LyCORIS applies it as trained; ComfyUI's and Forge's output-axis
      path takes the norm of the base weight instead of the adapted one (8-50% of the change off on
      random layers), and A1111 takes DoRA's norm over the input axis only, which scrambles the
      weight (9-2700%; A1111 1.10's code rerun on full-size SD 1.5, SD 2.1 and SDXL files).
    - Tucker on conv layers: ComfyUI and Forge build the factor with an einsum whose result is not
      contiguous and their `torch.kron` of it raises, so they skip each such layer with an error in
      their log (29 of an SD 1.5 file's conv layers); A1111 makes it contiguous first and loads it."""
    if config.training_method != TrainingMethod.LORA or str(getattr(config.peft_type, "value", config.peft_type)) != "LOKR":
        return []
    out = []
    if config.lokr_weight_decompose and config.lokr_dora_on_output:
        out.append("lokr_dora_on_output: A1111, Forge and ComfyUI apply a LoKr DoRA file decomposed on the output axis "
                   "differently from how it trained (A1111 takes the norm over the input axis, ComfyUI and Forge normalize by "
                   "the base weight alone); LyCORIS applies it as trained. Turn lokr_dora_on_output off for a file A1111, "
                   "Forge and ComfyUI apply as trained.")
    info = family_info(config.model_type)
    if (config.lokr_use_tucker and info is not None and info.denoiser == "unet" and config.layer_filter_preset not in ("attn-mlp", "attn-only")
            and lora_layout(config.model_type, config.output_model_format) == "kohya"):
        out.append("lokr_use_tucker: ComfyUI and Forge fail on the Tucker LoKr of conv layers (they skip each one, with an "
                   "error in their log); A1111 loads them. Turn LoKr Tucker off for a file ComfyUI and Forge load whole.")
    return out


def dora_format_problem(config: Any) -> str | None:
    """DoRA decomposed on the output axis has no kohya form the common loaders apply as trained:
    A1111 and Forge take DoRA's norm over the input axis only, and ComfyUI's output-axis path
    normalizes differently from training (errors of about 14% of the change measured)."""
    if (
        config.training_method == TrainingMethod.LORA
        and config.lora_decompose
        and config.lora_decompose_output_axis
        and str(getattr(config.peft_type, "value", config.peft_type)) == "LORA"
        and lora_layout(config.model_type, config.output_model_format) == "kohya"
    ):
        return (f"lora_decompose_output_axis: DoRA on the output axis saved as {ModelFormat(config.output_model_format).value} "
                "(kohya keys) loads in ComfyUI, A1111 and Forge differently from how it trained; save it as DIFFUSERS_LORA "
                "(diffusers/PEFT keys, which diffusers' load_lora_weights applies as trained), or turn "
                "lora_decompose_output_axis off for a kohya-key file (input-axis DoRA, OneTrainer's default, which those "
                "loaders read)")
    return None


def fused_lora_problem(config: Any) -> str | None:
    """A family whose KOHYA_LORA / COMFY_LORA write q, k and v as one layer on the fused qkv
    (`lora_fused_qkv`): only a plain LoRA's three deltas are one such layer exactly (those of a layer
    filter that trains part of the fused weight too, the rest zero rows); whatever the layer filter,
    another adapter does not fuse, so it is refused here, before the model loads."""
    info = family_info(config.model_type)
    kind = str(getattr(config.peft_type, "value", config.peft_type))
    if (info is None or not info.lora_fused_qkv or config.training_method != TrainingMethod.LORA
            or lora_layout(config.model_type, config.output_model_format) != "kohya" or (kind == "LORA" and not config.lora_decompose)):
        return None
    what = "DoRA (lora_decompose)" if kind == "LORA" else kind
    return (f"peft_type: {ModelFormat(config.output_model_format).value} writes {ModelType(config.model_type).value}'s q, k and v "
            f"as one layer on the fused qkv weight: a plain LoRA's three deltas make one such layer exactly, {what}'s do not; "
            "train a plain LoRA (peft_type LORA, lora_decompose off), or save as DIFFUSERS_LORA")


def diffusers_text_encoder_problems(config: Any) -> list[str]:
    """A LoRA of a text encoder the family's diffusers pipeline cannot load, saved with diffusers
    keys, would be skipped (or, for Chroma, make load_lora_weights fail): refused before the run."""
    model_type = ModelType(config.model_type)
    info, loader = family_info(model_type), DIFFUSERS_LORA_TEXT_ENCODERS.get(model_type)
    if (config.training_method != TrainingMethod.LORA or info is None or loader is None
            or lora_layout(model_type, config.output_model_format) != "diffusers"):
        return []
    pipeline, loadable = loader
    names = dict(zip(info.text_encoders, TEXT_ENCODER_NAMES.get(model_type, ()), strict=False))
    reads = " and ".join([f"the {info.denoiser}", *(names.get(p, p) for p in loadable)])
    out = []
    for part in info.text_encoders:
        if part in loadable or not getattr(config, part).train:
            continue
        label = TrainConfig.model_fields[part].json_schema_extra["label"]
        what = f"the {names[part]} text encoder" if part in names else f"the {label.lower()}"
        kohya_unread = any(layout == "kohya" and unread == part for layout, unread, _ in info.lora_unread)
        other = "" if kohya_unread else ", or choose KOHYA_LORA there"
        out.append(f"{part}.train: a {ModelFormat(config.output_model_format).value} file (Model → Output format) cannot hold a "
                   f"LoRA of {what} (Training → {label} → Train): diffusers' {pipeline}.load_lora_weights loads LoRA into "
                   f"{reads} only, so that part would not load; turn off Training → {label} → Train{other}.")
    return out
