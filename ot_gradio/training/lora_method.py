"""The LORA training method: adapters (LoRA, DoRA, LoHa or LoKr: `peft_type`, `lora_decompose`)
on the UNet and/or text encoder, saved as a kohya or PEFT LoRA file. Additional embeddings train (or are used) alongside; each is
written as its own file next to the LoRA and, with `bundle_additional_embeddings`, also into it (`bundle_emb.*`).
The header (kohya keys, model spec, the config as `include_train_config` asks) is output_metadata.py's."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import torch

from ..config.enums import ModelFormat, TrainingMethod
from ..config.families import lora_layout
from ..config.output_formats import dora_format_problem, fused_lora_problem, kohya_lora_problem, lora_reader_problems
from ..config.parts import learning_rate_or_base
from ..models.original_lora_names import original_lora_names
from .device import output_dtype
from .embedding_method import save_embedding_files
from .embeddings import EmbeddingSupport
from .lora import adapters_disabled, add_lora, file_layers, has_lora, load_lora_state_dict, lora_state_dict
from .lora_dropouts import install_lora_dropouts
from .lora_format import DIFFUSERS, LoadedLora, load_lora_file, save_lora
from .lora_layer_entries import check_output_format, check_start_file, part_spec, split_key
from .lora_max_norm import LoraMaxNorm
from .lora_variants import AdapterSpec
from .method_base import register
from .output_metadata import largest_resolution, model_metadata
from .param_groups import ParamGroup
from .start_files import start_lora_file


def lora_file_format(config: Any) -> str:
    """The key layout the config's LoRA file is written in: lora_format.KOHYA or DIFFUSERS, the names
    families.lora_layout gives."""
    layout = lora_layout(config.model_type, config.output_model_format)
    if layout is None:
        raise ValueError(
            f"output_model_format: {ModelFormat(config.output_model_format).value} is not a LoRA format the trainer writes; "
            "use KOHYA_LORA or COMFY_LORA (kohya keys: ComfyUI; A1111, Forge and diffusers for SD 1.x/2.x/SDXL), "
            "DIFFUSERS_LORA (diffusers/PEFT keys) or SAFETENSORS (kohya keys for SD 1.x/2.x/SDXL, diffusers keys otherwise)"
        )
    return layout


def trainable_parts(model: Any) -> tuple[str, ...]:
    """The parts LoRA can adapt: the denoiser and the text encoders."""
    return (model.denoiser, *model.text_encoder_names)


def kohya_module_names(model: Any) -> dict[str, dict[str, str]]:
    """The family's renames for kohya files (SDXL: the original UNet names); none for SD 1.x/2.x."""
    return model.lora_module_names()


# layer names that tell which model a LoRA file was made for (its unknown layers, `.`/`_` alike)
_MADE_FOR = (
    (r"(double|single)[._]blocks", "Flux.1's, Chroma's, Flux.2's or HunyuanVideo's original names"),
    (r"(input|output)[._]blocks|middle[._]block", "the original SD 1.x/2.x or SDXL UNet names"),
    (r"down[._]blocks|up[._]blocks|mid[._]block", "diffusers' SD 1.x/2.x or SDXL UNet names"),
    (r"^blocks[._]\d+[._](self|cross)[._]attn", "Wan's original names"),
    (r"^blocks[._]\d+[._]attn\d", "diffusers' Wan names"),
    (r"^layers[._]\d+[._](attention|feed[._]forward)", "Z-Image's or Lumina's names"),
    (r"joint[._]blocks", "SD 3's original names"),
    (r"transformer[._]blocks[._]\d+[._](attn|img[._]mlp|txt[._]mlp|ff)", "diffusers' names of an MMDiT (Qwen-Image, Flux, SD 3)"),
)


def made_for(unknown: list[str]) -> str:
    """A guess, from layer names a model lacks, at the model a LoRA file was made for."""
    for pattern, family in _MADE_FOR:
        if any(re.search(pattern, name) for name in unknown):
            return f"its layer names look like {family}: was it made for another model type?"
    return "was it made for another model type?"


@contextmanager
def base_lora_errors(path: Path) -> Iterator[None]:
    """Every refusal of the Base LoRA file starts `lora_model_name: <file>: `: the field and the file to fix."""
    try:
        yield
    except ValueError as error:
        message = str(error)
        for lead in (f"lora_model_name: {path}: ", f"lora_model_name: {path} ", f"{path}: ", f"{path} "):
            if message.startswith(lead):
                message = message[len(lead):]
                break
        raise ValueError(f"lora_model_name: {path}: {message}") from error


def read_start_file(model: Any, path: Path, spec: AdapterSpec) -> tuple[LoadedLora, AdapterSpec]:
    """The Base LoRA file as the model's parts, and the adapter spec to continue with (check_start_file)."""
    start = load_lora_file(path, module_names=kohya_module_names(model), denoiser=model.denoiser,
                           read_names=original_lora_names(model), base_model_version=model.lora_base_model_version)
    other = [part for part in start.parts if part not in trainable_parts(model)]
    if other:  # a part the model lacks would be dropped without a word
        layers = sorted({(split_key(k) or (k, ""))[0] for k in start.parts[other[0]]})
        raise ValueError(f"{len(layers)} {other[0].replace('_', ' ')} layer(s) (e.g. {layers[0]}), a part this "
                         f"{model.model_type.value} model does not have (it has "
                         f"{', '.join(p.replace('_', ' ') for p in trainable_parts(model))}): was it made for another model type?")
    return start, check_start_file(spec, start.parts, path)


def lora_kind(model: Any, part: str) -> str:
    """Which of lora.py's layer tables a part uses: the denoiser's or a text encoder's."""
    return "text_encoder" if part in model.text_encoder_names else "unet"


@register(TrainingMethod.LORA)
class LoraMethod(EmbeddingSupport):
    max_norm: LoraMaxNorm | None = None

    def setup(self, model: Any, config: Any, device: torch.device) -> list[ParamGroup]:
        spec = AdapterSpec.from_config(config)  # bad settings fail before any training
        check_output_format(spec, lora_file_format(config) == DIFFUSERS)
        problems = [p for p in (dora_format_problem(config), fused_lora_problem(config), kohya_lora_problem(config),
                                *lora_reader_problems(config)) if p]
        if problems:
            raise ValueError(problems[0])
        for module in model.parts.values():
            module.requires_grad_(False)
        start = None
        if config.lora_model_name:
            path = start_lora_file(config)
            with base_lora_errors(path):
                start, spec = read_start_file(model, path, spec)
        rank, alpha = (start.rank, start.alpha) if start else (spec.rank(config), config.lora_alpha)
        dtype = output_dtype(config.lora_weight_dtype)
        groups = []
        for part in trainable_parts(model):
            part_cfg = getattr(config, part)
            from_file = start is not None and part in start.parts
            if not part_cfg.train and not from_file:
                continue
            kind = lora_kind(model, part)
            preset, layer_filter, regex = config.layer_filter_preset, config.layer_filter, config.layer_filter_regex
            if kind == "text_encoder" and preset == "custom":
                preset = "full"  # as in OneTrainer, the layer filter selects denoiser layers only
            if kind == "text_encoder":
                layer_filter = ""
            if from_file:  # a LoRA continues on its own layers, whatever preset trained it (kohya's, another trainer's)
                preset, regex = "custom", True
                layer_filter, unknown = file_layers(getattr(model, part), kind, start.parts[part])
                if unknown:
                    raise ValueError(f"lora_model_name: {path}: {len(unknown)} {part.replace('_', ' ')} layer(s) this "
                                     f"{model.model_type.value} model does not have (e.g. {unknown[0]}); "
                                     f"{made_for(unknown)}")
            params = add_lora(
                getattr(model, part),
                kind=kind,
                rank=rank,
                alpha=alpha,
                dropout=config.dropout_probability,
                layer_preset=preset,
                layer_filter=layer_filter,
                layer_filter_regex=regex,
                dtype=dtype,
                # a family whose module names differ from SD's UNet/CLIP gives its own presets
                presets=model.lora_layer_presets.get(part),
                spec=part_spec(spec, part),
            )
            if from_file:
                with base_lora_errors(path):
                    load_lora_state_dict(getattr(model, part), start.parts[part], kind=kind)
            getattr(model, part).to(device)
            if not part_cfg.train:  # the file's layers of a part not trained: applied and saved as they are, frozen
                for p in params:
                    p.requires_grad_(False)
                continue
            groups.append(ParamGroup(name=part, params=params, lr=learning_rate_or_base(part_cfg.learning_rate, config.learning_rate)))
        install_lora_dropouts((getattr(model, g.name) for g in groups), config.lora_rank_dropout, config.lora_module_dropout)
        self.max_norm = None
        if config.lora_max_norm:  # kohya's scale_weight_norms (kohya_lora_problem: plain LoRA only)
            self.max_norm = LoraMaxNorm((getattr(model, g.name) for g in groups), config.lora_max_norm)
        return groups + self.setup_embeddings(model, config, device)

    def after_optimizer_step(self, model: Any) -> None:
        super().after_optimizer_step(model)
        if self.max_norm is not None:
            self.max_norm.apply()

    def base_model(self, model: Any) -> Callable[[], AbstractContextManager]:
        """The LoRA turned off, as OneTrainer's prior model (embeddings stay)."""
        return lambda: adapters_disabled(getattr(model, part) for part in trainable_parts(model))

    def trainable_state(self, model: Any) -> dict[str, torch.Tensor]:
        state = {}
        for part in trainable_parts(model):
            module = getattr(model, part)
            if has_lora(module):
                state.update({f"{part}.{k}": v for k, v in lora_state_dict(module).items()})
        return {**state, **self.embedding_state()}

    def load_trainable_state(self, model: Any, state: dict[str, torch.Tensor]) -> None:
        for part in trainable_parts(model):
            sub = {k[len(part) + 1 :]: v for k, v in state.items() if k.startswith(part + ".")}
            if sub:
                load_lora_state_dict(getattr(model, part), sub, kind=lora_kind(model, part))
        self.load_embedding_state(state)

    def save(self, model: Any, config: Any, path: Path, metadata: dict[str, str]) -> Path:
        parts = {p: getattr(model, p) for p in trainable_parts(model) if has_lora(getattr(model, p))}
        dtype = output_dtype(config.output_dtype)
        steps, epoch = int(metadata.get("ss_steps", 0)), int(metadata.get("ss_epoch", 0))
        bundle = config.bundle_additional_embeddings and self.additional
        # bundled or not, each embedding is also its own file (the only form ComfyUI reads)
        save_embedding_files(self, model, config, path, dtype, steps=steps, epoch=epoch)
        fmt = lora_file_format(config)
        header = model_metadata(
            config, model, kind="lora", title=Path(path).stem, steps=steps, epoch=epoch,
            trigger_phrases=[e.placeholder for e in self.additional], diffusers_layout=fmt == DIFFUSERS,
        )
        return save_lora(
            path,
            parts,
            module_names=kohya_module_names(model),
            base_model_version=model.lora_base_model_version,
            lora_format=fmt,
            dtype=dtype,
            extra_tensors=self.embeddings.bundle_tensors(self.additional, dtype) if bundle else None,
            resolution=largest_resolution(config),
            steps=steps,
            epoch=epoch,
            output_name=Path(path).stem,
            extra_metadata=header,
        )
