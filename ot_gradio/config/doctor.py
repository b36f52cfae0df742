"""Warnings before a run: settings that are valid but will not do what the user expects."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .attention import attention_problems, attention_warnings
from .base_model_match import base_model_mismatch
from .catalogue import offered
from .devices import parse_device_indexes, temp_device_problem
from .enums import (
    DataType,
    LearningRateScaler,
    LearningRateScheduler,
    ModelType,
    TrainingMethod,
    native_resolution,
)
from .enums import Optimizer as O
from .families import (
    IMPLEMENTED_METHODS,
    family_info,
    implemented_model_types,
    is_flow_matching,
    supports,
    trainable_parts,
)
from .fields import PLANNED, field_meta, nested_section
from .flow_options import flow_matching_conflicts
from .gguf import gguf_problems
from .include_parts import include_problems, include_warnings
from .kohya_habits import kohya_warnings
from .media_files import IMAGE_EXTENSIONS
from .optimizer import (
    ADAPTIVE_LR,
    SCHEDULE_FREE,
    OptimizerConfig,
    fused_back_pass_on,
    optimizer_ignored,
    optimizer_param_defaults,
    optimizer_problems,
)
from .output_formats import (
    comfy_gap_warnings,
    diffusers_text_encoder_problems,
    dora_format_problem,
    fused_lora_problem,
    kohya_lora_problem,
    kohya_unread_warnings,
    lokr_dora_warnings,
    lora_reader_problems,
    output_format_problems,
    output_format_warnings,
)
from .parts import learning_rate_or_base
from .prior import prior_problems
from .resolution import bucket_problems
from .schema import TrainConfig
from .svd_quant import svd_problems, svd_warnings
from .tiny_names import tiny_name_problem
from .validation import join_path

MASK_GLOB = "*-masklabel.png"  # a concept image's mask file (data/scan.py)
SDXL_TYPES = (ModelType.STABLE_DIFFUSION_XL_10_BASE, ModelType.STABLE_DIFFUSION_XL_10_BASE_INPAINTING)
# also the trainer's advice when an SDXL VAE made NaN latents (training/vae_advice.py)
SDXL_FP16_VAE = ("SDXL's own VAE overflows in FLOAT_16 (NaN latents, black samples); keep it at FLOAT_32 "
                 "or BFLOAT_16, or set the VAE model to madebyollin/sdxl-vae-fp16-fix, which is made for FLOAT_16.")
# an image-editing family's control image beside its image (data/images.py CONTROL_SUFFIX)
CONTROL_GLOBS = tuple(f"*-control{e}" for ext in IMAGE_EXTENSIONS for e in (ext, ext.upper()))


def planned_changes(config: BaseModel, default: BaseModel | None = None, prefix: str = "", planned: bool = False,
                    acted_on: tuple[str, ...] = ()) -> list[str]:
    """Paths of options the trainer does not act on yet (PLANNED, or inside a PLANNED group but
    for its `acted_on` fields) whose value differs from the default. Defaults of nested groups are
    the parent's defaults; an optimizer parameter also counts as unchanged at that optimizer's own default."""
    default = default if default is not None else type(config)()
    own = optimizer_param_defaults(config.optimizer) if isinstance(config, OptimizerConfig) else {}
    out: list[str] = []
    for name, info in type(config).model_fields.items():
        meta = field_meta(type(config), name)
        if meta.get("compat") or (not prefix and _unread_section(config, name)):
            continue
        is_planned = (planned and name not in acted_on) or meta.get("status") == PLANNED
        path = join_path(prefix, name)
        value, default_value = getattr(config, name), getattr(default, name)
        kind, cls = nested_section(info.annotation)
        if kind == "section" and isinstance(value, BaseModel):
            out += planned_changes(value, default_value, path, is_planned, meta.get("acted_on", ()))
        elif kind == "list" and not is_planned:
            for i, item in enumerate(value or []):
                out += planned_changes(item, cls(), join_path(path, i))
        elif is_planned and isinstance(value, dict) and isinstance(default_value, dict) and default_value:
            out += [join_path(path, k) for k in default_value if k in value and _differs(value[k], default_value[k])]
        elif is_planned and _differs(value, default_value) and (name not in own or _differs(value, own[name])):
            out.append(path)
    return out


def _unread_section(config: BaseModel, name: str) -> bool:
    """A section no run of this config reads, whatever it holds (OneTrainer saves every key): the
    cloud settings with cloud training off, an unconditional transformer the model does not have."""
    if name == "cloud":
        return not (getattr(config, "cloud", None) or {}).get("enabled")
    if name == "unconditional_transformer" and isinstance(config, TrainConfig):
        info = family_info(config.model_type)
        return info is None or name not in info.extra_params
    return False


def _differs(value: Any, default: Any) -> bool:
    return value != default and str(value) != str(default)


def check(config: TrainConfig, *, available_optimizers: Iterable[Any] | None = None, include_planned: bool = True) -> list[str]:
    """Everything worth telling the user before they start this config, most important first.

    ``available_optimizers``: the optimizers the trainer implements (its registry's keys), when
    the caller may import the trainer; the config package cannot. ``include_planned=False``
    leaves out the list of unsupported options (a OneTrainer import already warned about them)."""
    warnings: list[str] = []
    method, model_type = config.training_method, config.model_type
    supported = implemented_model_types()
    if model_type not in supported:
        warnings.append(f"Model type {model_type.value} is not supported by the trainer yet (only {', '.join(m.value for m in supported)} for now).")
    elif method_problem(model_type, method):  # also one of errors(): the page says it before Start
        warnings.append(method_problem(model_type, method))
    mismatch = base_model_mismatch(model_type.value, config.base_model_name)
    if mismatch:  # the note the page's Model tab shows
        warnings.append(mismatch)
    if available_optimizers is not None:
        names = [str(getattr(o, "value", o)) for o in available_optimizers]
        if config.optimizer.optimizer.value not in names:
            warnings.append(f"Optimizer {config.optimizer.optimizer.value} is not available in the trainer yet: use one of {', '.join(names)}.")

    if not config.concepts:
        warnings.append("There are no concepts: add at least one concept (a folder of training images) on the Concepts tab.")
    elif not any(c.enabled for c in config.concepts):
        warnings.append("Every concept is disabled: enable at least one concept to train on.")

    if model_type in SDXL_TYPES and DataType(config.vae.weight_dtype) == DataType.FLOAT_16 and not config.vae.model_name:
        warnings.append(f"vae.weight_dtype: {SDXL_FP16_VAE}")

    warnings += output_format_warnings(config)  # a method with a format it cannot write is in errors()
    warnings += ignored_sample_options(config)
    if method == TrainingMethod.FINE_TUNE and config.layer_filter_preset != "full":
        info = family_info(model_type)
        named = "the layer filter names" if config.layer_filter_preset == "custom" else f"the {config.layer_filter_preset} preset names"
        warnings.append(f"layer_filter_preset: {config.layer_filter_preset}: this fine-tune trains only the "
                        f"{info.denoiser if info else 'denoiser'} weights {named}, the others stay frozen (as in OneTrainer); "
                        "choose full on the Training tab (Layers) to train every weight.")

    samples = [(i, s) for i, s in enumerate(config.samples) if s.enabled]
    placeholder = config.embedding.placeholder
    if method == TrainingMethod.EMBEDDING and placeholder:
        lacking = [str(i + 1) for i, s in samples if placeholder not in s.prompt]
        if lacking:
            which = "Sample prompt" + ("s " if len(lacking) > 1 else " ") + ", ".join(lacking)
            warnings.append(f"{which} lack{'' if len(lacking) > 1 else 's'} {placeholder}: without it the samples never use the embedding and all look the same, the commonest cause of useless embedding samples. Put {placeholder} where the trained token goes, e.g. 'a photo of {placeholder}'.")

    if not config.base_model_name.startswith("tiny:"):
        native = native_resolution(model_type)
        off = [f"{i + 1} ({s.width}x{s.height})" for i, s in samples if not 0.5 <= (s.width * s.height) / (native * native) <= 2.0]
        if off:
            warnings.append(f"Sample size far from {model_type.value}'s native resolution {native}x{native} for sample {', '.join(off)}: such samples come out as noise or broken images even when training goes well.")

    warnings += frame_count_warnings(config)
    if not config.masked_training:
        alpha = [f"{i + 1} '{c.name or c.path}'" for i, c in enumerate(config.concepts) if c.enabled and c.image.alpha_mask]
        if alpha:
            warnings.append(f"Concept {', '.join(alpha)}: Alpha as mask is on but Training → Masked training is off, so no mask is "
                            "used; turn Masked training on.")
    warnings += kohya_warnings(config)
    warnings += optimizer_warnings(config)
    warnings += offload_warnings(config)
    warnings += comfy_gap_warnings(config)
    warnings += kohya_unread_warnings(config)
    warnings += svd_warnings(config)
    warnings += attention_warnings(config)
    warnings += lokr_dora_warnings(config)
    warnings += include_warnings(config)
    changed = planned_changes(config) if include_planned else []
    if changed:
        warnings.append("These options are set but the trainer does not support them yet, so they will be ignored: " + ", ".join(changed) + ".")
    return warnings


PRODIGY_FAMILY = frozenset({O.PRODIGY, O.PRODIGY_ADV, O.PRODIGY_PLUS_SCHEDULE_FREE})
OPTIMIZERS_PAGE_LR = ('the optimizers page: "Learning Rate should be 1 and must be the same for both text encoders and unet. '
                      'Otherwise, the lora will do nothing."')


def frame_count_warnings(config: Any) -> list[str]:
    """A video family trains clips of step*k + 1 frames: another Frames value is cut, said here."""
    info = family_info(config.model_type)
    step = info.frame_step if info else None
    frames = int(config.frames)
    if not step or (frames - 1) % step == 0:
        return []
    used = (frames - 1) // step * step + 1
    return [f"frames: {config.model_type.value} trains clips of {step}k+1 frames, so Frames {frames} trains {used}; "
            f"set Frames to {used} or {used + step}."]


def _trained_parts(config: TrainConfig) -> list[str]:
    parts = trainable_parts(config.model_type)
    return [p for p in parts if getattr(config, p).train and getattr(config, p).include]


def _fmt(value: float) -> str:
    return f"{value:g}"


def optimizer_warnings(config: TrainConfig) -> list[str]:
    """Optimizer and scheduler settings that run but will not do what the user expects."""
    out: list[str] = []
    opt, scheduler = config.optimizer, config.learning_rate_scheduler
    name = opt.optimizer
    warmup = config.learning_rate_warmup_steps
    if name in ADAPTIVE_LR:
        lrs = {part: learning_rate_or_base(getattr(config, part).learning_rate, config.learning_rate) for part in _trained_parts(config)}
        if any(lr != 1 for lr in lrs.values()) or len(set(lrs.values())) > 1:
            now = ", ".join(f"{part} {_fmt(lr)}" for part, lr in lrs.items()) or f"learning_rate {_fmt(config.learning_rate)}"
            why = OPTIMIZERS_PAGE_LR if name in PRODIGY_FAMILY else "it multiplies its own estimate by the learning rate"
            out.append(f"{name.value} finds its own step size, so set every learning rate to 1 (now: {now}); {why} "
                       "To make it learn faster or slower, change the D coefficient (d_coef) instead.")
        if config.learning_rate_scaler != LearningRateScaler.NONE:
            out.append(f"{name.value} finds its own step size, but learning_rate_scaler {config.learning_rate_scaler.value} multiplies "
                       "its learning rates by the square root of the batch size or accumulation steps; set it to NONE.")
    if warmup > 0 and name not in SCHEDULE_FREE and scheduler != LearningRateScheduler.ADAFACTOR:
        if scheduler == LearningRateScheduler.REX:
            out.append(f"Warmup ({_fmt(warmup)}) with the REX scheduler: REX is meant to run with no warmup, from the full "
                       "learning rate to the end; set warmup steps to 0.")
        if name in PRODIGY_FAMILY:
            out.append(f"Warmup ({_fmt(warmup)}) with {name.value}: the optimizers page says \"Consider not using any training "
                       "level warmup steps as Prodigy has its own warmup method\"; set warmup steps to 0 (or turn on safeguard warmup).")
    if name in SCHEDULE_FREE and (scheduler != LearningRateScheduler.CONSTANT or warmup > 0):
        out.append(f"{name.value} is schedule-free: it runs at a constant learning rate with no warmup (as in OneTrainer), "
                   f"so the {scheduler.value} scheduler and the warmup are ignored.")
    if name == O.ADAFACTOR and scheduler == LearningRateScheduler.ADAFACTOR and not opt.relative_step:
        out.append("The ADAFACTOR scheduler goes with adaptive Adafactor (relative step and scale parameter on); with relative "
                   "step off it keeps the learning rate as set, like CONSTANT.")
    if opt.fused_back_pass and "fused_back_pass" not in optimizer_param_defaults(name):
        offering = ", ".join(o.value for o in offered(O) if "fused_back_pass" in optimizer_param_defaults(o))
        out.append(f"Fused back pass is on but {name.value} does not offer it ({offering} do); it is ignored.")
    out += optimizer_ignored(opt)
    oft = str(getattr(config.peft_type, "value", config.peft_type)) == "OFT_2"  # OFT v2 has no rank or alpha
    if config.training_method == TrainingMethod.LORA and not oft and config.lora_alpha > config.lora_rank:
        out.append(f"LoRA alpha {_fmt(config.lora_alpha)} is above the rank {config.lora_rank}: the LoRA output is scaled by "
                   f"alpha/rank = {_fmt(config.lora_alpha / config.lora_rank)}, which acts like a higher learning rate and can "
                   "overtrain; keep alpha at or below the rank.")
    return out


def errors(config: TrainConfig) -> list[str]:
    """Settings the run cannot start with (each naming the field to change); the page refuses to start."""
    out: list[str] = []
    if problem := tiny_name_problem("base_model_name", config.base_model_name):
        out.append(problem)
    opt, scheduler = config.optimizer, config.learning_rate_scheduler
    name = opt.optimizer
    if name == O.ADAFACTOR and scheduler != LearningRateScheduler.ADAFACTOR and (opt.relative_step or opt.scale_parameter):
        on = " and ".join(k for k in ("relative_step", "scale_parameter") if getattr(opt, k))
        out.append(f"optimizer.{on.split(' ')[0]}: Adafactor with the {scheduler.value} scheduler is the low-memory AdamW mode, "
                   f"where the optimizers page says scale parameter and relative step are \"Required to be FALSE\"; turn off "
                   f"{on}, or choose the ADAFACTOR scheduler for the adaptive mode.")
    if scheduler == LearningRateScheduler.ADAFACTOR and name != O.ADAFACTOR:
        out.append(f"learning_rate_scheduler: the ADAFACTOR scheduler reads the learning rate from the ADAFACTOR optimizer and "
                   f"cannot work with {name.value}; choose another scheduler.")
    if scheduler == LearningRateScheduler.CUSTOM:
        path = (config.custom_learning_rate_scheduler or "").strip()
        if "." not in path.strip("."):
            out.append(f"custom_learning_rate_scheduler: the CUSTOM scheduler needs a class path in the form module.Class "
                       f"(e.g. torch.optim.lr_scheduler.StepLR), not {path!r}.")
    if problem := kohya_lora_problem(config):
        out.append(problem)
    prefix = config.save_filename_prefix or ""
    if any(c in prefix for c in "/\\"):
        out.append(f"save_filename_prefix: {prefix[:80]!r} is the start of a file name, kept in the run's save folder; it may "
                   "not hold a folder ('/' or '\\').")
    if problem := temp_device_problem(config.temp_device, config.train_device):
        out.append(problem)
    try:
        parse_device_indexes(config.device_indexes)
    except ValueError as err:
        out.append(str(err))
    if config.multi_gpu and fused_back_pass_on(config):
        out.append("optimizer.fused_back_pass: it steps each weight inside the backward pass, before the other GPUs' "
                   "gradients arrive, so it cannot work with multi_gpu; turn one of them off.")
    method_line = method_problem(config.model_type, config.training_method)
    if method_line:
        out.append(method_line)
    out += optimizer_problems(opt)
    out += output_format_problems(config)
    out += lora_reader_problems(config)
    out += [p for p in (dora_format_problem(config), fused_lora_problem(config)) if p]
    if is_flow_matching(config.model_type):
        out += flow_matching_conflicts(config)
    out += fill_mask_problems(config)
    out += control_pair_problems(config)
    out += circular_padding_problems(config)
    out += padding_mask_problems(config)
    out += masked_option_problems(config)
    out += attention_problems(config)
    out += diffusers_text_encoder_problems(config)
    out += offload_problems(config)
    out += inpainting_sample_problems(config)
    out += control_sample_problems(config)
    out += gguf_problems(config)
    out += include_problems(config)
    out += svd_problems(config)
    out += bucket_problems(config)
    if DataType(config.fallback_train_dtype) not in (DataType.BFLOAT_16, DataType.FLOAT_32):
        out.append(f"fallback_train_dtype: {DataType(config.fallback_train_dtype).value} is not a fallback type; use BFLOAT_16 or FLOAT_32")
    if problem := only_cache_problem(config):
        out.append(problem)
    return out


def only_cache_problem(config: Any) -> str | None:
    """`only_cache` with nothing to cache: refused before the run (the trainer checks it again)."""
    if not config.only_cache:
        return None
    if TrainingMethod(config.training_method) == TrainingMethod.FINE_TUNE_VAE:
        return "only_cache: FINE_TUNE_VAE trains on the images' pixels and caches nothing; turn only_cache off"
    if not config.latent_caching:
        return "only_cache: latent_caching is off, so there is nothing to cache; turn latent_caching on or only_cache off"
    return None


def method_problem(model_type: Any, method: Any) -> str | None:
    """A training method the trainer has but not for this model type (FINE_TUNE_VAE: SD 1.x/2.x
    only, as OneTrainer; EMBEDDING: not for families without one): refused before the model loads."""
    info = family_info(model_type)
    method = TrainingMethod(method)
    if info is None or not info.implemented or method not in IMPLEMENTED_METHODS or supports(model_type, method):
        return None
    choices = ", ".join(m.value for m in info.methods if m in IMPLEMENTED_METHODS)
    return f"training_method: {method.value} is not available for model type {ModelType(model_type).value}; choose {choices}"


def offload_problems(config: Any) -> list[str]:
    """Layer / activation offloading (training/offload.py) where it cannot do anything."""
    info = family_info(config.model_type)
    if info is None:
        return []
    out = []
    offloadable = trainable_parts(config.model_type)
    for part in info.parts:
        section = getattr(config, part, None)
        fraction = getattr(section, "offload_fraction", 0) or 0
        activations = getattr(section, "activation_offloading", False)
        if not (fraction > 0 or activations):
            continue
        setting = f"{part}.offload_fraction" if fraction > 0 else f"{part}.activation_offloading"
        if part not in offloadable:
            out.append(f"{setting}: offloading works on the denoiser and the text encoders only ({', '.join(offloadable)}); "
                       f"turn it off for the {part}.")
    return out


def offload_warnings(config: Any) -> list[str]:
    """Layer offloading that will not act: a fine-tune's offload fraction without the fused back
    pass (OneTrainer's fine-tune presets set both; the run goes on without offloading). With
    `compile`, the trainer compiles the blocks that stay on the device one by one, as OneTrainer
    does, so that pair needs no word here."""
    if config.training_method != TrainingMethod.FINE_TUNE or fused_back_pass_on(config):
        return []
    out = []
    for part in trainable_parts(config.model_type):
        section = getattr(config, part, None)
        fraction = getattr(section, "offload_fraction", 0) or 0
        if fraction > 0 and section.train:
            out.append(f"{part}.offload_fraction {fraction:g} is not applied: FINE_TUNE trains every weight of the {part}, and "
                       f"trained weights move to RAM only with the fused back pass (as in OneTrainer), so the whole {part} "
                       f"stays on the GPU; turn on optimizer.fused_back_pass (Adafactor, Adam(W), ...) or train a LoRA.")
    return out


def fill_mask_problems(config: Any) -> list[str]:
    """Flux.1 Fill learns to fill the white area of a mask. OneTrainer trains it with the concepts'
    masks, and without masked training with an all-white mask (a blank image to fill, so only
    text-to-image); it makes no random masks. A run that would never see a mask is refused."""
    if config.model_type != ModelType.FLUX_FILL_DEV_1:
        return []
    if not config.masked_training:
        return ["masked_training: FLUX_FILL_DEV_1 learns to fill the white area of each image's mask; without masked "
                "training it would only see blank images to fill (OneTrainer makes no random masks). Turn masked training "
                "on and put a '<name>-masklabel.png' mask (white = fill) next to the images; the Masks tool makes them."]
    folders = [(Path(c.path).expanduser(), c.include_subdirectories) for c in config.concepts if c.enabled and c.path]
    folders = [(f, sub) for f, sub in folders if f.is_dir()]
    if folders and not any(next(iter(f.rglob(MASK_GLOB) if sub else f.glob(MASK_GLOB)), None) for f, sub in folders):
        return ["concepts: no image of the enabled concepts has a '<name>-masklabel.png' mask, so FLUX_FILL_DEV_1 would "
                "only see blank images to fill; make masks (white = fill) with the Masks tool, or train FLUX_DEV_1."]
    return []


def control_pair_problems(config: Any) -> list[str]:
    """An image-editing family trains on (image, `<name>-control.<ext>`) pairs: a run whose enabled
    concept folders hold no control image at all is refused (an image without one is skipped, with
    a warning, when the data is read)."""
    info = family_info(config.model_type)
    if info is None or not info.control_image:
        return []
    enabled = [c for c in config.concepts if c.enabled and c.path]
    problems = [f"concepts[{config.concepts.index(c)}].image.control_folder: '{c.image.control_folder}' does not exist or is not a "
                "folder" for c in enabled if c.image.control_folder and not Path(c.image.control_folder).expanduser().is_dir()]
    if any(c.image.control_folder for c in enabled):  # the pairs are counted when the data is read
        return problems
    folders = [(Path(c.path).expanduser(), c.include_subdirectories) for c in enabled]
    folders = [(f, sub) for f, sub in folders if f.is_dir()]
    if folders and not any(next(iter(f.rglob(g) if sub else f.glob(g)), None) for f, sub in folders for g in CONTROL_GLOBS):
        return [f"concepts: no image of the enabled concepts has a control image; {config.model_type.value} trains on pairs: put "
                "the source image as '<name>-control.png' beside each edited '<name>.png', or set the concept's Control image "
                "folder."]
    return problems


def circular_padding_problems(config: Any) -> list[str]:
    """force_circular_padding is done for the families OneTrainer does it for (their description's
    `circular_padding` parts); for another one a run that asks for it is refused."""
    info = family_info(config.model_type)
    if not config.force_circular_padding or (info is not None and info.circular_padding):
        return []
    return [f"force_circular_padding: circular padding is done for Stable Diffusion 1.x/2.x, SDXL, Würstchen and Stable Cascade "
            f"(as in OneTrainer), not for {config.model_type.value}; turn it off."]


def padding_mask_problems(config: Any) -> list[str]:
    """transformer.attention_mask is read by the families OneTrainer reads it for (their
    description's `zeroes_padding`); another one's run that asks for it is refused."""
    info = family_info(config.model_type)
    if (info is not None and info.zeroes_padding) or not config.transformer.attention_mask:
        return []
    return [f"transformer.attention_mask: the prompt embeddings' padding tokens are zeroed for Flux.1, Flux.1 Fill, SD 3 / "
            f"3.5 and HiDream (as in OneTrainer), not for {config.model_type.value}; turn it off."]


def ignored_sample_options(config: Any) -> list[str]:
    """A sample's options its model type does not read (an imported OneTrainer sample may hold
    them): ignored, as OneTrainer ignores them, and said."""
    info = family_info(config.model_type)
    out = []
    for i, sample in enumerate(config.samples or []):
        if not getattr(sample, "enabled", True):
            continue
        if sample.transformer_attention_mask and (info is None or not info.zeroes_padding):
            out.append(f"samples[{i}].transformer_attention_mask: padding tokens are zeroed for Flux.1, Flux.1 Fill, SD 3 / 3.5 "
                       f"and HiDream, not for {config.model_type.value}; ignored, as in OneTrainer.")
        if sample.sample_inpainting and (info is None or not info.inpainting):
            out.append(f"samples[{i}].sample_inpainting: {config.model_type.value} is not an inpainting model; the sample is drawn "
                       "from its prompt alone, as in OneTrainer.")
    return out


def masked_option_problems(config: Any) -> list[str]:
    """What trains towards the base model (masked prior preservation, PRIOR_PREDICTION concepts:
    config/prior.py); custom_conditioning_image needs an inpainting model (its input is the conditioning image)."""
    out = prior_problems(config)
    info = family_info(config.model_type)
    if config.custom_conditioning_image and (info is None or not info.inpainting):
        out.append(f"custom_conditioning_image: {config.model_type.value} is not an inpainting model (it takes no conditioning "
                   "image); turn it off, or train an inpainting model type.")
    return out


def inpainting_sample_problems(config: Any) -> list[str]:
    """`samples[i].sample_inpainting`: only an inpainting family can inpaint, and it needs both
    files (white in the mask = repaint)."""
    info = family_info(config.model_type)
    out = []
    for i, sample in enumerate(config.samples or []):
        if not getattr(sample, "sample_inpainting", False) or not getattr(sample, "enabled", True):
            continue
        if info is None or not info.inpainting:  # ignored there (ignored_sample_options)
            continue
        for key in ("base_image_path", "mask_image_path"):
            value = str(getattr(sample, key, "") or "").strip()
            if not value:
                out.append(f"samples[{i}].{key}: empty; an inpainting sample needs a base image and a mask (white = repaint).")
            elif not _is_file(value):
                out.append(f"samples[{i}].{key}: file '{value[:300]}' does not exist.")
    return out


def control_sample_problems(config: Any) -> list[str]:
    """`samples[i].control_image`: only an image-editing or image-to-video family reads one, and it must be a file."""
    info = family_info(config.model_type)
    out = []
    for i, sample in enumerate(config.samples or []):
        value = str(getattr(sample, "control_image", "") or "").strip()
        if not value or not getattr(sample, "enabled", True):
            continue
        if info is None or not info.reads_sample_image:
            out.append(f"samples[{i}].control_image: {config.model_type.value} samples from a prompt alone; clear it, "
                       "or train an image-editing (QWEN_IMAGE_EDIT) or image-to-video (WAN_2_1_I2V, WAN_2_2_I2V_A14B, WAN_2_2_TI2V_5B, LTX_2) model type.")
        elif not _is_file(value):
            out.append(f"samples[{i}].control_image: file '{value[:300]}' does not exist.")
    return out


def _is_file(path: str) -> bool:
    try:
        return Path(path).expanduser().is_file()
    except (OSError, ValueError):
        return False
