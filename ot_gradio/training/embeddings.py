"""Textual-inversion embeddings: new tokens in the text encoders, their vectors, their files.

How they live in a model (as OneTrainer's AdditionalEmbeddingWrapper does it): an embedding of
`n` tokens adds the tokens `<uuid_0>` ... `<uuid_n-1>` to the tokenizer of every text encoder,
and each encoder's input embedding module is replaced by a `TokenEmbedding`. That module shares
the original matrix (so the text encoder's state dict, and every checkpoint saved from it, keep
the original layout) and looks the new ids up in the embeddings' own vectors. The original rows
are never in an optimizer and stay bit-identical; the vectors keep their own data type
(`embedding_weight_dtype`). Gradients reach the vectors through the frozen text encoder.

In captions and prompts the embedding's placeholder (`<embedding>` by default) is replaced by
its token string before tokenizing (`Embeddings.expand`).

Files (what A1111, Forge, ComfyUI and diffusers read; keys and reading: embedding_files.py)
- one `.safetensors` per embedding, one tensor [tokens, width] per text encoder under the
  family's `embedding_keys` (OneTrainer's): `emp_params` for SD 1.x/2.x (a single-tensor file,
  which A1111, ComfyUI and diffusers' `load_textual_inversion` take whatever its key),
  `clip_l` + `clip_g` for SDXL, ...; beside other keys `t5` has a `t5xxl` copy, the key
  ComfyUI's T5 tokenizers read;
- bundled in a LoRA file: `bundle_emb.<placeholder>.string_to_param.*` for SD 1.x/2.x (the key
  kohya's bundler writes), `bundle_emb.<placeholder>.<key>` otherwise. A1111 and Forge read
  these; ComfyUI's LoRA loader skips them, so each embedding is always its own file too.
Reading also takes `emb_params` (this trainer's earlier key), A1111 `.pt` files
(`string_to_param`) and diffusers' single-token files.

Output embeddings (output_embeddings.py) keep their output vectors under `<key>_out` in place of
`<key>` (`emp_params_out` for SD 1.x/2.x and `bundle_emb.<placeholder>.clip_l_out` in a LoRA, as
OneTrainer writes them), in the output data type; only OneTrainer and this trainer read them. A
file with such keys continues as an output embedding.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ot_gradio.fsutil import atomic_write

from ..config.enums import TimeUnit
from ..config.parts import learning_rate_or_base
from ..models.common import base_module
from .embedding_files import (
    OUT_SUFFIX,
    bundle_key,
    bundle_output_key,
    input_vectors,
    load_embedding_tensors,
    output_key,
    output_vectors,
    with_comfy_copies,
)
from .method_base import Method
from .output_embeddings import OutputVectors, initial_output_vectors, original_std, output_width, rescale
from .param_groups import ParamGroup


def _host_copy(t: torch.Tensor) -> torch.Tensor:
    """A detached CPU copy (a meta one for the memory planner's model on the meta device)."""
    return t.detach().to("meta" if t.is_meta else "cpu", copy=True)


class TokenEmbedding(nn.Embedding):
    """A text encoder's input embedding that also knows the embeddings' tokens.

    Ids below `first_new_id` come from the original matrix (shared, not copied); ids from
    `first_new_id` on come from `vectors`, which are plain tensors held outside the module's
    parameters, so `state_dict()` and `parameters()` are exactly the original module's."""

    def __init__(self, original: nn.Embedding, first_new_id: int):
        nn.Module.__init__(self)
        for name in ("num_embeddings", "embedding_dim", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"):
            setattr(self, name, getattr(original, name))
        self.weight = original.weight
        self.first_new_id = int(first_new_id)
        self.vectors: list[torch.Tensor] = []  # one [tokens, width] tensor per embedding, in token order
        self.__dict__["original"] = original  # not a submodule: restored by `uninstall`

    @property
    def new_token_count(self) -> int:
        return sum(int(v.shape[0]) for v in self.vectors)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        known = ids.clamp(max=self.first_new_id - 1)
        out = F.embedding(known, self.weight, self.padding_idx, self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse)
        if not self.vectors:
            return out
        table = torch.cat([v.to(out.device, out.dtype) for v in self.vectors])
        new = ids >= self.first_new_id
        picked = table[(ids - self.first_new_id).clamp(0, table.shape[0] - 1)]
        return torch.where(new.unsqueeze(-1), picked, out)


@dataclass
class Embedding:
    settings: Any  # config.parts.EmbeddingConfig
    field: str  # where it is in the config ("embedding", "additional_embeddings[0]"), for messages
    tokens: list[str]
    vectors: dict[str, torch.Tensor]  # text encoder part -> [tokens, width] (nn.Parameter)
    initial: dict[str, torch.Tensor] = field(default_factory=dict)
    # an output embedding's: part -> [tokens, output width] float32 (nn.Parameter), its starting
    # values and their mean row deviation (preserve_embedding_norm); {} for an input embedding
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    initial_outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    output_stds: dict[str, float] = field(default_factory=dict)
    first_ids: dict[str, int] = field(default_factory=dict)  # part -> the token id of its first token

    @property
    def placeholder(self) -> str:
        return self.settings.placeholder

    @property
    def token_string(self) -> str:
        return "".join(self.tokens)

    @property
    def trains(self) -> bool:
        return any(v.requires_grad for v in self.trained_vectors().values())

    def trained_vectors(self) -> dict[str, torch.Tensor]:
        """Per text encoder part the tensor that learns: the output vectors where there are some."""
        return {**self.vectors, **self.outputs}

    @property
    def name(self) -> str:
        """A file name: the placeholder without characters file names cannot hold."""
        return safe_name(self.placeholder) or self.settings.uuid

    @property
    def bundle_name(self) -> str:
        """The name inside a LoRA file: the placeholder itself, as OneTrainer bundles it (A1111
        then triggers it with the same text the captions used); a '.' would split the key."""
        return self.placeholder.replace(".", "_")


def safe_name(text: str) -> str:
    return re.sub(r"[^\w\-]+", "_", text).strip("_")


def family_tokenizers(model: Any) -> dict[str, Any]:
    tokenizers = model.tokenizers
    if not tokenizers or any(part not in tokenizers for part in model.text_encoder_names):
        raise ValueError(f"embeddings: the {type(model).__name__} family names no tokenizer for each text encoder (`tokenizers`); embeddings are not supported for it yet")
    return dict(tokenizers)


def family_embedding_keys(model: Any) -> dict[str, str]:
    keys = model.embedding_keys
    if not keys or any(part not in keys for part in model.text_encoder_names):
        raise ValueError(f"embeddings: the {type(model).__name__} family has no embedding file keys (`embedding_keys`); embeddings are not supported for it yet")
    return dict(keys)


def initial_vectors(tokenizer: Any, matrix: torch.Tensor, text: str, token_count: int | None) -> torch.Tensor:
    """The starting vectors, as OneTrainer makes them: the token embeddings of `text` (without
    start/end tokens), cut to `token_count` and filled up with the embedding of '*'.
    `token_count` None = as many as the text has."""
    ids = tokenizer(text, add_special_tokens=False).input_ids if text else []
    star = tokenizer("*", add_special_tokens=False).input_ids[:1]
    count = max(1, len(ids)) if token_count is None else int(token_count)
    ids = (list(ids)[:count] + star * count)[:count]
    return matrix[torch.tensor(ids, device=matrix.device)].detach().clone()


def caption_warnings(embeddings: Embeddings | None, concepts: Any) -> list[str]:
    """The trained embeddings whose placeholder the training captions lack: an embedding learns
    only from items whose caption holds it. The run's own embedding (EMBEDDING) is named for
    every caption without it, an additional one (beside a LoRA or fine-tune, often for one
    concept of several) only when no caption holds it. Regularization concepts are left out."""
    if embeddings is None:
        return []
    items = [(concept, item) for concept in concepts
             if str(getattr(getattr(concept.config, "type", ""), "value", "STANDARD")) == "STANDARD" for item in concept.scan.items]
    out = []
    for embedding in embeddings.items:
        if not embedding.trains or not items:
            continue
        # a caption prefix or suffix (TextAugment.frame) may hold the placeholder
        without = [i for c, i in items if not any(embedding.placeholder in c.text.frame(caption) for caption in i.captions)]
        if len(without) == len(items):
            out.append(f"{embedding.field}.placeholder: '{embedding.placeholder}' is in none of the training captions, so this "
                       "embedding is not trained (samples use it as it started). Write it into the captions where it belongs, "
                       f"e.g. 'a photo of {embedding.placeholder}'")
        elif without and embedding.field == "embedding":
            names = ", ".join(i.path.name for i in without[:3]) + (f" and {len(without) - 3} more" if len(without) > 3 else "")
            out.append(f"embedding.placeholder: '{embedding.placeholder}' is missing from the captions of {len(without)} of "
                       f"{len(items)} training images ({names}): their steps train nothing of the embedding")
    return out


class Embeddings:
    """The embeddings of a run, installed in one model's tokenizers and text encoders."""

    def __init__(self, model: Any, device: torch.device | str, dtype: torch.dtype = torch.float32):
        self.model = model
        self.device = torch.device(device)
        self.dtype = dtype
        self.items: list[Embedding] = []
        self.tokenizers = family_tokenizers(model)
        self.keys = family_embedding_keys(model)
        self._original_tokenizers = {part: copy.deepcopy(tok) for part, tok in self.tokenizers.items()}
        self.modules: dict[str, TokenEmbedding] = {}
        self.median_norms: dict[str, float] = {}
        for part in model.text_encoder_names:
            encoder = base_module(model.parts[part])
            current = encoder.get_input_embeddings()
            if isinstance(current, TokenEmbedding):
                raise ValueError(f"the {part} already has embeddings installed")
            module = TokenEmbedding(current, len(self.tokenizers[part]))
            encoder.set_input_embeddings(module)
            self.modules[part] = module
            rows = module.weight[: module.first_new_id].detach().float()
            # (a model on the meta device, which the memory planner builds, has no values to read)
            self.median_norms[part] = 1.0 if rows.is_meta else float(rows.norm(dim=1).median())
        self.output_parts = [p for p in model.text_encoder_names if p in model.output_embedding_parts]
        self.hook = OutputVectors(self.items)
        model.output_embeddings = self.hook

    # --- adding -----------------------------------------------------------------------------
    def add(self, settings: Any, *, field: str, train: bool, train_parts: frozenset[str] | set[str]) -> Embedding:
        """Install one embedding (config.parts.EmbeddingConfig): from its file (`model_name`) or
        from its initial text. Its vectors train in the text encoders named in `train_parts`
        when `train` is on, and are used frozen otherwise."""
        if not settings.placeholder.strip():
            raise ValueError(f"{field}.placeholder: is empty; give the text that stands for the embedding, e.g. <embedding>")
        for other in self.items:
            if other.settings.uuid == settings.uuid:
                raise ValueError(f"{field}.uuid: {other.field} has the same id; give each embedding its own")
            if other.placeholder == settings.placeholder:
                raise ValueError(f"{field}.placeholder: {other.field} uses '{settings.placeholder}' too; give each embedding its own placeholder")
        parts = list(self.model.text_encoder_names)
        outputs: dict[str, torch.Tensor] = {}
        if settings.model_name:
            widths = {p: self.modules[p].embedding_dim for p in parts}
            tensors = load_embedding_tensors(settings.model_name, field)
            outputs = output_vectors(tensors, self.keys, {p: output_width(self.model, p) for p in self.output_parts}, settings.model_name, field)
            if settings.is_output_embedding and not outputs:
                raise ValueError(
                    f"{field}.is_output_embedding: {settings.model_name} holds input vectors (no "
                    f"'{output_key(self.keys[self.output_parts[0]])}' key); turn Output embedding off to continue it, "
                    "or leave Base embedding blank to start a new output embedding"
                )
            keys = {p: k for p, k in self.keys.items() if p not in outputs}
            start = input_vectors(tensors, keys, widths, settings.model_name, field) if keys else {}
            counts = {int(v.shape[0]) for v in (*start.values(), *outputs.values())}
            if len(counts) > 1:
                raise ValueError(f"{field}.model_name: {settings.model_name} has a different token count per text encoder")
            # zero input vectors where the file has output ones (those of a part not read unused, as OneTrainer)
            start |= {part: torch.zeros(min(counts), widths[part]) for part in outputs}
            outputs = {p: v for p, v in outputs.items() if p in self.output_parts}
        else:
            start, count = {}, settings.token_count
            for part in parts:
                module = self.modules[part]
                start[part] = initial_vectors(self.tokenizers[part], module.weight[: module.first_new_id], settings.initial_embedding_text, count)
                count = start[part].shape[0]
        output = bool(outputs) or bool(settings.is_output_embedding)
        if output and not self.output_parts:
            raise ValueError(f"{field}.is_output_embedding: the {type(self.model).__name__} family has no text encoder output to put it in; turn it off")
        count = int(start[parts[0]].shape[0])
        tokens = [f"<{settings.uuid}_{i}>" for i in range(count)]
        vectors: dict[str, torch.Tensor] = {}
        first_ids: dict[str, int] = {}
        for part in parts:
            module, tokenizer = self.modules[part], self.tokenizers[part]
            if any(t in tokenizer.get_vocab() for t in tokens):
                raise ValueError(f"{field}.uuid: the tokens of embedding '{settings.placeholder}' are already in the tokenizer")
            first = module.first_new_id + module.new_token_count
            tokenizer.add_tokens(tokens)
            ids = tokenizer.convert_tokens_to_ids(tokens)
            if ids != list(range(first, first + count)):
                raise RuntimeError(f"the {part} tokenizer gave the new tokens ids {ids}, expected {first}..{first + count - 1}")
            vector = nn.Parameter(start[part].to(self.device, self.dtype), requires_grad=bool(train and part in train_parts and not output))
            module.vectors.append(vector)
            vectors[part] = vector
            first_ids[part] = first
        embedding = Embedding(settings, field, tokens, vectors, {p: _host_copy(v) for p, v in start.items()}, first_ids=first_ids)
        if output:
            self._make_output(embedding, outputs, train=bool(train), train_parts=train_parts)
        self.items.append(embedding)
        return embedding

    def _make_output(self, embedding: Embedding, outputs: dict[str, torch.Tensor], *, train: bool, train_parts: frozenset[str] | set[str]) -> None:
        """An output embedding's output vectors: from its file, or the encoders' output for its
        initial text (read while its input vectors are still the initial text's); then the input
        vectors of those parts become zeros, and those of the family's
        `zeroed_output_embedding_parts` too (HiDream's Llama, as OneTrainer)."""
        if not outputs:
            outputs = initial_output_vectors(self.model, self.hook, embedding, self.output_parts)
        zeroed = [p for p in getattr(self.model, "zeroed_output_embedding_parts", ()) if p in embedding.vectors]
        for part in (*outputs, *zeroed):
            embedding.vectors[part].data.zero_()
            embedding.initial[part] = torch.zeros_like(embedding.initial[part])
        for part, start in outputs.items():
            embedding.initial_outputs[part] = _host_copy(start)
            embedding.output_stds[part] = original_std(start)
            embedding.outputs[part] = nn.Parameter(start.to(self.device, torch.float32), requires_grad=train and part in train_parts)

    def uninstall(self) -> None:
        """Put the original input embeddings back (the tokenizers keep the added tokens)."""
        for part, module in self.modules.items():
            base_module(self.model.parts[part]).set_input_embeddings(module.original)
        self.model.output_embeddings = None

    # --- training ---------------------------------------------------------------------------
    def expand(self, text: str) -> str:
        """`text` with every placeholder replaced by its embedding's tokens (longest first, so
        '<a>' cannot eat into '<ab>')."""
        for embedding in sorted(self.items, key=lambda e: len(e.placeholder), reverse=True):
            text = text.replace(embedding.placeholder, embedding.token_string)
        return text

    def param_groups(self, lr: float) -> list[ParamGroup]:
        """One optimizer group per embedding and text encoder. `part` names the text encoder, so
        the trainer lets gradients flow through it; the embedding's own stop_training_after
        travels with the group."""
        groups = []
        several = len(self.modules) > 1
        for embedding in self.items:
            for part, vector in embedding.trained_vectors().items():
                if not vector.requires_grad:
                    continue
                s = embedding.settings
                groups.append(ParamGroup(
                    name=f"embedding/{embedding.placeholder}" + (f"/{part}" if several else ""), params=[vector], lr=lr,
                    part=part, stop_training_after=s.stop_training_after,
                    stop_training_after_unit=TimeUnit(getattr(s.stop_training_after_unit, "value", s.stop_training_after_unit)),
                ))
        return groups

    @torch.no_grad()
    def normalize(self) -> None:
        """`preserve_embedding_norm`: trained vectors back to the median length of the text
        encoder's own token embeddings, trained output vectors back to their starting mean row
        deviation (as OneTrainer does after each optimizer step)."""
        for embedding in self.items:
            for part, vector in embedding.vectors.items():
                if vector.requires_grad:
                    vector.copy_(F.normalize(vector.float(), dim=-1).mul_(self.median_norms[part]).to(vector.dtype))
            for part, vector in embedding.outputs.items():
                if vector.requires_grad:
                    rescale(vector, embedding.output_stds[part])

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Backup keys `embedding.<position>.<uuid>.<part>` (position 0 = the EMBEDDING method's,
        then the additional ones in order)."""
        return {
            f"embedding.{i}.{e.settings.uuid}.{part}": v.detach()
            for i, e in enumerate(self.items) for part, v in e.vectors.items()
        } | {
            f"embedding.{i}.{e.settings.uuid}.{part}{OUT_SUFFIX}": v.detach()
            for i, e in enumerate(self.items) for part, v in e.outputs.items()
        }

    @torch.no_grad()
    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Vectors from a backup, matched by the embedding's uuid, or else by its position (a
        config loaded without uuids gets new ones)."""
        by_uuid: dict[tuple[str, str], torch.Tensor] = {}
        by_position: dict[tuple[str, str], torch.Tensor] = {}
        for key, tensor in state.items():
            parts = key.split(".")
            if len(parts) == 4 and parts[0] == "embedding":
                by_position[(parts[1], parts[3])] = by_uuid[(parts[2], parts[3])] = tensor
        for i, embedding in enumerate(self.items):
            stored = {**embedding.vectors, **{p + OUT_SUFFIX: v for p, v in embedding.outputs.items()}}
            for part, vector in stored.items():
                found = by_uuid.get((embedding.settings.uuid, part))
                if found is None:
                    found = by_position.get((str(i), part))
                if found is None:
                    continue
                if found.shape != vector.shape:
                    raise ValueError(
                        f"continue_last_backup: the backup's {embedding.field} has {found.shape[0]} tokens but the "
                        f"config's has {vector.shape[0]}; set its token count back or start a new run"
                    )
                vector.copy_(found.to(vector.device, vector.dtype))

    # --- files ------------------------------------------------------------------------------
    def file_tensors(self, embedding: Embedding, dtype: torch.dtype, *, bundle_name: str | None = None) -> dict[str, torch.Tensor]:
        """The embedding's tensors by their key in its file (`bundle_name`: in a LoRA file): the
        output vectors of the parts that have them, else the input vectors; its own file also
        holds ComfyUI's `t5xxl` copy of `t5` (embedding_files.with_comfy_copies)."""
        out = {}
        for part, v in embedding.trained_vectors().items():
            key = self.keys[part]
            if part in embedding.outputs:
                key = output_key(key) if bundle_name is None else bundle_output_key(bundle_name, key)
            elif bundle_name is not None:
                key = bundle_key(bundle_name, key)
            out[key] = v.detach().to("cpu", dtype).contiguous().clone()
        return with_comfy_copies(out) if bundle_name is None else out

    def save(self, embedding: Embedding, path: str | Path, dtype: torch.dtype, metadata: Mapping[str, str] | None = None) -> Path:
        """One embedding as an A1111 `.safetensors` file, atomically."""
        from safetensors.torch import save_file

        path = Path(path)
        meta = {
            "ot_gradio.placeholder": embedding.placeholder,
            "ot_gradio.uuid": embedding.settings.uuid,
            "ot_gradio.token_count": str(len(embedding.tokens)),
            "ot_gradio.model_type": str(getattr(self.model.model_type, "value", self.model.model_type)),
            **{str(k): str(v) for k, v in (metadata or {}).items()},
        }
        tensors = self.file_tensors(embedding, dtype)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=meta))
        return path

    def save_each(self, embeddings: list[Embedding], folder: str | Path, dtype: torch.dtype, metadata: Mapping[str, str] | None = None) -> list[Path]:
        """Each embedding as `<folder>/<placeholder>.safetensors`."""
        return [self.save(e, Path(folder) / f"{e.name}.safetensors", dtype, metadata) for e in embeddings]

    def bundle_tensors(self, embeddings: list[Embedding], dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The embeddings' vectors under the keys of embeddings bundled in a LoRA file."""
        out: dict[str, torch.Tensor] = {}
        for embedding in embeddings:
            out.update(self.file_tensors(embedding, dtype, bundle_name=embedding.bundle_name))
        return out

    @contextmanager
    def original_tokenizers(self) -> Iterator[None]:
        """While saving the whole model, its tokenizers without the embeddings' tokens (the
        embeddings are saved as their own files). Swaps every model attribute that holds a
        live tokenizer, so it works for any family."""
        swapped: list[tuple[str, Any]] = []
        live = {id(tok): part for part, tok in self.tokenizers.items()}
        try:
            for name, value in list(vars(self.model).items()):
                if id(value) in live:
                    swapped.append((name, value))
                    setattr(self.model, name, self._original_tokenizers[live[id(value)]])
            yield
        finally:
            for name, value in swapped:
                setattr(self.model, name, value)


def embeddings_folder(output: str | Path) -> Path:
    """Where the separate embedding files of a LoRA or fine-tune go: `<output>_embeddings/`
    next to the output (OneTrainer's layout, without the output's suffix)."""
    output = Path(output)
    stem = output.name[: -len(output.suffix)] if output.suffix in (".safetensors", ".ckpt", ".pt") else output.name
    return output.with_name(f"{stem}_embeddings")


class EmbeddingSupport(Method):
    """What every method shares for embeddings: the EMBEDDING method's own one and the
    `additional_embeddings` trained or used alongside a LoRA or fine-tune (its `transform_text`
    and `after_optimizer_step` hooks act on them)."""

    embeddings: Embeddings | None = None
    preserve_norm = False
    # the additional embeddings' own files of the last save (save_embedding_files), which the
    # trainer names in the run's events so the page shows them
    embedding_files: tuple[Path, ...] = ()

    def setup_embeddings(self, model: Any, config: Any, device: torch.device, *, main: bool = False) -> list[ParamGroup]:
        from .device import output_dtype
        from .start_files import embedding_settings, local_embedding

        wanted = embedding_settings(config, main=main)
        self.preserve_norm = bool(config.preserve_embedding_norm)
        if not wanted:
            self.embeddings = None
            return []
        self.embeddings = Embeddings(model, device, output_dtype(config.embedding_weight_dtype))
        train_parts = frozenset(p for p in model.text_encoder_names if getattr(config, p).train_embedding)
        for name, settings in wanted:  # (a file given as an address: its download, fetched before the model loaded)
            self.embeddings.add(local_embedding(config, settings, name), field=name, train=settings.train, train_parts=train_parts)
        return self.embeddings.param_groups(learning_rate_or_base(config.embedding_learning_rate, config.learning_rate))

    @property
    def additional(self) -> list[Embedding]:
        if self.embeddings is None:
            return []
        return [e for e in self.embeddings.items if e.field.startswith("additional_embeddings")]

    def transform_text(self, text: str) -> str:
        return self.embeddings.expand(text) if self.embeddings is not None else text

    def after_optimizer_step(self, model: Any) -> None:
        if self.embeddings is not None and self.preserve_norm:
            self.embeddings.normalize()

    def embedding_state(self) -> dict[str, torch.Tensor]:
        return self.embeddings.state_dict() if self.embeddings is not None else {}

    def load_embedding_state(self, state: Mapping[str, torch.Tensor]) -> None:
        if self.embeddings is not None:
            self.embeddings.load_state_dict(state)

    def save_additional(self, output: str | Path, dtype: torch.dtype, metadata: Mapping[str, str] | None = None) -> list[Path]:
        """The additional embeddings as files in `<output>_embeddings/`."""
        if not self.additional:
            return []
        return self.embeddings.save_each(self.additional, embeddings_folder(output), dtype, metadata)
