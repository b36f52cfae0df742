"""The FINE_TUNE training method: the denoiser and/or text encoders themselves train (each part
whose `train` is on, with its own learning rate), plus any additional embeddings. Saved as an
original-layout single file (SAFETENSORS / ORIGINAL_SINGLE_FILE: what A1111, ComfyUI and
diffusers' `from_single_file` load, as OneTrainer's SAFETENSORS is), as the transformer alone
(ORIGINAL_TRANSFORMER / COMFY_TRANSFORMER, for families whose single file is that) or as a diffusers folder;
additional embeddings as their own files next to it. Backups hold the full trained weights."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from ..config.enums import DataType, ModelFormat, TrainingMethod
from ..config.parts import learning_rate_or_base
from ..models.common import base_module, tied_aliases, without_aliases
from .device import QUANTIZED_TYPES, output_dtype, quantized_part_trained
from .embedding_method import save_embedding_files
from .embeddings import EmbeddingSupport
from .lora import LAYER_PRESETS, entry_matches, filter_entries
from .method_base import register
from .output_metadata import add_folder_metadata, model_metadata
from .param_groups import ParamGroup

# OneTrainer writes the original-layout single file for ORIGINAL_SINGLE_FILE / LEGACY_SAFETENSORS,
# and did so for SAFETENSORS before those names existed
SINGLE_FILE = (ModelFormat.SAFETENSORS, ModelFormat.ORIGINAL_SINGLE_FILE, ModelFormat.LEGACY_SAFETENSORS)
CHECKPOINT_SUFFIXES = (".safetensors", ".ckpt")


# OneTrainer's transformer-only files (what ComfyUI's diffusion-model loader reads): written by
# families whose single file is the transformer alone (`transformer_file = True`: PixArt, Flux)
TRANSFORMER_FILE = (ModelFormat.ORIGINAL_TRANSFORMER, ModelFormat.COMFY_TRANSFORMER)


def check_finetune_format(fmt: ModelFormat, model: Any = None) -> None:
    fmt = ModelFormat(fmt)
    if fmt in TRANSFORMER_FILE and model is not None and not model.transformer_file:
        raise ValueError(
            f"output_model_format: {fmt.value} is the transformer alone, which this model type does not write; use "
            "SAFETENSORS or ORIGINAL_SINGLE_FILE (one .safetensors checkpoint) or DIFFUSERS (a folder)"
        )
    if fmt not in (*SINGLE_FILE, *TRANSFORMER_FILE, ModelFormat.DIFFUSERS):
        raise ValueError(
            f"output_model_format: {fmt.value} is not a whole-model format; use SAFETENSORS or "
            "ORIGINAL_SINGLE_FILE (one .safetensors checkpoint for A1111, ComfyUI, Forge) or DIFFUSERS (a folder)"
        )


def layers_trained(model: Any, module: torch.nn.Module, config: Any) -> None:
    """The layer preset (or filter) picks the denoiser's weights that train, as in OneTrainer's
    fine-tune: a weight whose name holds none of its entries is frozen ("full": all train). An
    entry that matches no weight is refused, as for a LoRA (a typo would freeze the whole model)."""
    if config.layer_filter_preset == "full":  # OneTrainer's blank filter (a LoRA's "full" table may list layer kinds)
        return
    table = model.lora_layer_presets.get(model.denoiser) or LAYER_PRESETS["unet"]
    entries, regex = filter_entries(config.layer_filter_preset, config.layer_filter, config.layer_filter_regex, table)
    if not entries:
        return
    used: set[str] = set()
    for name, param in base_module(module).named_parameters():
        hits = [e for e in entries if entry_matches(e, name, regex)]
        used.update(hits)
        param.requires_grad_(bool(hits))
    if unused := [e for e in entries if e not in used]:
        raise ValueError(f"layer_filter: {', '.join(repr(e) for e in unused)} matched no weight of the {model.denoiser} "
                         f"(layer preset {config.layer_filter_preset}); check the names, or pick another layer preset")
    params = list(base_module(module).parameters())
    trained = sum(p.numel() for p in params if p.requires_grad)
    print(f"layer preset {config.layer_filter_preset}: {trained:,} of {sum(p.numel() for p in params):,} {model.denoiser} "
          "weights train, the others are frozen", flush=True)


@register(TrainingMethod.FINE_TUNE)
class FineTuneMethod(EmbeddingSupport):
    def setup(self, model: Any, config: Any, device: torch.device) -> list[ParamGroup]:
        check_finetune_format(config.output_model_format, model)
        for module in model.parts.values():
            module.requires_grad_(False)
        groups = []
        self.trained_parts: list[str] = []
        for part in (model.denoiser, *model.text_encoder_names):
            part_cfg = getattr(config, part)
            if not part_cfg.train:
                continue
            if DataType(part_cfg.weight_dtype) in QUANTIZED_TYPES:  # int8 codes cannot even be asked for a gradient
                raise ValueError(quantized_part_trained(part, part_cfg.weight_dtype))
            self.trained_parts.append(part)
            module = model.parts[part]
            module.requires_grad_(True)
            if part == model.denoiser:
                layers_trained(model, module, config)
            params = [p for p in module.parameters() if p.requires_grad]
            groups.append(ParamGroup(name=part, params=params, lr=learning_rate_or_base(part_cfg.learning_rate, config.learning_rate)))
        return groups + self.setup_embeddings(model, config, device)

    def trainable_state(self, model: Any) -> dict[str, torch.Tensor]:
        """The whole state of every part that trains (or trained until its stop_training_after),
        so continuing from a backup restores exactly these weights."""
        state: dict[str, torch.Tensor] = {}
        for part in self.trained_parts:
            weights = without_aliases(base_module(model.parts[part]).state_dict())  # tied weights once (safetensors)
            state.update({f"{part}.{k}": v.detach() for k, v in weights.items()})
        return {**state, **self.embedding_state()}

    def load_trainable_state(self, model: Any, state: dict[str, torch.Tensor]) -> None:
        """The backup's weights into their parts; a part the backup holds that this model does not
        load (a text encoder left out: resume.py refuses it first) is an error, never skipped."""
        parts = (model.denoiser, *model.text_encoder_names)
        unused = sorted({k.split(".", 1)[0] for k in state if not k.startswith("embedding.")} - set(parts))
        if unused:
            raise ValueError(f"continue_last_backup: the backup holds trained {', '.join(unused)} weights, but this model does "
                             f"not load {'that part' if len(unused) == 1 else 'those parts'} (it has {', '.join(parts)}): "
                             "they would not be used and the saved model would lack them")
        for part in parts:
            sub = {k[len(part) + 1 :]: v for k, v in state.items() if k.startswith(part + ".")}
            if not sub:
                continue
            module = base_module(model.parts[part])
            aliases = tied_aliases(module.state_dict())
            missing, unexpected = module.load_state_dict(sub, strict=False)
            missing = [k for k in missing if aliases.get(k) not in sub]  # a tied alias loads with its first key
            if missing or unexpected:
                raise ValueError(
                    f"continue_last_backup: the backup's {part} weights do not fit this model "
                    f"({len(missing)} missing, {len(unexpected)} unexpected, e.g. {(missing or unexpected)[:2]})"
                )
        self.load_embedding_state(state)

    def save(self, model: Any, config: Any, path: Path, metadata: dict[str, str]) -> Path:
        fmt = ModelFormat(config.output_model_format)
        dtype = output_dtype(config.output_dtype)
        path = Path(path)
        steps, epoch = int(metadata.get("ss_steps", 0)), int(metadata.get("ss_epoch", 0))
        header = model_metadata(
            config, model, kind="checkpoint", title=path.stem, steps=steps, epoch=epoch,
            trigger_phrases=[e.placeholder for e in self.additional], diffusers_layout=fmt == ModelFormat.DIFFUSERS,
        )
        with self.embeddings.original_tokenizers() if self.embeddings is not None else nullcontext():
            if fmt == ModelFormat.DIFFUSERS:
                if path.suffix.lower() in CHECKPOINT_SUFFIXES:
                    path = path.with_suffix("")  # a folder, not "model.safetensors/"
                written = Path(model.save_diffusers(path, dtype))
                add_folder_metadata(written, header)
            else:
                if path.suffix.lower() not in CHECKPOINT_SUFFIXES:  # "models/model" (OneTrainer's presets): a file
                    path = path.with_name(path.name + ".safetensors")
                written = Path(model.save_single_file(path, dtype, metadata=header))
        save_embedding_files(self, model, config, written, dtype, steps=steps, epoch=epoch)
        return written
