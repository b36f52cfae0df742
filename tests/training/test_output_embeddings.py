"""Output embeddings (embedding.is_output_embedding): the encoder output rows at the embedding's
tokens become its trained output vectors, in every family with embeddings, in training, in
samples and in its files (`<key>_out`)."""

import pytest
import torch
from safetensors.torch import load_file

from ot_gradio.config.parts import EmbeddingConfig
from ot_gradio.training.embedding_files import bundle_output_key, output_key
from ot_gradio.training.embedding_method import EmbeddingMethod
from ot_gradio.training.embeddings import Embeddings
from tests.training import test_embeddings
from tests.training.test_embeddings import CPU, config, tiny_model, train_steps

run_config = test_embeddings.run_config  # the fixture: a tiny SD 1.5 EMBEDDING run on the demo shapes


def output_embedding(model, token_count=2, text="a", **settings):
    embeddings = Embeddings(model, CPU)
    embedding = embeddings.add(
        EmbeddingConfig(placeholder="<o>", token_count=token_count, initial_embedding_text=text, is_output_embedding=True, **settings),
        field="embedding", train=True, train_parts=frozenset(model.text_encoder_names),
    )
    return embeddings, embedding


def randomize(embedding, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for vector in embedding.outputs.values():
            vector.copy_(torch.randn(vector.shape, generator=g))


def token_positions(ids, embedding, part):
    offset = ids - embedding.first_ids[part]
    return (offset >= 0) & (offset < len(embedding.tokens))


@pytest.mark.parametrize("layer_skip", [0, 1])
def test_sd15_rows_at_the_tokens_are_the_output_vectors(layer_skip):
    model = tiny_model()
    model.layer_skips = {"text_encoder": layer_skip}
    embeddings, embedding = output_embedding(model, text="a")
    width = model.text_encoder.config.hidden_size
    assert embedding.outputs["text_encoder"].shape == (2, width) and embedding.outputs["text_encoder"].dtype == torch.float32
    assert embedding.outputs["text_encoder"].requires_grad
    vectors = embedding.vectors["text_encoder"]
    assert not vectors.requires_grad and torch.count_nonzero(vectors) == 0  # the input rows: zeros, never trained

    # it starts as the plain encoder's output for the initial text ("a" then "*"; CLIP is causal)
    plain = tiny_model()
    plain.layer_skips = {"text_encoder": layer_skip}
    ids = plain.tokenizer("a", add_special_tokens=False).input_ids[:1] + plain.tokenizer("*", add_special_tokens=False).input_ids[:1]
    with torch.no_grad():
        expected = plain.encode_prompt(plain.tokenize(plain.tokenizer.decode(ids)), layer_skip)[0, 1:3]
    assert torch.allclose(embedding.initial_outputs["text_encoder"], expected, atol=1e-5)

    randomize(embedding)
    ids = model.tokenize([embeddings.expand("a photo of <o> here")])
    at = token_positions(ids, embedding, "text_encoder")[0]
    assert int(at.sum()) == 2
    with torch.no_grad():
        hidden = model.encode_prompt(ids, layer_skip)[0]
        model.output_embeddings = None  # the same encoder without them
        bare = model.encode_prompt(ids, layer_skip)[0]
    assert torch.equal(hidden[at], embedding.outputs["text_encoder"].detach())
    assert torch.equal(hidden[~at], bare[~at])
    assert not torch.allclose(bare[at], hidden[at])


def test_training_moves_only_the_output_vectors():
    model = tiny_model()
    before = {name: p.detach().clone() for part in model.parts.values() for name, p in part.named_parameters()}
    method = EmbeddingMethod()
    groups = train_steps(model, config(embedding={"token_count": 2, "is_output_embedding": True}), method)
    main = method.main
    assert [p for g in groups for p in g.params] == [main.outputs["text_encoder"]]
    assert not torch.equal(main.outputs["text_encoder"].detach(), main.initial_outputs["text_encoder"])
    assert torch.count_nonzero(main.vectors["text_encoder"]) == 0
    assert all(torch.equal(before[n], p) for part in model.parts.values() for n, p in part.named_parameters())
    resumed = EmbeddingMethod()  # a backup holds the output vectors too
    resumed.setup(tiny_model(), config(embedding=main.settings.model_dump()), CPU)
    resumed.load_trainable_state(None, method.trainable_state(None))
    assert torch.equal(resumed.main.outputs["text_encoder"].detach(), main.outputs["text_encoder"].detach())


def test_preserve_embedding_norm_keeps_the_output_deviation():
    method = EmbeddingMethod()
    train_steps(tiny_model(), config(preserve_embedding_norm=True, embedding={"token_count": 2, "is_output_embedding": True}), method)
    vector, start = method.main.outputs["text_encoder"].detach(), method.main.initial_outputs["text_encoder"]
    assert not torch.equal(vector, start)
    assert torch.allclose(vector.std(dim=1).mean(), start.std(dim=1).mean(), rtol=1e-5)


def test_trainer_saves_and_continues_an_output_embedding(run_config, tmp_path):
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    class Watch(Reporter):
        losses: list[float] = []

        def metrics(self, **fields):
            self.losses.append(float(fields["loss"]))

    cfg = run_config(tmp_path, embedding={"token_count": 2, "is_output_embedding": True}, output_dtype="FLOAT_32")
    report = Watch()
    trainer = Trainer(cfg, RunPaths(tmp_path / "samples", tmp_path / "backup", tmp_path / "save", None, [tmp_path]), report)
    trainer.setup()
    encoder = {k: v.clone() for k, v in trainer.model.text_encoder.state_dict().items()}
    assert trainer.train() == "done"
    main = trainer.method.main
    assert report.losses and all(torch.isfinite(torch.tensor(report.losses)))
    assert not torch.equal(main.outputs["text_encoder"].detach(), main.initial_outputs["text_encoder"])
    assert all(torch.equal(encoder[k], v) for k, v in trainer.model.text_encoder.state_dict().items())

    saved = load_file(str(tmp_path / "out" / "emb.safetensors"))
    assert set(saved) == {output_key("emb_params")} == {"emp_params_out"}  # OneTrainer's key
    assert saved["emp_params_out"].shape == (2, trainer.model.text_encoder.config.hidden_size)
    assert torch.equal(saved["emp_params_out"], main.outputs["text_encoder"].detach())

    prompt = "a photo of <embedding>"
    with torch.no_grad():
        trained = trainer.model.encode_text([trainer.method.transform_text(prompt)])["encoder_hidden_states"]
    again = tiny_model()  # the same weights; the file's `_out` key makes it an output embedding again
    embeddings = Embeddings(again, CPU)
    loaded = embeddings.add(EmbeddingConfig(model_name=str(tmp_path / "out" / "emb.safetensors")), field="embedding",
                            train=True, train_parts={"text_encoder"})
    assert torch.equal(loaded.outputs["text_encoder"].detach(), saved["emp_params_out"])
    assert torch.count_nonzero(loaded.vectors["text_encoder"]) == 0
    with torch.no_grad():
        reread = again.encode_text([embeddings.expand(prompt)])["encoder_hidden_states"]
    assert torch.allclose(reread, trained, atol=1e-6)


def test_a_file_of_input_vectors_is_refused_as_an_output_embedding(tmp_path):
    from safetensors.torch import save_file

    model = tiny_model()
    save_file({"emb_params": torch.randn(2, model.text_encoder.config.hidden_size)}, str(tmp_path / "in.safetensors"))
    with pytest.raises(ValueError, match=r"embedding.is_output_embedding: .* holds input vectors"):
        output_embedding(model, model_name=str(tmp_path / "in.safetensors"))


def test_lora_bundles_output_vectors_under_onetrainers_key():
    from ot_gradio.training.lora_method import LoraMethod

    lora = LoraMethod()
    lora.setup(tiny_model(), config(training_method="LORA", lora_rank=2,
                                    additional_embeddings=[{"placeholder": "<t>", "is_output_embedding": True}]), CPU)
    tensors = lora.embeddings.bundle_tensors(lora.additional, torch.float32)
    assert set(tensors) == {bundle_output_key("<t>", "emb_params")} == {"bundle_emb.<t>.clip_l_out"}


def test_pixart_trains_its_t5_output_vectors(tmp_path):
    from types import SimpleNamespace

    from ot_gradio.models.pixart import PixArtAlpha
    from ot_gradio.models.tiny.pixart import tiny_pixart_components
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import DiffusionStep
    from ot_gradio.training.param_groups import optimizer_groups

    model = PixArtAlpha(**tiny_pixart_components())
    t5 = {k: v.clone() for k, v in model.text_encoder.state_dict().items()}
    cfg = config(model_type="PIXART_ALPHA", embedding={"placeholder": "<shape>", "token_count": 2, "is_output_embedding": True})
    method = EmbeddingMethod()
    groups = method.setup(model, cfg, CPU)
    vector = method.main.outputs["text_encoder"]
    assert [p for g in groups for p in g.params] == [vector] and vector.shape == (2, model.text_encoder.config.d_model)
    optimizer = torch.optim.AdamW(optimizer_groups(groups))
    step = DiffusionStep(model, cfg, CPU, Precision("FLOAT_32", CPU), caption_transform=method.transform_text)
    batch = SimpleNamespace(latents=torch.randn(2, 4, 8, 8), pixels=None, mask=None, size=(64, 64),
                            captions=["a <shape>", "<shape> on white"], loss_weights=torch.ones(2))
    for _ in range(2):
        loss = step.loss(batch, frozenset(g.model_part for g in groups))
        assert torch.isfinite(loss)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert not torch.equal(vector.detach(), method.main.initial_outputs["text_encoder"])
    assert torch.count_nonzero(method.main.vectors["text_encoder"]) == 0
    assert all(torch.equal(t5[k], v) for k, v in model.text_encoder.state_dict().items())
    saved = load_file(str(method.save(model, cfg, tmp_path / "shape.safetensors", {})))
    assert set(saved) == {"t5_out"} and torch.equal(saved["t5_out"], vector.detach())


# --- every family with embeddings ------------------------------------------------------------

FAMILIES = {  # tiny model -> (module, class)
    "sd15": ("sd15", "StableDiffusion15"), "sdxl": ("sdxl", "StableDiffusionXL"), "pixart": ("pixart", "PixArtAlpha"),
    "flux": ("flux", "FluxDev1"), "chroma": ("chroma", "Chroma1"), "sd3": ("sd3", "StableDiffusion3"),
    "sana": ("sana", "Sana"), "hidream": ("hidream", "HiDream"), "hunyuan_video": ("hunyuan_video", "HunyuanVideo"),
    "wuerstchen2": ("wuerstchen", "Wuerstchen2"), "cascade": ("stable_cascade", "StableCascade"),
}


def test_every_family_with_embeddings_is_covered():
    import importlib
    import pkgutil

    import ot_gradio.models as models

    with_embeddings = set()
    for info in pkgutil.iter_modules(models.__path__):
        module = importlib.import_module(f"ot_gradio.models.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__ and getattr(value, "embedding_keys", None):
                with_embeddings.add(value)
    covered = {getattr(importlib.import_module(f"ot_gradio.models.{m}"), c) for m, c in FAMILIES.values()}
    assert all(any(issubclass(f, c) or issubclass(c, f) for c in covered) for f in with_embeddings)  # a family or its base
    assert all(f.output_embedding_parts and set(f.output_embedding_parts) <= set(f.embedding_keys) for f in with_embeddings)


@pytest.mark.parametrize("tiny", list(FAMILIES))
def test_each_family_puts_the_output_vectors_into_its_prompt_embedding(tiny, tiny_dir, tmp_path):
    import importlib

    module, name = FAMILIES[tiny]
    model = getattr(importlib.import_module(f"ot_gradio.models.{module}"), name).load(f"tiny:{tiny}", offline=True)
    embeddings, embedding = output_embedding(model, token_count=1)
    assert set(embedding.outputs) == set(model.output_embedding_parts)
    for part in model.text_encoder_names:
        if part in embedding.outputs:
            assert torch.count_nonzero(embedding.vectors[part]) == 0
        else:  # only pooled: the initial text's input vectors, frozen (as OneTrainer)
            assert torch.equal(embedding.vectors[part].detach(), embedding.initial[part].to(embedding.vectors[part].dtype))
            assert not embedding.vectors[part].requires_grad
    if tiny == "flux":  # OneTrainer's Flux file: CLIP-L's input vectors, T5's output vectors
        assert set(embeddings.file_tensors(embedding, torch.float32)) == {"clip_l", "t5_out"}
    if tiny == "hidream":  # OneTrainer's HiDream file has Llama output vectors it does not apply: read, unused
        from safetensors.torch import save_file

        tensors = embeddings.file_tensors(embedding, torch.float32)
        save_file({**tensors, "llama_out": torch.ones(1, 3)}, str(tmp_path / "hd.safetensors"))
        again = type(model).load(f"tiny:{tiny}", offline=True)
        _, read = output_embedding(again, model_name=str(tmp_path / "hd.safetensors"))
        assert set(read.outputs) == {"text_encoder_3"} and torch.equal(read.outputs["text_encoder_3"].detach(), tensors["t5_out"])
        assert torch.count_nonzero(read.vectors["text_encoder_4"]) == 0
    randomize(embedding)
    seen = {}

    def spy(part, ids, hidden):
        seen[part] = (ids, embeddings.hook(part, ids, hidden))
        return seen[part][1]

    model.output_embeddings = spy
    prompt = [embeddings.expand("a <o>")]
    with torch.no_grad():
        first = model.encode_text(prompt)
        randomize(embedding, seed=2)
        second = model.encode_text(prompt)
    for part, vector in embedding.outputs.items():
        ids, hidden = seen[part]
        at = token_positions(ids.to(hidden.device), embedding, part)
        assert int(at.sum()) == 1
        assert torch.allclose(hidden[at].float(), vector.detach(), atol=1e-2)
    key = next(k for k, v in first.items() if v.ndim >= 3)
    assert not torch.allclose(first[key].float(), second[key].float())  # the prompt embedding is made from them
