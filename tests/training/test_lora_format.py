"""LoRA files: kohya and diffusers layouts load in diffusers exactly like the model we trained."""

from __future__ import annotations

import contextlib
import logging
import warnings
from types import SimpleNamespace

import pytest  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from ot_gradio.training.lora import add_lora, load_lora_state_dict, lora_layers, lora_state_dict  # noqa: E402
from ot_gradio.training.lora_format import (  # noqa: E402
    kohya_name,
    load_lora_file,
    module_path_from_kohya,
    read_lora_metadata,
    save_lora,
    save_lora_parts,
)

RANK, ALPHA = 4, 1.0  # scale 1/4: a loader that ignored alpha would not match




def _pipeline():
    from ot_gradio.models.tiny.sd15 import tiny_sd15_pipeline

    return tiny_sd15_pipeline(seed=0)


def _inputs():
    g = torch.Generator().manual_seed(1)
    return SimpleNamespace(
        ids=torch.randint(0, 500, (2, 77), generator=g),
        latents=torch.randn(2, 4, 8, 8, generator=g),
        timesteps=torch.tensor([10, 700]),
        hidden=torch.randn(2, 77, 32, generator=g),
    )


def _outputs(pipe, inputs):
    with torch.no_grad():
        text = pipe.text_encoder(inputs.ids).last_hidden_state
        noise = pipe.unet(inputs.latents, inputs.timesteps, encoder_hidden_states=inputs.hidden).sample
    return text, noise


def _randomize_up_weights(*modules, seed=2):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in modules:
            for name, p in module.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.5)


@pytest.fixture(scope="module")
def trained():
    """A tiny SD 1.5 with LoRA on every UNet and text-encoder layer and non-zero up weights."""
    pipe = _pipeline()
    inputs = _inputs()
    base = _outputs(pipe, inputs)
    for module, kind in ((pipe.unet, "unet"), (pipe.text_encoder, "text_encoder")):
        add_lora(module, kind=kind, rank=RANK, alpha=ALPHA, dropout=0.0, layer_preset="full")
    _randomize_up_weights(pipe.unet, pipe.text_encoder)
    pipe.unet.eval()
    pipe.text_encoder.eval()
    return SimpleNamespace(pipe=pipe, inputs=inputs, base=base, ref=_outputs(pipe, inputs))


@contextlib.contextmanager
def _library_messages():
    """Everything diffusers / transformers / peft log or warn while loading (their loggers do not
    propagate to pytest's caplog). INFO is let through so we can see the capture works."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Collect(logging.DEBUG)
    loggers = [logging.getLogger(name) for name in ("diffusers", "transformers", "peft")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield records, caught
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


def _load_in_diffusers(path):
    pipe = _pipeline()
    with _library_messages() as (records, caught):
        pipe.load_lora_weights(str(path))
    assert any(r.name.startswith("diffusers") for r in records), "log capture saw nothing"
    problems = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    # a ResourceWarning is the garbage collector closing what an earlier test left (an event loop),
    # whichever test it happens in: not something the load said
    problems += [str(w.message) for w in caught if not issubclass(w.category, (DeprecationWarning, FutureWarning, ResourceWarning))]
    return pipe, problems


def _assert_same_as(trained, pipe, *, text=True):
    text_out, noise = _outputs(pipe, trained.inputs)
    torch.testing.assert_close(noise, trained.ref[1], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(noise, trained.base[1], atol=1e-3)
    if text:
        torch.testing.assert_close(text_out, trained.ref[0], rtol=1e-5, atol=1e-5)
        assert not torch.allclose(text_out, trained.base[0], atol=1e-3)


def _keys(path):
    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def test_kohya_keys(trained, tmp_path):
    path = save_lora(tmp_path / "style.safetensors", unet=trained.pipe.unet, text_encoder=trained.pipe.text_encoder)
    tensors = _keys(path)
    names = {k.split(".", 1)[0] for k in tensors}
    assert len(names) == len(lora_layers(trained.pipe.unet)) + len(lora_layers(trained.pipe.text_encoder))
    for name in names:
        assert name.startswith(("lora_unet_", "lora_te_")) and not name.startswith("lora_te1_")
        assert {k for k in tensors if k.startswith(name + ".")} == {f"{name}.lora_down.weight", f"{name}.lora_up.weight", f"{name}.alpha"}
        assert tensors[f"{name}.alpha"].shape == () and tensors[f"{name}.alpha"].item() == ALPHA
    assert "lora_te_text_model_encoder_layers_0_self_attn_q_proj" in names
    assert "lora_te_text_model_encoder_layers_1_mlp_fc2" in names
    assert "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_out_0" in names
    conv = "lora_unet_down_blocks_0_resnets_0_conv1"
    assert tensors[f"{conv}.lora_down.weight"].shape == (RANK, 16, 3, 3)
    assert tensors[f"{conv}.lora_up.weight"].shape == (16, RANK, 1, 1)


@pytest.mark.parametrize("lora_format", ["kohya", "diffusers"])
def test_file_loads_in_diffusers_like_the_trained_model(trained, tmp_path, lora_format):
    path = save_lora(
        tmp_path / "style.safetensors", unet=trained.pipe.unet, text_encoder=trained.pipe.text_encoder, lora_format=lora_format
    )
    pipe, problems = _load_in_diffusers(path)
    assert problems == []
    _assert_same_as(trained, pipe)


def test_diffusers_layout(trained, tmp_path):
    path = save_lora(
        tmp_path / "style.safetensors", unet=trained.pipe.unet, text_encoder=trained.pipe.text_encoder, lora_format="diffusers"
    )
    keys = set(_keys(path))
    assert all(k.startswith(("unet.", "text_encoder.")) and k.endswith((".lora_A.weight", ".lora_B.weight")) for k in keys)
    assert "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora_A.weight" in keys
    # the single-file / ComfyUI / older-diffusers spelling of CLIP layers
    assert "text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_B.weight" in keys
    meta = read_lora_metadata(path)
    # alpha / rank is folded into lora_B, so the file says alpha = rank and keeps the trained alpha apart
    assert meta["format"] == "pt" and f'"unet.lora_alpha": {float(RANK)}' in meta["lora_adapter_metadata"]
    assert float(meta["ot_gradio_folded_alpha"]) == ALPHA and float(meta["ss_network_alpha"]) == RANK


def test_diffusers_file_applies_the_trained_strength_in_comfyui(trained, tmp_path):
    """ComfyUI reads no alpha from a diffusers/PEFT file (scale 1, tests/lora_reference.py):
    the weights alone must give what was trained, not rank / alpha times it."""
    from tests.lora_reference import merge_comfy_diffusers_reference

    path = save_lora(tmp_path / "s.safetensors", unet=trained.pipe.unet, text_encoder=trained.pipe.text_encoder, lora_format="diffusers")
    pipe = _pipeline()
    assert merge_comfy_diffusers_reference(pipe, _keys(path)) == len(lora_layers(trained.pipe.unet)) + len(lora_layers(trained.pipe.text_encoder))
    _assert_same_as(trained, pipe)


def test_diffusers_file_written_before_the_fold_reads_the_same(trained, tmp_path):
    """A file of the earlier writer (weights unscaled, `lora_alpha` = the trained alpha) still
    reads as the same LoRA."""
    import json

    path = save_lora(tmp_path / "s.safetensors", unet=trained.pipe.unet, text_encoder=trained.pipe.text_encoder, lora_format="diffusers")
    meta = read_lora_metadata(path)
    old = {k: v * (RANK / ALPHA) if k.endswith("lora_B.weight") else v for k, v in _keys(path).items()}
    adapter = {k: ALPHA if k.endswith(".lora_alpha") else v for k, v in json.loads(meta.pop("lora_adapter_metadata")).items()}
    meta.pop("ot_gradio_folded_alpha")
    save_file(old, str(tmp_path / "old.safetensors"), metadata={**meta, "ss_network_alpha": str(ALPHA), "lora_adapter_metadata": json.dumps(adapter)})
    for file in (path, tmp_path / "old.safetensors"):
        parts, rank, alpha = load_lora_file(file)
        assert (rank, alpha) == (RANK, ALPHA)
        for part, module in (("unet", trained.pipe.unet), ("text_encoder", trained.pipe.text_encoder)):
            expected = lora_state_dict(module)
            assert parts[part].keys() == expected.keys()
            assert all(torch.equal(parts[part][k], v) for k, v in expected.items())


def test_unet_only_custom_filter(tmp_path):
    pipe = _pipeline()
    inputs = _inputs()
    base = _outputs(pipe, inputs)
    add_lora(pipe.unet, kind="unet", rank=2, alpha=8.0, dropout=0.0, layer_preset="custom", layer_filter="attn2,conv_shortcut")
    _randomize_up_weights(pipe.unet, seed=5)
    ref = _outputs(pipe, inputs)
    path = save_lora(tmp_path / "unet.safetensors", unet=pipe.unet)
    assert all(k.startswith("lora_unet_") for k in _keys(path))

    loaded, problems = _load_in_diffusers(path)
    # diffusers notes (harmlessly) that a UNet-only file has nothing for the text encoder
    assert [p for p in problems if "No LoRA keys associated to CLIPTextModel" not in p] == []
    trained = SimpleNamespace(inputs=inputs, base=base, ref=ref)
    _assert_same_as(trained, loaded, text=False)


@pytest.mark.parametrize("lora_format", ["kohya", "diffusers"])
def test_load_lora_file_round_trip(trained, tmp_path, lora_format):
    path = save_lora(
        tmp_path / "style.safetensors", unet=trained.pipe.unet, text_encoder=trained.pipe.text_encoder, lora_format=lora_format
    )
    parts, rank, alpha = load_lora_file(path)
    assert (rank, alpha) == (RANK, ALPHA)
    for part, module in (("unet", trained.pipe.unet), ("text_encoder", trained.pipe.text_encoder)):
        expected = lora_state_dict(module)
        assert parts[part].keys() == expected.keys()
        assert all(torch.equal(parts[part][k], v) for k, v in expected.items())


def test_continue_training_from_a_file(trained, tmp_path):
    src = save_lora(tmp_path / "a.safetensors", unet=trained.pipe.unet, text_encoder=trained.pipe.text_encoder)
    # and through the converter, kohya -> diffusers
    path = save_lora_parts(tmp_path / "b.safetensors", *load_lora_file(src), lora_format="diffusers")
    parts, rank, alpha = load_lora_file(path)
    pipe = _pipeline()
    for kind in ("unet", "text_encoder"):
        module = getattr(pipe, kind)
        add_lora(module, kind=kind, rank=rank, alpha=alpha, dropout=0.0, layer_preset="full")
        load_lora_state_dict(module, parts[kind], kind=kind)
    _assert_same_as(trained, pipe)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("lora_format", ["kohya", "diffusers"])
def test_output_dtype(trained, tmp_path, dtype, lora_format):
    path = save_lora(
        tmp_path / "x.safetensors", unet=trained.pipe.unet, text_encoder=trained.pipe.text_encoder, lora_format=lora_format, dtype=dtype
    )
    tensors = _keys(path)
    weights = {k: v for k, v in tensors.items() if not k.endswith(".alpha")}
    assert {v.dtype for v in weights.values()} == {dtype}
    assert all(v.dtype == torch.float32 and v.shape == () for k, v in tensors.items() if k.endswith(".alpha"))
    parts, _, _ = load_lora_file(path)
    reference = lora_state_dict(trained.pipe.unet)
    for key, value in parts["unet"].items():
        torch.testing.assert_close(value.float(), reference[key], rtol=1e-2, atol=1e-2)


def test_bad_output_dtype_or_format(trained, tmp_path):
    with pytest.raises(ValueError, match="dtype"):
        save_lora(tmp_path / "x.safetensors", unet=trained.pipe.unet, dtype=torch.float64)
    with pytest.raises(ValueError, match="format"):
        save_lora(tmp_path / "x.safetensors", unet=trained.pipe.unet, lora_format="lycoris")
    assert list(tmp_path.iterdir()) == []


def test_metadata(trained, tmp_path):
    extra = {"ss_training_comment": "trigger: sks dog", "ot_gradio_config": {"lora_rank": RANK}}
    path = save_lora(
        tmp_path / "dog.safetensors",
        unet=trained.pipe.unet,
        text_encoder=trained.pipe.text_encoder,
        resolution=512,
        steps=1200,
        epoch=12,
        extra_metadata=extra,
    )
    meta = read_lora_metadata(path)
    assert all(isinstance(v, str) for v in meta.values())
    assert meta["ss_network_module"] == "networks.lora"
    assert meta["ss_network_dim"] == "4" and float(meta["ss_network_alpha"]) == ALPHA
    assert meta["ss_base_model_version"] == "sd_v1"
    assert meta["ss_resolution"] == "(512, 512)"
    assert (meta["ss_steps"], meta["ss_epoch"], meta["ss_output_name"]) == ("1200", "12", "dog")
    assert meta["ss_training_comment"] == "trigger: sks dog"
    assert meta["ot_gradio_config"] == '{"lora_rank": 4}'


def test_atomic_write_leaves_no_temp_files(trained, tmp_path, monkeypatch):
    target = tmp_path / "out" / "lora.safetensors"
    save_lora(target, unet=trained.pipe.unet)
    assert [p.name for p in target.parent.iterdir()] == ["lora.safetensors"]
    before = target.read_bytes()

    import safetensors.torch

    def crash(tensors, filename, metadata=None):
        with open(filename, "wb") as f:
            f.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", crash)
    with pytest.raises(OSError, match="disk full"):
        save_lora(target, unet=trained.pipe.unet, text_encoder=trained.pipe.text_encoder)
    assert [p.name for p in target.parent.iterdir()] == ["lora.safetensors"]
    assert target.read_bytes() == before


def test_kohya_names_round_trip(trained):
    for part, module in (("unet", trained.pipe.unet), ("text_encoder", trained.pipe.text_encoder)):
        for name in lora_layers(module):
            flat = kohya_name(part, name)
            prefix = "lora_unet_" if part == "unet" else "lora_te_text_model_"
            assert flat.startswith(prefix)
            path = module_path_from_kohya(flat.removeprefix("lora_unet_").removeprefix("lora_te_"))
            assert path == (name if part == "unet" else "text_model." + name)


def test_per_layer_alphas_are_folded_into_up_weights(tmp_path):
    down, up = torch.randn(2, 8), torch.randn(8, 2)
    tensors = {}
    for name, alpha in (("lora_unet_a_to_q", 1.0), ("lora_unet_b_to_k", 1.0), ("lora_te1_text_model_encoder_layers_0_mlp_fc1", 4.0)):
        tensors[f"{name}.lora_down.weight"] = down.clone()
        tensors[f"{name}.lora_up.weight"] = up.clone()
        tensors[f"{name}.alpha"] = torch.tensor(alpha)
    save_file(tensors, tmp_path / "mixed.safetensors")
    parts, rank, alpha = load_lora_file(tmp_path / "mixed.safetensors")
    assert (rank, alpha) == (2, 1.0)
    assert torch.equal(parts["unet"]["a.to_q.lora_B.weight"], up)
    torch.testing.assert_close(parts["text_encoder"]["encoder.layers.0.mlp.fc1.lora_B.weight"], up * 4)

    save_file(
        {**tensors, "lora_unet_c.lora_down.weight": torch.randn(3, 8), "lora_unet_c.lora_up.weight": torch.randn(8, 3)},
        tmp_path / "ranks.safetensors",
    )
    parts, rank, alpha = load_lora_file(tmp_path / "ranks.safetensors")  # padded to the largest rank, alpha / rank kept
    assert (rank, alpha) == (3, 1.5)
    torch.testing.assert_close(parts["unet"]["a.to_q.lora_B.weight"] @ parts["unet"]["a.to_q.lora_A.weight"] * 0.5, up @ down * 0.5)
    save_file({**tensors, "lora_unet_a_to_q.dora_scale": torch.ones(8)}, tmp_path / "dora.safetensors")
    with pytest.raises(ValueError, match="DoRA"):
        load_lora_file(tmp_path / "dora.safetensors")
    save_file({"model.diffusion_model.out.weight": down}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="neither"):
        load_lora_file(tmp_path / "model.safetensors")


def test_old_diffusers_attention_processor_layout(tmp_path):
    w = {"down": torch.randn(2, 8), "up": torch.randn(8, 2)}
    save_file(
        {
            "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.processor.to_out_lora.down.weight": w["down"].clone(),
            "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.processor.to_out_lora.up.weight": w["up"].clone(),
            "text_encoder.text_model.encoder.layers.0.self_attn.to_q_lora.down.weight": w["down"].clone(),
            "text_encoder.text_model.encoder.layers.0.self_attn.to_q_lora.up.weight": w["up"].clone(),
        },
        tmp_path / "old.safetensors",
    )
    parts, rank, alpha = load_lora_file(tmp_path / "old.safetensors")
    assert (rank, alpha) == (2, 2.0)
    assert set(parts["unet"]) == {f"down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0.lora_{x}.weight" for x in "AB"}
    assert set(parts["text_encoder"]) == {f"encoder.layers.0.self_attn.q_proj.lora_{x}.weight" for x in "AB"}
