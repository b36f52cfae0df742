"""The text encoder output cache: keys, hits, invalidation, when the trainer turns it on, and that
a trained run with it encodes each caption once and trains as without it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ot_gradio.config.concept import ConceptConfig
from ot_gradio.data.text_cache import TextEmbeddingCache, text_cache_problem, text_encoder_id, text_key


class FakeEncoder:
    """encode_text stand-in: each caption -> a [3, 2] tensor from its characters; counts calls."""

    def __init__(self):
        self.calls = 0
        self.texts: list = []

    def __call__(self, texts):
        self.calls += 1
        rows = texts["text_encoder"] if isinstance(texts, dict) else texts
        self.texts.extend(rows)
        out = torch.stack([torch.full((3, 2), float(sum(map(ord, t)))) for t in rows])
        if isinstance(texts, dict):
            out = out + torch.stack([torch.full((3, 2), 0.5 * len(t)) for t in texts["text_encoder_2"]])
        return {"encoder_hidden_states": out, "text_embeds": out[:, 0, :1].clone()}


def test_the_memory_cache_keeps_what_its_limit_allows_and_writes_nothing(tmp_path, monkeypatch):
    from ot_gradio.data.text_cache import MemoryTextCache

    monkeypatch.chdir(tmp_path)
    enc = FakeEncoder()
    entry_bytes = 3 * 2 * 4 + 1 * 4  # encoder_hidden_states [3, 2] and text_embeds [1], float32
    cache = MemoryTextCache("run", limit_bytes=2 * entry_bytes)
    assert cache.fill(["a cat", "a dog", "a cow"], enc) == 3 and cache.fill(["a cat", "a dog"], enc) == 0
    assert len(cache.entries) == 2 and cache.bytes == 2 * entry_bytes  # the third was past the limit
    out = cache.encode(["a dog", "a cow", "a cat"], enc)
    assert enc.texts == ["a cat", "a dog", "a cow", "a cow"]  # only the one not kept is encoded again
    torch.testing.assert_close(out["encoder_hidden_states"], enc(["a dog", "a cow", "a cat"])["encoder_hidden_states"])
    assert list(tmp_path.iterdir()) == [] and cache.clear() == 2 and cache.bytes == 0


def test_hits_misses_and_duplicates(tmp_path):
    cache = TextEmbeddingCache(tmp_path, "enc-a")
    enc = FakeEncoder()
    first = cache.encode(["a cat", "a dog", "a cat"], enc)
    assert enc.texts == ["a cat", "a dog"]  # the repeated caption is encoded once
    assert (cache.encoded, cache.misses, cache.hits) == (2, 3, 0)
    expected = enc(["a cat", "a dog", "a cat"])
    enc.calls, enc.texts = 0, []
    assert all(torch.equal(first[k], expected[k]) for k in expected)
    again = cache.encode(["a dog", "", "a cat"], enc)
    assert enc.texts == [""]  # caption dropout's empty caption is one more entry
    assert torch.equal(again["encoder_hidden_states"][0], first["encoder_hidden_states"][1])
    assert torch.equal(again["encoder_hidden_states"][2], first["encoder_hidden_states"][0])
    # a new cache object on the same folder (a second run) encodes nothing
    enc.calls = 0
    later = TextEmbeddingCache(tmp_path, "enc-a")
    later.encode(["a cat", "a dog", ""], enc)
    assert enc.calls == 0 and later.hits == 3


def windowed(texts, padding: float = 0.0):
    """An LLM family's output: each caption's tokens first in a window of 8, a bool mask marking
    them, the rows past them `padding` (0: as Qwen-Image, Z-Image and Krea 2 keep them)."""
    rows = texts["text_encoder"] if isinstance(texts, dict) else texts
    mask = torch.stack([torch.arange(8) < len(t) for t in rows])
    hidden = torch.randn(len(rows), 8, 2, 3)
    hidden = torch.where(mask[:, :, None, None], hidden, torch.full_like(hidden, padding))
    return {"encoder_hidden_states": hidden, "attention_mask": mask, "pooled": torch.randn(len(rows), 5)}


@pytest.mark.parametrize(("padding", "stored_rows"), [(0.0, 3), (0.5, 8)])
def test_a_window_is_stored_without_its_padding_only_where_it_is_zero(tmp_path, padding, stored_rows):
    from safetensors.torch import load_file

    cache = TextEmbeddingCache(tmp_path, "enc")
    made = []
    out = cache.encode(["abc", "abcdef"], lambda texts: made.append(windowed(texts, padding)) or made[-1])
    stored = load_file(cache.path_for(text_key("enc", "abc")))
    assert stored["encoder_hidden_states"].shape == (stored_rows, 2, 3) and stored["attention_mask"].shape == (stored_rows,)
    again = TextEmbeddingCache(tmp_path, "enc").encode(["abcdef", "abc"], windowed)
    for name in out:
        assert torch.equal(again[name][1], made[0][name][0]) and torch.equal(again[name][0], made[1][name][0]), name
        assert torch.equal(out[name], torch.cat([made[0][name], made[1][name]])), name


def test_other_encoder_or_text_misses(tmp_path):
    assert text_key("enc-a", "a cat") == text_key("enc-a", "a cat")
    assert text_key("enc-a", "a cat") != text_key("enc-b", "a cat")
    assert text_key("enc-a", "a cat") != text_key("enc-a", "a cat ")
    enc = FakeEncoder()
    TextEmbeddingCache(tmp_path, "enc-a").encode(["a cat"], enc)
    other = TextEmbeddingCache(tmp_path, "enc-b")
    other.encode(["a cat"], enc)
    assert other.encoded == 1 and enc.calls == 2


def test_per_encoder_texts(tmp_path):
    """Two text encoders with their own caption dropout: the pair is the key."""
    cache = TextEmbeddingCache(tmp_path, "enc")
    enc = FakeEncoder()
    out = cache.encode({"text_encoder": ["a cat", "a cat"], "text_encoder_2": ["a cat", ""]}, enc)
    assert cache.encoded == 2
    assert not torch.equal(out["encoder_hidden_states"][0], out["encoder_hidden_states"][1])
    direct = enc({"text_encoder": ["a cat", "a cat"], "text_encoder_2": ["a cat", ""]})
    assert torch.equal(out["encoder_hidden_states"], direct["encoder_hidden_states"])


def test_damaged_file_is_encoded_again_and_clear(tmp_path):
    cache = TextEmbeddingCache(tmp_path, "enc")
    enc = FakeEncoder()
    cache.encode(["a cat"], enc)
    cache.path_for(text_key("enc", "a cat")).write_bytes(b"\0" * 10)
    cache.encode(["a cat"], enc)
    assert enc.calls == 2
    crashed = cache.path_for(text_key("enc", "a cat")).with_name(".x.safetensors.abc123.tmp")  # left by a crash mid-write
    crashed.write_bytes(b"half")
    assert cache.clear() == 1 and not crashed.exists()
    cache.encode(["a cat"], enc)
    assert enc.calls == 3


def _model(**changes):
    torch.manual_seed(0)
    te = torch.nn.Linear(4, 4)
    model = SimpleNamespace(
        model_type="STABLE_DIFFUSION_15", text_encoder_names=("text_encoder",), parts={"text_encoder": te},
        tokenizers={"text_encoder": [0] * 10}, layer_skips={"text_encoder": 0},
    )
    for key, value in changes.items():
        setattr(model, key, value)
    return model


def test_encoder_id_changes_with_what_changes_the_output():
    base = text_encoder_id(_model())
    assert base == text_encoder_id(_model())
    assert base != text_encoder_id(_model(layer_skips={"text_encoder": 1}))
    assert base != text_encoder_id(_model(), torch.bfloat16)
    assert base != text_encoder_id(_model(text_encoder_sequence_length=77))
    assert base != text_encoder_id(_model(mask_padding_tokens=True))  # transformer.attention_mask zeroes the padding
    assert base == text_encoder_id(_model(mask_padding_tokens=False))  # off: the entries of earlier runs stay valid
    changed = _model()
    with torch.no_grad():
        changed.parts["text_encoder"].weight[3, 3] += 1.0
    assert base != text_encoder_id(changed)


def test_when_the_cache_is_off(tmp_path):
    plain = ConceptConfig(path=str(tmp_path), name="c")
    ok = {"latent_caching": True, "trained_text_parts": (), "uses_embeddings": False, "concepts": [plain]}
    assert text_cache_problem(**ok) is None
    assert "latent caching" in text_cache_problem(**{**ok, "latent_caching": False})
    assert "text_encoder trains" in text_cache_problem(**{**ok, "trained_text_parts": {"text_encoder"}})
    assert "embeddings" in text_cache_problem(**{**ok, "uses_embeddings": True})
    shuffled = ConceptConfig(path=str(tmp_path), name="s", text={"enable_tag_shuffling": True})
    assert "enable_tag_shuffling" in text_cache_problem(**{**ok, "concepts": [plain, shuffled]})
    dropout_zero = ConceptConfig(path=str(tmp_path), name="d", text={"tag_dropout_enable": True, "tag_dropout_probability": 0.0})
    assert text_cache_problem(**{**ok, "concepts": [dropout_zero]}) is None
    dropout = ConceptConfig(path=str(tmp_path), name="d", text={"tag_dropout_enable": True, "tag_dropout_probability": 0.3})
    assert "tag_dropout_enable" in text_cache_problem(**{**ok, "concepts": [dropout]})
    disabled = ConceptConfig(path=str(tmp_path), name="x", enabled=False, text={"enable_tag_shuffling": True})
    assert text_cache_problem(**{**ok, "concepts": [plain, disabled]}) is None
    varied = ConceptConfig(path=str(tmp_path), name="v", text_variations=3, text={"enable_tag_shuffling": True})
    assert text_cache_problem(**{**ok, "concepts": [plain, varied]}) is None  # three fixed draws per image: cached
    assert "Text variations" in text_cache_problem(**{**ok, "concepts": [varied, shuffled]})


def test_text_variations_make_each_caption_one_of_n_fixed_draws(tmp_path):
    """text_variations N: each image's shuffled caption is one of N draws, each used once per N
    epochs, the same in every build; dataset.captions() lists exactly those (what the cache is
    filled with before the text encoders leave the GPU)."""
    from ot_gradio.data.dataset import build_dataset
    from tests.data.conftest import _write_image

    for i in range(3):
        _write_image(tmp_path / "c" / f"{i}.png", 64, 64, colour=(60 * i, 90, 120))
        (tmp_path / "c" / f"{i}.txt").write_text(f"shape {i}, red, round, small, centered, plain, flat\n")

    def captions(variations: int, seed: int = 3) -> tuple[dict, list]:
        concept = ConceptConfig(path=str(tmp_path / "c"), name="c", text_variations=variations,
                                text={"enable_tag_shuffling": True, "keep_tags_count": 1})
        dataset = build_dataset([concept], "64", 1, seed=seed)
        seen = {}
        for epoch in range(6):
            for sample in (s for batch in dataset.plan(epoch).batches for s in batch):
                seen.setdefault(sample.item, []).append(sample.caption)
        return seen, dataset.captions()

    seen, listed = captions(3)
    for draws in seen.values():
        assert len(set(draws[:3])) == 3 and draws[3:] == draws[:3]  # three draws, each once per three epochs
    assert sorted(listed) == sorted({c for draws in seen.values() for c in draws})
    assert captions(3) == (seen, listed)  # the same draws in every build
    assert captions(3, seed=4)[0] != seen  # another run seed: other draws
    fresh, _ = captions(1)
    assert all(len(set(draws)) > 3 for draws in fresh.values())  # 1: a fresh draw every epoch


# --- the trainer ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from ot_gradio.models.tiny.sd15 import save_tiny_sd15

    return save_tiny_sd15(tmp_path_factory.mktemp("tiny")).diffusers_dir


def _run(tiny: Path, data: Path, work: Path, no_text_cache: bool = False, **overrides):
    from ot_gradio.config.io import load_config
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    class Losses(Reporter):
        def __init__(self):
            self.losses = []

        def metrics(self, **fields):
            self.losses.append(fields["loss"])

    config = {
        "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "base_model_name": str(tiny),
        "train_device": "cpu", "train_dtype": "FLOAT_32", "workspace_dir": str(work / "ws"),
        "cache_dir": str(work / "cache"), "output_model_destination": str(work / "out" / "lora.safetensors"),
        "concepts": [{"name": "c", "path": str(data)}], "resolution": "64", "batch_size": 2, "epochs": 2,
        "learning_rate": 1e-3, "learning_rate_warmup_steps": 0, "lora_rank": 2, "lora_alpha": 2,
        "text_encoder": {"train": False}, "unet": {"train": True, "gradient_checkpointing": False},
        "samples": [], "backup_after_unit": "NEVER", "backup_before_save": False, "tensorboard": False,
        "clear_cache_before_training": False,
    }
    for key, value in overrides.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) and isinstance(config.get(key), dict) else value
    report = Losses()
    trainer = Trainer(load_config(config).config, RunPaths(work / "s", work / "b", work / "o", None, []), report)
    trainer.setup()
    if no_text_cache:
        trainer.diffusion.text_cache = None
    calls = []
    encoder = trainer.model.text_encoder
    handle = encoder.register_forward_hook(lambda m, a, o: calls.append(trainer.counters.epoch))
    torch.manual_seed(7)  # the same noise for every run of this test
    trainer.train()
    handle.remove()
    return trainer, calls, report.losses


@pytest.fixture(scope="module")
def captioned(tmp_path_factory):
    from ot_gradio.data import ensure_demo_dataset

    folder = tmp_path_factory.mktemp("data") / "shapes"
    ensure_demo_dataset(folder)
    for extra in sorted(folder.glob("*.png"))[6:]:  # 6 square images, 3 steps an epoch at batch 2
        extra.unlink()
        extra.with_suffix(".txt").unlink()
    return folder


def test_trainer_encodes_each_caption_once(tiny, captioned, tmp_path):
    trainer, calls, cached_losses = _run(tiny, captioned, tmp_path / "a")
    cache = trainer.diffusion.text_cache
    assert cache is not None and trainer.text_cache_off_reason is None
    assert cache.encoded == 6 and calls.count(0) == 6  # one call per caption, all in the first epoch
    assert 1 not in calls  # the second epoch runs the text encoder zero times
    # a second run on the same data with the cache kept: zero text encoder runs
    again, calls, _ = _run(tiny, captioned, tmp_path / "a")
    assert calls == [] and again.diffusion.text_cache.hits == 12
    # the same run without the text cache trains the same: the cached output is the encoder's
    plain, calls, plain_losses = _run(tiny, captioned, tmp_path / "b", no_text_cache=True)
    assert len(calls) == 6  # every step: 3 steps x 2 epochs
    assert plain_losses == pytest.approx(cached_losses, rel=1e-5)


def test_text_variations_cache_shuffled_captions(tiny, captioned, tmp_path):
    """Tag shuffling with text variations 2: the text encoder runs in the first two epochs only
    (each image's two draws), the rest read the cache; with 1 the cache is off."""
    import shutil

    data = tmp_path / "tags"
    shutil.copytree(captioned, data)
    for i, text in enumerate(sorted(data.glob("*.txt"))):
        text.write_text(f"shape {i}, red, blue, round, square, small, large, plain\n")
    shuffled = [{"name": "c", "path": str(data), "text_variations": 2, "text": {"enable_tag_shuffling": True}}]
    trainer, calls, losses = _run(tiny, data, tmp_path / "a", epochs=4, concepts=shuffled)
    assert trainer.diffusion.text_cache is not None and trainer.text_cache_off_reason is None
    assert calls and set(calls) <= {0, 1} and len(losses) == 12
    assert 6 < trainer.diffusion.text_cache.encoded <= 12  # six images, two draws each
    once = [{**shuffled[0], "text_variations": 1}]
    plain, _, _ = _run(tiny, data, tmp_path / "b", epochs=1, concepts=once)
    assert plain.diffusion.text_cache is None and "enable_tag_shuffling" in plain.text_cache_off_reason


def test_trained_text_encoder_is_not_cached(tiny, captioned, tmp_path):
    trainer, calls, _ = _run(tiny, captioned, tmp_path, text_encoder={"train": True}, epochs=1)
    assert trainer.diffusion.text_cache is None and "text_encoder trains" in trainer.text_cache_off_reason
    assert not (tmp_path / "cache" / "text").exists()


def test_a_text_encoder_that_stops_training_is_cached_in_ram_from_then_on(tiny, captioned, tmp_path, monkeypatch):
    """OneTrainer's presets train the text encoder for the first 30 epochs only. From the epoch it
    stops, each caption is encoded once more (with the LoRA it trained) and kept in RAM, and the
    steps read it there: the same losses as a run that runs the frozen encoder at every step, and
    nothing written to the cache folder. Captions that change at random every epoch are not kept."""
    from ot_gradio.data.text_cache import MemoryTextCache
    from ot_gradio.training.trainer import Trainer

    stop = {"train": True, "stop_training_after": 1, "stop_training_after_unit": "EPOCH"}
    trainer, calls, losses = _run(tiny, captioned, tmp_path / "a", text_encoder=stop, epochs=3)
    cache = trainer.diffusion.text_cache
    assert isinstance(cache, MemoryTextCache) and cache.encoded == 6 and len(losses) == 9
    # epoch 1 trains it (3 steps of 2 captions), epoch 2 encodes each caption once, epoch 3 reads them all
    assert (calls.count(0), calls.count(1), calls.count(2)) == (3, 6, 0), calls
    assert not (tmp_path / "a" / "cache" / "text").exists() and trainer.cast_once and all(
        id(layer) not in {id(m) for m in trainer.model.text_encoder.modules()} for layer in trainer.cast_once)
    with monkeypatch.context() as m:
        m.setattr(Trainer, "_cache_frozen_text", lambda self: None)
        plain, calls, plain_losses = _run(tiny, captioned, tmp_path / "b", text_encoder=stop, epochs=3)
    assert plain.diffusion.text_cache is None and (calls.count(1), calls.count(2)) == (3, 3)
    assert plain_losses == pytest.approx(losses, rel=1e-5)
    shuffled = [{"name": "c", "path": str(captioned), "text": {"enable_tag_shuffling": True}}]
    random_text, calls, _ = _run(tiny, captioned, tmp_path / "c", text_encoder=stop, epochs=2, concepts=shuffled)
    assert random_text.diffusion.text_cache is None and calls.count(1) == 3
