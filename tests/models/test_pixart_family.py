"""The PixArt-α family on the tiny model: loading, T5 encoding with its attention mask, the
transformer's prediction and micro-conditions, the variance loss, sampling, saving, LoRA names."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from ot_gradio.config.enums import NoiseScheduler
from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.pixart import PixArtAlpha
from ot_gradio.models.sd15 import SAMPLERS
from ot_gradio.models.tiny.pixart import tiny_pixart_components
from tests.models.family_checks import family_fixtures

# `pixart`: one loaded tiny PixArt-α for tests that change neither its weights nor its settings
tiny_pixart_paths, pixart = family_fixtures("pixart", PixArtAlpha, "tiny_pixart_paths", "pixart", scope="session")


@pytest.fixture
def fresh(tiny_pixart_paths):
    return PixArtAlpha.load(str(tiny_pixart_paths.diffusers_dir), offline=True)


def _batch(height: int, width: int):
    return SimpleNamespace(size=(height, width))


# ------------------------------------------------------------------ loading


def test_load_hub_layout_folder(pixart, tiny_pixart_paths):
    index = json.loads((tiny_pixart_paths.diffusers_dir / "model_index.json").read_text())
    assert index["transformer"] == ["diffusers", "Transformer2DModel"]  # as on the hub
    assert type(pixart.transformer).__name__ == "PixArtTransformer2DModel"
    assert type(pixart.text_encoder).__name__ == "T5EncoderModel"
    assert set(pixart.parts) == {"transformer", "text_encoder", "vae"}
    assert pixart.transformer.use_additional_conditions  # sample_size 128: the 1024-MS layout
    assert type(pixart.noise_scheduler).__name__ == "DDPMScheduler"
    assert pixart.noise_scheduler.config.beta_schedule == "linear"
    assert pixart.prediction_type == "epsilon"
    assert pixart.learns_variance


def test_dtypes_per_part(tiny_pixart_paths):
    model = PixArtAlpha.load(str(tiny_pixart_paths.diffusers_dir), offline=True, dtypes={"transformer": torch.bfloat16})
    assert next(model.transformer.parameters()).dtype == torch.bfloat16
    assert next(model.text_encoder.parameters()).dtype == torch.float32
    assert next(model.vae.parameters()).dtype == torch.float32
    with pytest.raises(ValueError, match="unet"):
        PixArtAlpha.load(str(tiny_pixart_paths.diffusers_dir), offline=True, dtypes={"unet": torch.float16})


def test_single_file_is_refused_with_what_to_do(tiny_pixart_paths):
    with pytest.raises(ModelLoadError, match="diffusers folder") as info:
        PixArtAlpha.load(str(tiny_pixart_paths.single_file), offline=True)
    assert "convert_pixart_alpha_to_diffusers" in str(info.value)


@pytest.mark.parametrize("name", ["/no/such/folder", "./relative/missing"])
def test_missing_path_is_a_clear_error(name):
    with pytest.raises(ModelLoadError, match="not found"):
        PixArtAlpha.load(name, offline=True)


# ------------------------------------------------------------------ text encoding


def test_encode_text_shapes_mask_and_sequence_length(fresh):
    out = fresh.encode_text(["a red circle", "x"])
    hidden, mask = out["encoder_hidden_states"], out["encoder_attention_mask"]
    assert hidden.shape == (2, 120, 32) and mask.shape == (2, 120)
    ids, _ = fresh.tokenize(["a red circle", "x"])
    real = (ids != fresh.tokenizer.pad_token_id).sum(dim=1)
    assert mask.sum(dim=1).tolist() == real.tolist() == [11, 2]  # 10 pieces + </s>; 1 + </s>
    assert not hidden.requires_grad

    fresh.text_encoder_sequence_length = 40
    short = fresh.encode_text(["a red circle"])
    assert short["encoder_hidden_states"].shape == (1, 40, 32)
    assert fresh.tokenize(["a red circle " * 10])[0].shape == (1, 40)  # truncated


def test_encode_text_gradients_only_for_trained_text_encoder(fresh):
    assert not fresh.encode_text(["a"])["encoder_hidden_states"].requires_grad
    assert fresh.encode_text(["a"], grad={"text_encoder"})["encoder_hidden_states"].requires_grad


def test_layer_skip_takes_an_earlier_t5_layer_with_final_norm(fresh):
    ids, mask = fresh.tokenize(["a blue square"])
    last = fresh.encode_prompt(ids, mask)
    fresh.layer_skips = {"text_encoder": 1}
    skipped = fresh.encode_text(["a blue square"])["encoder_hidden_states"]
    states = fresh.text_encoder(ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert torch.allclose(skipped, fresh.text_encoder.encoder.final_layer_norm(states[-2]), atol=1e-5)
    assert not torch.allclose(skipped, last)


# ------------------------------------------------------------------ the attention mask


def test_padding_never_changes_the_prediction(fresh):
    """Fails if the mask were dropped at T5 (real tokens would attend to padding) or at the
    transformer's cross-attention (it would attend to padded states)."""
    torch.manual_seed(0)
    latents, t = torch.randn(2, 4, 8, 8), torch.tensor([100, 700])
    captions = ["a red circle", "a green triangle on a white background"]
    with torch.no_grad():
        long = fresh.encode_text(captions)
        eps_long = fresh.predict(latents, t, long, _batch(64, 64))
        fresh.text_encoder_sequence_length = 48
        short = fresh.encode_text(captions)
        eps_short = fresh.predict(latents, t, short, _batch(64, 64))
        assert torch.allclose(eps_long, eps_short, atol=1e-5)

        # other padding tokens: the real tokens' states stay the same
        ids, mask = fresh.tokenize(captions)
        other_ids = torch.where(mask.bool(), ids, torch.full_like(ids, 7))
        assert torch.allclose(
            fresh.encode_prompt(ids, mask)[mask.bool()], fresh.encode_prompt(other_ids, mask)[mask.bool()], atol=1e-5
        )

        # other states at padded positions: the same prediction
        noise = torch.randn_like(short["encoder_hidden_states"]) * 10
        padded = ~short["encoder_attention_mask"].bool()
        changed = dict(short, encoder_hidden_states=torch.where(padded[..., None], noise, short["encoder_hidden_states"]))
        assert torch.allclose(fresh.predict(latents, t, changed, _batch(64, 64)), eps_short, atol=1e-5)
        # ...which is the mask's doing: without it the padded states change the prediction
        unmasked = dict(changed, encoder_attention_mask=None)
        assert not torch.allclose(fresh.predict(latents, t, unmasked, _batch(64, 64)), eps_short, atol=1e-3)


# ------------------------------------------------------------------ prediction


def test_predict_shapes_and_variance_channels(pixart):
    latents, t = torch.randn(2, 4, 8, 12), torch.tensor([10, 900])
    with torch.no_grad():
        cond = pixart.encode_text(["a", "b"])
        eps = pixart.predict(latents, t, cond, _batch(64, 96))
        eps2, var = pixart.predict(latents, t, cond, _batch(64, 96), variance=True)
    assert eps.shape == var.shape == (2, 4, 8, 12)
    assert torch.equal(eps, eps2)
    target = pixart.prediction_target(latents, torch.ones_like(latents), t)
    assert torch.equal(target, torch.ones_like(latents))  # epsilon


def test_micro_conditions_of_the_1024_model_come_from_the_batch_size(pixart):
    latents, t = torch.randn(1, 4, 8, 8), torch.tensor([500])
    with torch.no_grad():
        cond = pixart.encode_text(["a"])
        at_64 = pixart.predict(latents, t, cond, _batch(64, 64))
        at_latent_size = pixart.predict(latents, t, cond, None)
        at_1024 = pixart.predict(latents, t, cond, _batch(1024, 1024))
        tall = pixart.predict(latents, t, cond, _batch(128, 64))
    assert torch.equal(at_64, at_latent_size)
    assert not torch.allclose(at_64, at_1024) and not torch.allclose(at_64, tall)
    conditions = pixart.micro_conditions(2, 768, 1024, "cpu", torch.float32)
    assert conditions["resolution"].tolist() == [[768.0, 1024.0]] * 2
    assert conditions["aspect_ratio"].tolist() == [[0.75]] * 2


def test_the_512_model_has_no_micro_conditions():
    c = tiny_pixart_components(sample_size=64)
    model = PixArtAlpha(c["tokenizer"], c["text_encoder"], c["vae"], c["transformer"], c["scheduler"])
    assert not model.transformer.use_additional_conditions
    latents, t = torch.randn(1, 4, 8, 8), torch.tensor([500])
    with torch.no_grad():
        cond = model.encode_text(["a"])
        assert torch.equal(model.predict(latents, t, cond, _batch(64, 64)), model.predict(latents, t, cond, _batch(1024, 512)))


def test_variance_loss_trains_only_the_variance_and_follows_its_strength(fresh):
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import DiffusionStep

    torch.manual_seed(0)
    latents = torch.randn(2, 4, 8, 8)
    batch = SimpleNamespace(
        latents=latents, pixels=None, mask=None, size=(64, 64), captions=["a red circle", "a blue square"],
        loss_weights=torch.ones(2),
    )
    noise, t = torch.randn_like(latents), torch.tensor([0, 600])  # t = 0 takes the decoder NLL
    proj = fresh.transformer.proj_out.weight
    channels = fresh.transformer.config.out_channels
    variance_rows = torch.arange(proj.shape[0]) % channels >= channels // 2  # (p, q, channel) order
    grads, losses = {}, {}
    for strength in (0.0, 1.0):
        step = DiffusionStep(fresh, TrainConfig(vb_loss_strength=strength), torch.device("cpu"), Precision("FLOAT_32", torch.device("cpu")), lambda _: (noise, t))
        proj.grad = None
        loss = step.loss(batch)
        loss.backward()
        grads[strength], losses[strength] = proj.grad.clone(), loss.item()
    assert grads[0.0][variance_rows].abs().max() == 0  # without the bound nothing trains the variance
    assert grads[1.0][variance_rows].abs().max() > 0
    assert torch.allclose(grads[0.0][~variance_rows], grads[1.0][~variance_rows])  # epsilon enters detached
    assert losses[1.0] > losses[0.0] and torch.isfinite(torch.tensor(losses[1.0]))

    fresh.configure_noise_schedule(prediction_type="v_prediction")
    assert not fresh.learns_variance  # the bound is written for epsilon


# ------------------------------------------------------------------ sampling


def test_sample_has_the_asked_size_and_keeps_modes(fresh):
    fresh.transformer.train()
    image = fresh.sample("a red circle", height=72, width=100, steps=2, seed=1)
    assert image.size == (100, 72)
    assert fresh.transformer.training and not fresh.text_encoder.training
    again = fresh.sample("a red circle", height=72, width=100, steps=2, seed=1)
    assert list(image.getdata()) == list(again.getdata())


@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_every_sampler_runs(pixart, sampler):
    image = pixart.sample("a blue square", height=64, width=64, steps=2, seed=0, sampler=sampler)
    assert image.size == (64, 64)


def test_sampling_uses_the_training_text_settings(fresh):
    base = fresh.sample("a red circle", height=64, width=64, steps=2, seed=3, sampler=NoiseScheduler.EULER)
    fresh.layer_skips = {"text_encoder": 1}
    skipped = fresh.sample("a red circle", height=64, width=64, steps=2, seed=3, sampler=NoiseScheduler.EULER)
    assert list(base.getdata()) != list(skipped.getdata())


# ------------------------------------------------------------------ saving


def test_save_diffusers_round_trip(pixart, tmp_path):
    from diffusers import PixArtAlphaPipeline
    from safetensors.torch import load_file

    out = pixart.save_diffusers(tmp_path / "saved", "BFLOAT_16")
    assert next(pixart.transformer.parameters()).dtype == torch.float32  # the live model keeps its dtype
    for file in (out / "transformer" / "diffusion_pytorch_model.safetensors", out / "text_encoder" / "model.safetensors"):
        assert {t.dtype for t in load_file(str(file)).values()} == {torch.bfloat16}
    pipe = PixArtAlphaPipeline.from_pretrained(out, local_files_only=True)
    assert type(pipe.transformer).__name__ == "PixArtTransformer2DModel"
    reloaded = PixArtAlpha.load(str(out), offline=True)
    for part in reloaded.parts:
        ours, theirs = pixart.parts[part].state_dict(), reloaded.parts[part].state_dict()
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(ours[k].to(torch.bfloat16).float(), theirs[k].float()) for k in ours)
    assert reloaded.transformer.use_additional_conditions
    assert reloaded.tokenize(["a red circle"])[0].tolist() == pixart.tokenize(["a red circle"])[0].tolist()
    assert reloaded.scheduler.config.beta_schedule == "linear"


def test_save_single_file_is_the_original_transformer_layout(pixart, tmp_path):
    from safetensors.torch import load_file

    path = pixart.save_single_file(tmp_path / "pixart.safetensors", "FLOAT_32")
    sd = load_file(str(path))
    per_block = {
        "scale_shift_table", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
        "cross_attn.q_linear.weight", "cross_attn.q_linear.bias", "cross_attn.kv_linear.weight",
        "cross_attn.kv_linear.bias", "cross_attn.proj.weight", "cross_attn.proj.bias", "mlp.fc1.weight",
        "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias",
    }
    top = {
        "pos_embed", "x_embedder.proj.weight", "x_embedder.proj.bias", "t_block.1.weight", "t_block.1.bias",
        "final_layer.scale_shift_table", "final_layer.linear.weight", "final_layer.linear.bias",
    } | {f"{m}.{i}.{k}" for m in ("t_embedder.mlp", "csize_embedder.mlp", "ar_embedder.mlp") for i in (0, 2) for k in ("weight", "bias")} | {
        f"y_embedder.y_proj.{fc}.{k}" for fc in ("fc1", "fc2") for k in ("weight", "bias")
    }
    assert set(sd) == top | {f"blocks.{n}.{k}" for n in range(2) for k in per_block}
    block = pixart.transformer.transformer_blocks[1]
    assert torch.equal(sd["blocks.1.attn.qkv.weight"], torch.cat([block.attn1.to_q.weight, block.attn1.to_k.weight, block.attn1.to_v.weight]))
    assert torch.equal(sd["blocks.1.cross_attn.kv_linear.bias"], torch.cat([block.attn2.to_k.bias, block.attn2.to_v.bias]))
    assert torch.equal(sd["t_block.1.weight"], pixart.transformer.adaln_single.linear.weight)
    assert sd["pos_embed"].shape == (1, 64 * 64, 24)  # the 1024 model's 64 x 64 patches


# ------------------------------------------------------------------ LoRA layers and names


def test_lora_presets_pick_transformer_and_t5_layers(pixart):
    from ot_gradio.training.lora import select_lora_targets

    presets = pixart.lora_layer_presets
    attn = select_lora_targets(pixart.transformer, kind="unet", layer_preset="attn-only", presets=presets["transformer"])
    assert attn and all(".attn1." in n or ".attn2." in n for n in attn)
    mlp = select_lora_targets(pixart.transformer, kind="unet", layer_preset="attn-mlp", presets=presets["transformer"])
    assert set(mlp) - set(attn) == {f"transformer_blocks.{i}.ff.net.{j}" for i in range(2) for j in ("0.proj", "2")}
    full = select_lora_targets(pixart.transformer, kind="unet", layer_preset="full", presets=presets["transformer"])
    assert {"pos_embed.proj", "proj_out", "adaln_single.linear", "caption_projection.linear_1"} <= set(full)
    t5 = select_lora_targets(pixart.text_encoder, kind="text_encoder", layer_preset="attn-only", presets=presets["text_encoder"])
    assert sorted(t5) == sorted(f"encoder.block.{i}.layer.0.SelfAttention.{p}" for i in range(2) for p in "qkvo")
    t5_full = select_lora_targets(pixart.text_encoder, kind="text_encoder", layer_preset="full", presets=presets["text_encoder"])
    assert len(t5_full) == 2 * 7  # q k v o wi_0 wi_1 wo


def test_lora_files_use_onetrainer_names_and_read_back(fresh, tmp_path):
    from safetensors import safe_open

    from ot_gradio.training.lora import add_lora, lora_state_dict
    from ot_gradio.training.lora_format import DIFFUSERS, KOHYA, load_lora_file, save_lora, save_lora_parts

    presets = fresh.lora_layer_presets
    add_lora(fresh.transformer, kind="unet", rank=2, alpha=1.0, dropout=0.0, layer_preset="full", presets=presets["transformer"])
    add_lora(fresh.text_encoder, kind="text_encoder", rank=2, alpha=1.0, dropout=0.0, layer_preset="full", presets=presets["text_encoder"])
    for p in [*fresh.transformer.parameters(), *fresh.text_encoder.parameters()]:
        if p.requires_grad:
            torch.nn.init.normal_(p)
    parts = {"transformer": fresh.transformer, "text_encoder": fresh.text_encoder}
    kohya = save_lora(tmp_path / "k.safetensors", parts, base_model_version=fresh.lora_base_model_version, lora_format=KOHYA)
    with safe_open(str(kohya), "pt") as f:
        keys, meta = set(f.keys()), f.metadata()
    assert "lora_transformer_transformer_blocks_0_attn1_to_q.lora_down.weight" in keys
    assert "lora_transformer_adaln_single_emb_aspect_ratio_embedder_linear_1.alpha" in keys
    assert "lora_te_encoder_block_1_layer_1_DenseReluDense_wi_0.lora_up.weight" in keys
    assert all(k.startswith(("lora_transformer_", "lora_te_encoder_block_")) for k in keys)
    assert meta["ss_base_model_version"] == "pixart_alpha"

    loaded = load_lora_file(kohya)
    expected = {p: lora_state_dict(m) for p, m in parts.items()}
    for part in expected:  # kohya names map back to the exact module paths
        assert loaded.parts[part].keys() == expected[part].keys()
        assert all(torch.equal(loaded.parts[part][k], expected[part][k]) for k in expected[part])

    converted = save_lora_parts(tmp_path / "d.safetensors", *loaded, lora_format=DIFFUSERS)
    with safe_open(str(converted), "pt") as f:
        dkeys = set(f.keys())
    assert "transformer.transformer_blocks.0.attn1.to_q.lora_A.weight" in dkeys
    assert "text_encoder.encoder.block.0.layer.0.SelfAttention.q.lora_B.weight" in dkeys


# ------------------------------------------------------------------ embeddings


def test_embedding_trains_only_its_t5_vectors(fresh, tmp_path):
    from safetensors.torch import load_file

    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import DiffusionStep
    from ot_gradio.training.embedding_method import EmbeddingMethod
    from ot_gradio.training.param_groups import optimizer_groups

    cpu = torch.device("cpu")
    cfg = TrainConfig.model_validate(
        {"training_method": "EMBEDDING", "learning_rate": 0.05, "embedding": {"placeholder": "<shape>", "token_count": 2,
                                                                              "initial_embedding_text": "circle"}}
    )
    method = EmbeddingMethod()
    groups = method.setup(fresh, cfg, cpu)
    t5_before = {k: v.clone() for k, v in fresh.text_encoder.state_dict().items() if "shared" not in k and "embed_tokens" not in k}
    vector = next(p for g in groups for p in g.params)
    start = vector.detach().clone()
    optimizer = torch.optim.AdamW(optimizer_groups(groups))
    step = DiffusionStep(fresh, cfg, cpu, Precision("FLOAT_32", cpu), caption_transform=method.transform_text)
    batch = SimpleNamespace(
        latents=torch.randn(2, 4, 8, 8), pixels=None, mask=None, size=(64, 64), captions=["a <shape>", "<shape> on white"],
        loss_weights=torch.ones(2),
    )
    parts = frozenset(g.model_part for g in groups)
    for _ in range(2):
        step.loss(batch, parts).backward()
        optimizer.step()
        optimizer.zero_grad()
    assert not torch.equal(vector.detach(), start)
    after = fresh.text_encoder.state_dict()
    assert all(torch.equal(after[k], v) for k, v in t5_before.items())
    ids = fresh.tokenize([method.transform_text("a <shape>")])[0][0].tolist()
    assert len(fresh.tokenizer) - 2 in ids and len(fresh.tokenizer) - 1 in ids  # the new tokens are read
    out = method.save(fresh, cfg, tmp_path / "shape.safetensors", {})
    assert set(load_file(str(out))) == {"t5"} and load_file(str(out))["t5"].shape == (2, 32)
