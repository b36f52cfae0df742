"""Text encoder outputs on disk, keyed by caption, so a frozen text encoder runs once per caption.

OneTrainer caches the text encoder's output next to the latents when latent caching is on and
no text encoder (nor embedding) trains. Here the trainer turns this cache on under the same
conditions (see `text_cache_problem`), and the key is the exact text each encoder reads (after
caption dropout and the training method's text hook) plus the identity of everything that turns
text into the conditioning: the model type, each text encoder's config, weight fingerprint and
dtypes, the tokenizers, clip skip, sequence length, the autocast type and the padding mask. Caption dropout (an
empty caption) and several captions per image therefore just add entries, and the cached output
is the very tensor the encoder would return for that text. Tag shuffling, tag dropout and
capitalisation randomisation make a new caption almost every epoch, which would fill the disk
with entries used once: with any of them on, the text encoder runs every step, as before.

Entries are filled while training, the first time a caption is seen (the first epoch costs what
it cost without the cache), or before the first step for every caption the data can give when
the trainer moves the text encoders off the train device (`fill`, training/placement.py); from then on, and in a later run with the same captions when the
cache is not cleared, the text encoder does not run for them. Files are
``<cache_dir>/<key[:2]>/<key>.safetensors``, written to a temp file and renamed (no fsync: a
file a power cut damaged fails to load and is encoded again, and fsyncing every new caption
would slow the first epoch).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from ..fsutil import replace_write_bytes
from .cache_files import clear_entries, entry_path

log = logging.getLogger(__name__)

TEXT_CACHE_VERSION = 1
# caption options that make a new text nearly every epoch
RANDOM_TEXT_OPTIONS = (
    ("enable_tag_shuffling", None),
    ("tag_dropout_enable", "tag_dropout_probability"),
    ("caps_randomize_enable", "caps_randomize_probability"),
)

Texts = Sequence[str] | Mapping[str, Sequence[str]]


def random_caption_options(concepts: Iterable[Any]) -> list[str]:
    """'<concept>: <option>' for each enabled concept whose captions change at random per epoch
    (not one with text variations: its captions are that many fixed draws, data/planning.py)."""
    found = []
    for concept in concepts:
        if not getattr(concept, "enabled", True) or int(getattr(concept, "text_variations", 1) or 1) > 1:
            continue
        text = getattr(concept, "text", None)
        for switch, probability in RANDOM_TEXT_OPTIONS:
            on = bool(getattr(text, switch, False))
            if on and (probability is None or float(getattr(text, probability, 0.0)) > 0):
                found.append(f"{getattr(concept, 'name', '') or getattr(concept, 'path', '')}: text.{switch}")
    return found


def text_cache_problem(*, latent_caching: bool, trained_text_parts: Iterable[str], uses_embeddings: bool,
                       concepts: Iterable[Any], reads_images: bool = False) -> str | None:
    """Why text encoder outputs cannot be cached for this run, or None when they can.
    ``reads_images``: the text encoder reads each sample's control image with its caption
    (Qwen-Image-Edit), so a caption alone does not key its output."""
    if reads_images:
        return "the text encoder reads each image's control image with its caption"
    if not latent_caching:
        return "latent caching is off"
    trained = sorted(trained_text_parts)
    if trained:
        return f"{', '.join(trained)} trains"
    if uses_embeddings:
        return "the run uses embeddings (their vectors live in the text encoder)"
    random = random_caption_options(concepts)
    if random:
        return ("captions change at random every epoch (" + "; ".join(random) + "; a concept's Text variations above 1 "
                "makes them that many fixed draws, which are cached)")
    return None


def _fingerprint(module: torch.nn.Module, h: Any) -> None:
    module = module.get_base_model() if hasattr(module, "get_base_model") else module
    config = getattr(module, "config", None)
    if config is not None:
        data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        h.update(json.dumps(data, sort_keys=True, default=str).encode())
    state = dict(module.state_dict())
    # SVDQuant's factors are non-persistent buffers (training/svd_quant.py): another rank or factor
    # type changes the encoder's output, so they key it too (absent without SVDQuant: older keys stay)
    state.update({name: b for name, b in module.named_buffers() if name.rsplit(".", 1)[-1] in ("svd_up", "svd_down")})
    with torch.no_grad():
        for name, tensor in sorted(state.items()):
            flat = tensor.detach().flatten()
            h.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
            if flat.numel():
                stride = max(1, flat.numel() // 256)
                h.update(flat[:256].float().cpu().numpy().tobytes())
                h.update(flat[::stride][:256].float().cpu().numpy().tobytes())


def text_encoder_id(model: Any, autocast_dtype: torch.dtype | None = None, extra: Mapping | None = None) -> str:
    """Identity of how `model` turns text into conditioning: a different text encoder, tokenizer,
    clip skip, sequence length, autocast type or padding mask (transformer.attention_mask) never
    reuses an entry."""
    h = hashlib.sha256()
    tokenizers = getattr(model, "tokenizers", {}) or {}
    about = {
        "model_type": str(getattr(getattr(model, "model_type", ""), "value", getattr(model, "model_type", ""))),
        "parts": list(model.text_encoder_names),
        "layer_skips": {k: int(v) for k, v in sorted((getattr(model, "layer_skips", {}) or {}).items())},
        "sequence_length": getattr(model, "text_encoder_sequence_length", None),
        "autocast": str(autocast_dtype),
        "tokenizers": {
            part: [type(tok).__name__, len(tok), getattr(tok, "model_max_length", None)] for part, tok in sorted(tokenizers.items())
        },
        "extra": dict(extra or {}),
        "version": TEXT_CACHE_VERSION,
    }
    if getattr(model, "caption_windows", 1) > 1:  # max_token_length past CLIP's 75 (absent at 1: older keys stay)
        about["caption_windows"] = int(model.caption_windows)
    if getattr(model, "mask_padding_tokens", False):  # transformer.attention_mask: zeroed padding (absent when off: older keys stay)
        about["padding_zeroed"] = True
    h.update(json.dumps(about, sort_keys=True, default=str).encode())
    for part in model.text_encoder_names:
        _fingerprint(model.parts[part], h)
    for module in getattr(model, "text_cache_modules", ()):  # other modules of the text side (Anima's LLM adapter)
        _fingerprint(module, h)
    return "text-" + h.hexdigest()[:24]


def text_key(encoder_id: str, text: str | Mapping[str, str]) -> str:
    """The entry of one sample: the text it reads (one per encoder part when they differ)."""
    payload = {"encoder": encoder_id, "text": text if isinstance(text, str) else dict(sorted(text.items()))}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


_WINDOW = "ot_gradio.window"  # the token window of an entry stored without its padding rows


def _trimmed(entry: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
    """One caption's output without its padding rows, where that loses nothing: a bool
    `attention_mask` that marks a prefix of the window, and every tensor with a row per token
    zero past it (the LLM-encoded families keep their prompts this way; a Krea 2 window of 512
    tokens x 12 layers x 2560 is 31 MB in bfloat16, its prompt a few). Else `entry` as it is."""
    mask = entry.get("attention_mask")
    if mask is None or mask.dtype != torch.bool or mask.ndim != 1:
        return entry
    window, kept = mask.shape[0], int(mask.sum())
    if kept in (0, window) or not bool(mask[:kept].all()):
        return entry
    rows = [k for k, v in entry.items() if v.ndim >= 1 and v.shape[0] == window]
    if any(v.ndim >= 1 and v.shape[0] == kept for k, v in entry.items() if k not in rows):
        return entry  # another tensor of that length would be read back as a trimmed one
    if any(bool(entry[k][kept:].any()) for k in rows if k != "attention_mask"):
        return entry
    return {**{k: v[:kept] if k in rows else v for k, v in entry.items()}, _WINDOW: torch.tensor(window)}


def _padded(entry: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of `_trimmed`: the rows past the prompt back as zeros (False in the mask)."""
    window = entry.pop(_WINDOW, None)
    if window is None:
        return entry
    kept, window = entry["attention_mask"].shape[0], int(window)
    return {k: torch.cat([v, v.new_zeros((window - kept, *v.shape[1:]))]) if v.ndim >= 1 and v.shape[0] == kept else v
            for k, v in entry.items()}



@contextlib.contextmanager
def _no_autocast() -> Iterator[None]:
    """Autocast off on every device type where it is on, for the block."""
    with contextlib.ExitStack() as stack:
        for kind in ("cuda", "cpu", "xpu", "mps"):
            if torch.is_autocast_enabled(kind):
                stack.enter_context(torch.autocast(kind, enabled=False))
        yield

class TextEmbeddingCache:
    """A folder of text encoder outputs for one text encoder identity. Counters: ``hits`` and
    ``misses`` (samples looked up), ``encoded`` (texts encoded now, each once), ``encode_calls``."""

    def __init__(self, cache_dir: str | Path, encoder_id: str):
        self.cache_dir = Path(cache_dir)
        self.encoder_id = encoder_id
        self.hits = 0
        self.misses = 0
        self.encoded = 0
        self.encode_calls = 0

    def path_for(self, key: str) -> Path:
        return entry_path(self.cache_dir, key)

    def _has(self, key: str) -> bool:
        return self.path_for(key).exists()

    def _read(self, key: str) -> dict[str, torch.Tensor] | None:
        path = self.path_for(key)
        try:
            with _no_autocast():  # (padding a bfloat16 entry back to its window under a float16 autocast)
                return _padded(st_load(path.read_bytes()))
        except FileNotFoundError:
            return None
        except Exception as exc:  # a damaged file is encoded again
            log.warning("Ignoring unreadable text cache file %s: %s", path, exc)
            return None

    def _write(self, key: str, tensors: Mapping[str, torch.Tensor]) -> None:
        data = st_save({k: v.detach().to("cpu").contiguous() for k, v in _trimmed(tensors).items()},
                       metadata={"encoder_id": self.encoder_id})
        replace_write_bytes(self.path_for(key), data)

    def encode(self, texts: Texts, encode_fn: Callable[[Texts], Mapping[str, torch.Tensor]],
               device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
        """What ``encode_fn(texts)`` returns, from the cache where it has the samples; the texts it
        has not are encoded (one per call) and stored. ``texts`` is one list, or one per
        text encoder part (`encode_text`'s argument)."""
        if isinstance(texts, Mapping):
            parts = list(texts)
            count = len(texts[parts[0]])
            per_sample: list[str | dict[str, str]] = [{p: texts[p][i] for p in parts} for i in range(count)]
        else:
            count = len(texts)
            per_sample = list(texts)
        keys = [text_key(self.encoder_id, t) for t in per_sample]
        found: dict[int, dict[str, torch.Tensor]] = {}
        for i, key in enumerate(keys):
            entry = self._read(key)
            if entry is not None:
                found[i] = entry
        self.hits += len(found)
        missing = [i for i in range(count) if i not in found]
        self.misses += len(missing)
        for i in missing:
            if i in found:  # the same text earlier in this batch
                continue
            # one caption per call, so an entry never depends on which captions shared its batch
            one: Texts = {p: [texts[p][i]] for p in texts} if isinstance(texts, Mapping) else [texts[i]]
            with torch.no_grad():
                out = encode_fn(one)
            self.encode_calls += 1
            bad = [name for name, value in out.items() if not isinstance(value, torch.Tensor) or value.shape[:1] != (1,)]
            if bad:
                raise ValueError(f"text cache: the text encoder output {bad} has no row per caption; turn latent caching off")
            entry = {name: value[0] for name, value in out.items()}
            self._write(keys[i], entry)
            self.encoded += 1
            for j in range(i, count):
                if keys[j] == keys[i]:
                    found[j] = entry
        names = list(found[0])
        # not under the run's autocast: a float16 one refuses to stack the bfloat16 outputs of a
        # text encoder at the fallback type (training/fp16_fallback.py); the rows share one type
        with _no_autocast():
            stacked = {name: torch.stack([found[i][name] for i in range(count)]) for name in names}
        return {name: value.to(device) for name, value in stacked.items()} if device is not None else stacked

    def fill(self, texts: Iterable[str | Mapping[str, str]], encode_fn: Callable[[Texts], Mapping[str, torch.Tensor]]) -> int:
        """Encode and store each of `texts` the cache has no file for (one sample's text each: a
        string, or {part: text} for several text encoder parts, as `encode` keys them); returns
        how many were encoded. The trainer fills the cache this way before it moves the text
        encoders off the train device (training/placement.py)."""
        done = 0
        for text in texts:
            key = text_key(self.encoder_id, text)
            if self._has(key):
                continue
            one: Texts = {p: [t] for p, t in text.items()} if isinstance(text, Mapping) else [text]
            with torch.no_grad():
                out = encode_fn(one)
            self.encode_calls += 1
            if any(not isinstance(value, torch.Tensor) or value.shape[:1] != (1,) for value in out.values()):
                raise ValueError("text cache: the text encoder output has no row per caption; turn latent caching off")
            self._write(key, {name: value[0] for name, value in out.items()})
            self.encoded += 1
            done += 1
        return done

    def clear(self) -> int:
        """Delete the cached entries (only files this class writes); returns how many."""
        return clear_entries(self.cache_dir)


class MemoryTextCache(TextEmbeddingCache):
    """Text encoder outputs kept in RAM by caption for the rest of one run, written nowhere: the
    trainer's cache once every text encoder has stopped training mid-run (`stop_training_after`:
    OneTrainer's presets train the text encoder for the first 30 of 100 epochs). From then on
    their weights, LoRA included, no longer change, so an output is the same at every step, but it
    holds this run's trained weights and is no use to another run. Entries up to `limit_bytes`;
    past that the encoder runs for the captions not kept, as before."""

    def __init__(self, encoder_id: str, limit_bytes: int):
        super().__init__(Path(), encoder_id)
        self.entries: dict[str, dict[str, torch.Tensor]] = {}
        self.bytes = 0
        self.limit_bytes = limit_bytes

    def _read(self, key: str) -> dict[str, torch.Tensor] | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        with _no_autocast():
            return _padded(dict(entry))

    def _write(self, key: str, tensors: Mapping[str, torch.Tensor]) -> None:
        entry = {k: v.detach().to("cpu", copy=True) for k, v in _trimmed(tensors).items()}
        size = sum(v.numel() * v.element_size() for v in entry.values())
        if self.bytes + size <= self.limit_bytes:
            self.entries[key] = entry
            self.bytes += size

    def _has(self, key: str) -> bool:
        return key in self.entries

    def clear(self) -> int:
        count = len(self.entries)
        self.entries.clear()
        self.bytes = 0
        return count
