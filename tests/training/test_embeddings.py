"""Embeddings on the tiny SD 1.5: new tokens and their vectors, the initial text, what trains
(only the new vectors), the options that shape them, and the file formats."""

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ot_gradio.config.enums import DataType
from ot_gradio.config.parts import EmbeddingConfig
from ot_gradio.config.schema import TrainConfig
from ot_gradio.data.batches import Batch
from ot_gradio.training.device import Precision
from ot_gradio.training.diffusion import DiffusionStep
from ot_gradio.training.embedding_files import bundle_key, read_embedding_file
from ot_gradio.training.embedding_method import EmbeddingMethod
from ot_gradio.training.embeddings import Embedding, Embeddings, embeddings_folder
from ot_gradio.training.lora_format import load_lora_file
from ot_gradio.training.lora_method import LoraMethod
from ot_gradio.training.param_groups import optimizer_groups

CPU = torch.device("cpu")


def tiny_model():
    from ot_gradio.models.sd15 import StableDiffusion15
    from ot_gradio.models.tiny.sd15 import tiny_sd15_components

    return StableDiffusion15(**tiny_sd15_components())


def config(**values):
    return TrainConfig.model_validate({"training_method": "EMBEDDING", "learning_rate": 0.05, **values})


def token_row(model, text):
    """The original embedding row of a one-token text."""
    ids = model.tokenizer(text, add_special_tokens=False).input_ids
    assert len(ids) == 1
    return model.text_encoder.get_input_embeddings().weight[ids[0]].detach().clone()


def batch(captions):
    g = torch.Generator().manual_seed(0)
    return Batch(
        size=(64, 64),
        captions=list(captions),
        loss_weights=torch.ones(len(captions)),
        image_paths=[f"{i}.png" for i in range(len(captions))],
        latents=torch.randn(len(captions), 4, 8, 8, generator=g),
    )


def train_steps(model, cfg, method, steps=3, captions=("a photo of <embedding>", "<embedding> on a table")):
    """A few real optimizer steps of the training step the trainer runs."""
    groups = method.setup(model, cfg, CPU)
    optimizer = torch.optim.AdamW(optimizer_groups(groups), weight_decay=0.1)
    step = DiffusionStep(model, cfg, CPU, Precision(DataType.FLOAT_32, CPU), caption_transform=method.transform_text)
    parts = frozenset(g.model_part for g in groups)
    for _ in range(steps):
        step.loss(batch(captions), parts).backward()
        optimizer.step()
        method.after_optimizer_step(model)
        optimizer.zero_grad()
    return groups


# --- tokens and placeholders ------------------------------------------------------------------


def test_tokens_are_added_and_the_placeholder_becomes_them():
    model = tiny_model()
    before = len(model.tokenizer)
    embeddings = Embeddings(model, CPU)
    settings = EmbeddingConfig(placeholder="<cat>", token_count=3)
    embedding = embeddings.add(settings, field="embedding", train=True, train_parts={"text_encoder"})
    assert embedding.tokens == [f"<{settings.uuid}_{i}>" for i in range(3)]
    assert len(model.tokenizer) == before + 3
    expanded = embeddings.expand("a <cat> on a mat")
    assert expanded == "a " + "".join(embedding.tokens) + " on a mat"
    ids = model.tokenize([expanded])[0].tolist()
    assert ids[2:5] == [before, before + 1, before + 2]  # after BOS and "a"
    assert embeddings.expand("no placeholder") == "no placeholder"


def test_longer_placeholders_are_replaced_first():
    model = tiny_model()
    embeddings = Embeddings(model, CPU)
    short = embeddings.add(EmbeddingConfig(placeholder="<a>"), field="embedding", train=True, train_parts={"text_encoder"})
    long = embeddings.add(EmbeddingConfig(placeholder="<a>b"), field="additional_embeddings[0]", train=True, train_parts={"text_encoder"})
    assert embeddings.expand("<a>b and <a>") == f"{long.token_string} and {short.token_string}"


def test_duplicate_and_empty_placeholders_are_refused():
    model = tiny_model()
    embeddings = Embeddings(model, CPU)
    embeddings.add(EmbeddingConfig(placeholder="<x>"), field="embedding", train=True, train_parts={"text_encoder"})
    with pytest.raises(ValueError, match=r"additional_embeddings\[0\].placeholder: embedding uses '<x>'"):
        embeddings.add(EmbeddingConfig(placeholder="<x>"), field="additional_embeddings[0]", train=True, train_parts=set())
    with pytest.raises(ValueError, match="placeholder: is empty"):
        embeddings.add(EmbeddingConfig(placeholder=" "), field="additional_embeddings[1]", train=True, train_parts=set())


# --- initial vectors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count", "expected"),
    [
        ("dog", 2, ["d", "o"]),  # cut to the token count (the tiny tokenizer has one token per letter)
        ("dog", 5, ["d", "o", "g</w>", "*</w>", "*</w>"]),  # filled up with '*'
        ("dog", None, ["d", "o", "g</w>"]),  # blank = as many as the text has
        ("*", 1, ["*</w>"]),
    ],
)
def test_initial_text_gives_its_token_embeddings(text, count, expected):
    model = tiny_model()
    matrix = model.text_encoder.get_input_embeddings().weight.detach().clone()
    embeddings = Embeddings(model, CPU)
    embedding = embeddings.add(EmbeddingConfig(initial_embedding_text=text, token_count=count), field="embedding", train=True, train_parts={"text_encoder"})
    ids = model.tokenizer.convert_tokens_to_ids(expected)
    assert torch.equal(embedding.vectors["text_encoder"].detach(), matrix[ids])


def test_the_text_encoder_reads_the_vectors_for_the_new_tokens():
    """An embedding started from 'x' encodes exactly like the word 'x' itself."""
    model = tiny_model()
    method = EmbeddingMethod()
    method.setup(model, config(embedding={"initial_embedding_text": "x", "token_count": 1}), CPU)
    with torch.no_grad():
        ours = model.encode_text([method.transform_text("a <embedding>")])["encoder_hidden_states"]
        word = model.encode_text(["a x"])["encoder_hidden_states"]
    assert torch.equal(ours, word)


# --- what trains ------------------------------------------------------------------------------


def test_only_the_new_vectors_train():
    model = tiny_model()
    before = {name: p.detach().clone() for part in model.parts.values() for name, p in part.named_parameters()}
    matrix = model.text_encoder.get_input_embeddings().weight.detach().clone()
    method = EmbeddingMethod()
    groups = train_steps(model, config(embedding={"token_count": 2}), method)
    assert [g.part for g in groups] == ["text_encoder"] and groups[0].lr == 0.05
    vectors = method.main.vectors["text_encoder"]
    assert not torch.equal(vectors.detach(), method.main.initial["text_encoder"])
    after = {name: p for part in model.parts.values() for name, p in part.named_parameters()}
    assert after.keys() == before.keys()  # the vectors are no parameter of the model
    assert all(torch.equal(before[k], after[k]) for k in before), "a weight of the model changed"
    assert torch.equal(model.text_encoder.get_input_embeddings().weight, matrix)  # bit-identical original rows
    assert all(p.grad is None for p in after.values())


def test_embedding_learning_rate_and_weight_dtype():
    model = tiny_model()
    method = EmbeddingMethod()
    groups = method.setup(model, config(embedding_learning_rate=0.003, embedding_weight_dtype="BFLOAT_16"), CPU)
    assert groups[0].lr == 0.003
    vector = method.main.vectors["text_encoder"]
    assert vector.dtype == torch.bfloat16 and vector.requires_grad
    with torch.no_grad():  # the text encoder still computes in its own dtype
        assert model.encode_text([method.transform_text("<embedding>")])["encoder_hidden_states"].dtype == torch.float32


def test_train_embedding_off_uses_the_vectors_frozen():
    model = tiny_model()
    with pytest.raises(ValueError, match="text_encoder.train_embedding"):
        EmbeddingMethod().setup(model, config(text_encoder={"train_embedding": False}), CPU)
    with pytest.raises(ValueError, match="embedding.train: is off"):
        EmbeddingMethod().setup(tiny_model(), config(embedding={"train": False}), CPU)
    model = tiny_model()
    lora = LoraMethod()
    groups = lora.setup(model, config(training_method="LORA", lora_rank=2, text_encoder={"train_embedding": False},
                                      additional_embeddings=[{"placeholder": "<t>"}]), CPU)
    assert not any(g.name.startswith("embedding") for g in groups)
    assert not lora.additional[0].vectors["text_encoder"].requires_grad
    assert lora.transform_text("<t>") == lora.additional[0].token_string  # used all the same


def test_preserve_embedding_norm_keeps_the_median_token_length():
    model = tiny_model()
    median = float(model.text_encoder.get_input_embeddings().weight.detach().norm(dim=1).median())
    method = EmbeddingMethod()
    train_steps(model, config(preserve_embedding_norm=True, embedding={"token_count": 2}), method, steps=2)
    norms = method.main.vectors["text_encoder"].detach().norm(dim=1)
    assert torch.allclose(norms, torch.full_like(norms, median), rtol=1e-5)

    free = EmbeddingMethod()
    train_steps(tiny_model(), config(embedding={"token_count": 2}), free, steps=2)
    norms = free.main.vectors["text_encoder"].detach().norm(dim=1)
    assert not torch.allclose(norms, torch.full_like(norms, median), rtol=1e-3)


def test_backup_state_round_trip():
    model = tiny_model()
    method = EmbeddingMethod()
    cfg = config(additional_embeddings=[{"placeholder": "<b>", "token_count": 2}])
    train_steps(model, cfg, method, steps=1, captions=("<embedding> and <b>",))
    state = {k: v.clone() for k, v in method.trainable_state(model).items()}
    assert len(state) == 2 and all(k.startswith("embedding.") for k in state)
    other = EmbeddingMethod()
    other.setup(tiny_model(), cfg, CPU)
    other.load_trainable_state(None, state)
    assert all(torch.equal(other.trainable_state(None)[k], v) for k, v in state.items())


# --- files ------------------------------------------------------------------------------------


def test_embedding_file_is_a1111_and_reads_back(tmp_path):
    model = tiny_model()
    method = EmbeddingMethod()
    cfg = config(embedding={"token_count": 3, "placeholder": "<me>"}, output_dtype="FLOAT_16")
    train_steps(model, cfg, method, steps=1, captions=("<me>",))
    out = method.save(model, cfg, tmp_path / "me.safetensors", {"ss_steps": "1"})
    with safe_open(str(out), "pt") as f:
        assert list(f.keys()) == ["emp_params"]  # one tensor: A1111 and diffusers take it as is (OneTrainer's key)
        meta = f.metadata()
        tensor = f.get_tensor("emp_params")
    assert tensor.shape == (3, 32) and tensor.dtype == torch.float16
    assert meta["ot_gradio.placeholder"] == "<me>" and meta["ot_gradio.token_count"] == "3"
    assert torch.equal(tensor, method.main.vectors["text_encoder"].detach().half())

    # continue from the file: its vectors and token count, whatever the config's token count
    again = tiny_model()
    resumed = EmbeddingMethod()
    resumed.setup(again, config(embedding={"model_name": str(out), "token_count": 1}), CPU)
    assert torch.equal(resumed.main.vectors["text_encoder"].detach(), tensor.float())
    assert len(resumed.main.tokens) == 3


def test_other_embedding_files_are_read(tmp_path):
    keys, widths = {"text_encoder": "emp_params"}, {"text_encoder": 32}
    vectors = torch.randn(2, 32)
    torch.save({"string_to_param": {"*": vectors}, "name": "x", "step": 10}, tmp_path / "a1111.pt")
    save_file({"emp_params": vectors}, str(tmp_path / "onetrainer.safetensors"))
    save_file({"<cat-toy>": vectors[0]}, str(tmp_path / "diffusers.safetensors"))
    assert torch.equal(read_embedding_file(tmp_path / "a1111.pt", keys, widths, "embedding")["text_encoder"], vectors)
    assert torch.equal(read_embedding_file(tmp_path / "onetrainer.safetensors", keys, widths, "embedding")["text_encoder"], vectors)
    assert torch.equal(read_embedding_file(tmp_path / "diffusers.safetensors", keys, widths, "embedding")["text_encoder"], vectors[:1])
    save_file({"clip_g": torch.randn(2, 1280), "clip_l": torch.randn(2, 768)}, str(tmp_path / "sdxl.safetensors"))
    with pytest.raises(ValueError, match="embedding.model_name: .*sdxl.safetensors has vectors of shape"):
        read_embedding_file(tmp_path / "sdxl.safetensors", keys, widths, "embedding")
    with pytest.raises(ValueError, match=r"additional_embeddings\[0\].model_name: .* does not exist"):
        read_embedding_file(tmp_path / "missing.safetensors", keys, widths, "additional_embeddings[0]")


def test_bundle_keys():
    assert bundle_key("trig", "emp_params") == "bundle_emb.trig.string_to_param.*"  # SD 1/2: kohya's, which A1111 reads
    assert bundle_key("trig", "clip_l") == "bundle_emb.trig.clip_l"  # SDXL: one per encoder
    odd = Embedding(EmbeddingConfig(placeholder="<v1.5 style>"), "embedding", [], {})
    assert odd.bundle_name == "<v1_5 style>" and odd.name == "v1_5_style"  # a '.' would split the bundle key
    assert embeddings_folder("out/lora.safetensors").as_posix() == "out/lora_embeddings"
    assert embeddings_folder("out/model").as_posix() == "out/model_embeddings"


@pytest.mark.parametrize("bundle", [True, False])
def test_lora_saves_additional_embeddings_bundled_or_beside(tmp_path, bundle):
    model = tiny_model()
    lora = LoraMethod()
    cfg = config(training_method="LORA", lora_rank=2, output_model_format="KOHYA_LORA", bundle_additional_embeddings=bundle,
                 additional_embeddings=[{"placeholder": "<trig>", "token_count": 2}, {"placeholder": "<off>", "train": False}])
    groups = lora.setup(model, cfg, CPU)
    assert [g.name for g in groups if g.name.startswith("embedding")] == ["embedding/<trig>"]  # <off> is only used
    out = lora.save(model, cfg, tmp_path / "lora.safetensors", {"ss_steps": "0"})
    tensors = load_file(str(out))
    beside = tmp_path / "lora_embeddings"
    if bundle:
        assert torch.equal(tensors["bundle_emb.<trig>.string_to_param.*"], lora.additional[0].vectors["text_encoder"].detach())
        assert tensors["bundle_emb.<off>.string_to_param.*"].shape == (1, 32)
        # and beside it too: ComfyUI's LoRA loader skips bundle_emb.*, its embedding loader reads the files
        assert torch.equal(load_file(str(beside / "trig.safetensors"))["emp_params"], tensors["bundle_emb.<trig>.string_to_param.*"])
    else:
        assert not any(k.startswith("bundle_emb") for k in tensors)
    assert sorted(p.name for p in beside.iterdir()) == ["off.safetensors", "trig.safetensors"]
    assert load_file(str(beside / "trig.safetensors"))["emp_params"].shape == (2, 32)
    loaded = load_lora_file(out)  # a bundled LoRA still reads as a LoRA (lora_model_name)
    assert set(loaded.parts) == {"unet", "text_encoder"} and loaded.rank == 2


def test_the_whole_model_is_saved_without_the_embedding_tokens():
    model = tiny_model()
    before = len(model.tokenizer)
    embeddings = Embeddings(model, CPU)
    embeddings.add(EmbeddingConfig(token_count=2), field="embedding", train=True, train_parts={"text_encoder"})
    live = model.tokenizer
    with embeddings.original_tokenizers():
        assert len(model.tokenizer) == before and model.tokenizer is not live
        assert list(model.text_encoder.state_dict()) == list(tiny_model().text_encoder.state_dict())
    assert model.tokenizer is live and len(model.tokenizer) == before + 2


# --- in the trainer ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_config(tmp_path_factory):
    from ot_gradio.data import ensure_demo_dataset
    from ot_gradio.models.tiny.sd15 import save_tiny_sd15

    root = tmp_path_factory.mktemp("embedding-run")
    model = save_tiny_sd15(root / "model")
    data = ensure_demo_dataset(root / "shapes")
    prompts = root / "prompts.txt"
    prompts.write_text("a photo of <embedding>\n")

    def make(tmp, **overrides):
        return TrainConfig.model_validate({
            "training_method": "EMBEDDING", "base_model_name": str(model.diffusers_dir), "train_device": "cpu",
            "train_dtype": "FLOAT_32", "workspace_dir": str(tmp / "ws"), "cache_dir": str(tmp / "cache"),
            "output_model_destination": str(tmp / "out" / "emb.safetensors"), "output_model_format": "SAFETENSORS",
            "concepts": [{"path": str(data), "text": {"prompt_source": "concept", "prompt_path": str(prompts)}}],
            "resolution": "64", "batch_size": 2, "epochs": 1, "learning_rate": 0.05, "learning_rate_warmup_steps": 0,
            "samples": [{"prompt": "a photo of <embedding>", "negative_prompt": "<embedding>", "height": 64, "width": 64, "diffusion_steps": 1}],
            "sample_after": 0, "sample_after_unit": "NEVER", "backup_after": 0, "backup_after_unit": "NEVER",
            "tensorboard": False, **overrides,
        })

    return make


def test_trainer_stops_the_embedding_and_samples_with_its_tokens(run_config, tmp_path):
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    class Watch(Reporter):
        def __init__(self):
            self.vectors = []

        def metrics(self, **fields):
            self.vectors.append(trainer.method.main.vectors["text_encoder"].detach().clone())

    cfg = run_config(tmp_path, embedding={"stop_training_after": 2, "stop_training_after_unit": "STEP", "token_count": 2})
    report = Watch()
    trainer = Trainer(cfg, RunPaths(tmp_path / "samples", tmp_path / "backup", tmp_path / "save", None, [tmp_path]), report)
    trainer.setup()
    matrix = trainer.model.text_encoder.get_input_embeddings().weight.detach().clone()
    prompts = []
    sample = trainer.model.sample
    trainer.model.sample = lambda **kw: (prompts.append((kw["prompt"], kw["negative_prompt"])), sample(**kw))[1]
    assert trainer.train() == "done"
    vectors = report.vectors
    assert len(vectors) >= 4
    assert not torch.equal(vectors[0], trainer.method.main.initial["text_encoder"])
    assert not torch.equal(vectors[0], vectors[1])  # trains for 2 steps ...
    assert all(torch.equal(vectors[1], v) for v in vectors[2:])  # ... then stops
    assert torch.equal(trainer.model.text_encoder.get_input_embeddings().weight, matrix)
    tokens = trainer.method.main.token_string
    assert prompts == [(f"a photo of {tokens}", tokens)]  # the sample prompt reached the model with the tokens
    saved = load_file(str(tmp_path / "out" / "emb.safetensors"))["emp_params"]
    assert torch.equal(saved, vectors[-1])


def test_doctor_on_embedding_configs():
    from ot_gradio.config.doctor import check

    cfg = config(concepts=[{"path": "x"}], samples=[{"prompt": "a photo of <embedding>"}, {"prompt": "a cat"}])
    warnings = check(cfg)
    assert any("Sample prompt 2 lacks <embedding>" in w for w in warnings)
    assert not any("not supported" in w for w in warnings)
    cfg.output_model_format = "DIFFUSERS"
    assert any("Embedding training with output format DIFFUSERS" in w for w in check(cfg))


def test_trained_embeddings_whose_placeholder_the_captions_lack_are_named():
    from types import SimpleNamespace as NS

    from ot_gradio.data.tags import TextAugment
    from ot_gradio.training.embeddings import caption_warnings

    def concept(kind, *captions, prefix=""):
        items = [NS(path=Path(f"/data/{kind}{i}.png"), captions=(c,)) for i, c in enumerate(captions)]
        return NS(config=NS(type=NS(value=kind)), scan=NS(items=items), text=TextAugment(prefix=prefix))

    def emb(field, placeholder, trains=True):
        return NS(field=field, placeholder=placeholder, trains=trains)

    concepts = [concept("STANDARD", "a photo of <cat>", "a photo of a cat", "<cat> on a sofa"),
                concept("PRIOR_PREDICTION", "a photo of a cat")]  # regularization images: never hold it
    main, extra, none = caption_warnings(NS(items=[emb("embedding", "<cat>"), emb("additional_embeddings[0]", "<dog>"),
                                                   emb("additional_embeddings[1]", "<cow>", trains=False),
                                                   emb("additional_embeddings[2]", "<cat>"), emb("embedding_x", "<dog>")]), concepts)
    assert main == ("embedding.placeholder: '<cat>' is missing from the captions of 1 of 3 training images (STANDARD1.png): "
                    "their steps train nothing of the embedding")
    assert extra.startswith("additional_embeddings[0].placeholder: '<dog>' is in none of the training captions, so this "
                            "embedding is not trained")
    assert none.startswith("embedding_x.placeholder")  # a frozen one (<cow>) is not named, nor one some captions hold
    assert caption_warnings(None, concepts) == []
    # a concept's caption prefix holds the placeholder: every caption has it
    assert caption_warnings(NS(items=[emb("embedding", "<cat>")]), [concept("STANDARD", "a photo", "a cat", prefix="<cat>,")]) == []
