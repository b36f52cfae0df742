"""DoRA, LoHa, LoKr and OFT v2 on the tiny SD 1.5: training moves them, their files read back into a fresh
model with the same outputs, and the kohya files carry the weights A1111/ComfyUI rebuild (checked
by our own implementation of their merge formulas), or load in diffusers / peft."""

from __future__ import annotations

import json
import logging
import warnings
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from ot_gradio.config.schema import TrainConfig
from ot_gradio.training.lora import add_lora, load_lora_state_dict, lora_layers, lora_rank_alpha, lora_state_dict
from ot_gradio.training.lora_format import load_lora_file, read_lora_metadata, save_lora
from ot_gradio.training.lora_layer_entries import check_output_format, check_start_file
from ot_gradio.training.lora_variants import ADAPTER_NAME, AdapterSpec
from tests.lora_reference import merge_kohya_reference

ALPHA = 1.0
VARIANTS = {
    # OneTrainer's DoRA default: norm over each input column, epsilon on
    "dora": (AdapterSpec(decompose=True), 2),
    "dora_out": (AdapterSpec(decompose=True, output_axis=True, norm_epsilon=False), 2),
    "loha": (AdapterSpec(peft_type="LOHA"), 2),
    # the tiny layers factor as 4 x 8 (32) and 4 x 4 (16): rank 2 keeps w2 low-rank
    "lokr": (AdapterSpec(peft_type="LOKR"), 2),
    # rank 8 makes both factors full matrices, which readers apply at scale 1 whatever the alpha
    "lokr_full": (AdapterSpec(peft_type="LOKR"), 8),
    "lokr_tucker_both": (AdapterSpec(peft_type="LOKR", decompose_both=True, decompose_factor=8, use_tucker=True), 1),
    # OFT v2 (tests/training/test_oft.py): blocks of 8 (conv_in's 4·3·3 inputs take 9), and
    # Scaled OFT with one shared block of 4 per layer
    "oft": (AdapterSpec(peft_type="OFT_2", oft_block_size=8), 1),
    "oft_scaled_shared": (AdapterSpec(peft_type="OFT_2", oft_block_size=4, oft_block_share=True, oft_scaled=True), 1),
}


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


def _add(pipe, spec, rank, alpha=ALPHA):
    params = []
    for module, kind in ((pipe.unet, "unet"), (pipe.text_encoder, "text_encoder")):
        params += add_lora(module, kind=kind, rank=rank, alpha=alpha, dropout=0.0, layer_preset="full", spec=spec)
    return params


def _train(pipe, params, inputs, steps=4):
    pipe.unet.train()
    pipe.text_encoder.train()
    opt = torch.optim.Adam(params, lr=2e-2)
    target = torch.randn_like(inputs.latents, generator=torch.Generator().manual_seed(9))
    for _ in range(steps):
        text = pipe.text_encoder(inputs.ids).last_hidden_state
        noise = pipe.unet(inputs.latents, inputs.timesteps, encoder_hidden_states=text).sample
        loss = torch.nn.functional.mse_loss(noise, target) + text.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    pipe.unet.eval()
    pipe.text_encoder.eval()


_TRAINED: dict[str, SimpleNamespace] = {}


def _trained(variant):
    if variant not in _TRAINED:
        spec, rank = VARIANTS[variant]
        pipe, inputs = _pipeline(), _inputs()
        base = _outputs(pipe, inputs)
        params = _add(pipe, spec, rank)
        start = _outputs(pipe, inputs)
        before = [p.detach().clone() for p in params]
        names = {id(p): n for m in (pipe.unet, pipe.text_encoder) for n, p in m.named_parameters()}
        _train(pipe, params, inputs)
        _TRAINED[variant] = SimpleNamespace(
            pipe=pipe, inputs=inputs, base=base, start=start, ref=_outputs(pipe, inputs), spec=spec, rank=rank,
            still=[names[id(p)] for b, p in zip(before, params, strict=True) if torch.equal(b, p)], params=params,
        )
    return _TRAINED[variant]


def _assert_outputs(pipe, trained, *, text=True, tol=1e-5):
    text_out, noise = _outputs(pipe, trained.inputs)
    torch.testing.assert_close(noise, trained.ref[1], rtol=tol, atol=tol)
    if text:
        torch.testing.assert_close(text_out, trained.ref[0], rtol=tol, atol=tol)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_training_changes_the_output(variant):
    t = _trained(variant)
    # adapters start as no-ops (DoRA with epsilon: up to the epsilon)
    torch.testing.assert_close(t.start[1], t.base[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(t.start[0], t.base[0], rtol=1e-5, atol=1e-5)
    # all weights moved but those the 1x1 mid block's self-attention (one token) gives no gradient
    assert t.params and all("mid_block.attentions.0.transformer_blocks.0.attn1.to_" in n for n in t.still), t.still[:3]
    assert not torch.allclose(t.ref[1], t.base[1], atol=1e-3)
    assert not torch.allclose(t.ref[0], t.base[0], atol=1e-3)


def _file_formats(variant):
    return ["kohya"] + ([] if variant == "dora" else ["diffusers"])


@pytest.mark.parametrize(("variant", "lora_format"), [(v, f) for v in VARIANTS for f in _file_formats(v)])
def test_file_round_trips_into_a_fresh_model(variant, lora_format, tmp_path):
    t = _trained(variant)
    path = save_lora(tmp_path / "x.safetensors", unet=t.pipe.unet, text_encoder=t.pipe.text_encoder, lora_format=lora_format)
    loaded = load_lora_file(path)
    check_start_file(t.spec, loaded.parts, path)  # the file reads back as the same variant
    fresh = _pipeline()
    _add(fresh, t.spec, loaded.rank, loaded.alpha)
    for module, kind in ((fresh.unet, "unet"), (fresh.text_encoder, "text_encoder")):
        load_lora_state_dict(module, loaded.parts[kind], kind=kind)
    _assert_outputs(fresh, t)


def test_input_axis_dora_has_no_diffusers_form(tmp_path):
    t = _trained("dora")
    with pytest.raises(ValueError, match="input axis"):
        save_lora(tmp_path / "x.safetensors", unet=t.pipe.unet, lora_format="diffusers")
    with pytest.raises(ValueError, match="output_model_format"):
        check_output_format(t.spec, diffusers_keys=True)
    check_output_format(VARIANTS["dora_out"][0], diffusers_keys=True)


# -- the loaders' math (tests/lora_reference.py) -------------------------------------------


@pytest.mark.parametrize("variant", ["dora", "loha", "lokr", "lokr_full", "lokr_tucker_both"])
def test_kohya_file_rebuilds_the_trained_weights_with_the_loaders_formula(variant, tmp_path):
    t = _trained(variant)
    path = save_lora(tmp_path / "k.safetensors", unet=t.pipe.unet, text_encoder=t.pipe.text_encoder)
    tensors = load_file(str(path))
    fresh = _pipeline()
    n = merge_kohya_reference(fresh, tensors)
    assert n == len(lora_layers(t.pipe.unet)) + len(lora_layers(t.pipe.text_encoder))
    _assert_outputs(fresh, t, tol=1e-4)


def test_kohya_entries(tmp_path):
    dora = load_file(str(save_lora(tmp_path / "d.safetensors", unet=_trained("dora").pipe.unet)))
    conv, linear = "lora_unet_down_blocks_0_resnets_0_conv1", "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q"
    assert dora[f"{conv}.dora_scale"].shape == (1, 16, 1, 1) and dora[f"{linear}.dora_scale"].shape == (1, 16)
    out = load_file(str(save_lora(tmp_path / "o.safetensors", unet=_trained("dora_out").pipe.unet)))
    assert out["lora_unet_up_blocks_0_resnets_0_conv1.dora_scale"].shape == (32, 1, 1, 1)
    loha = load_file(str(save_lora(tmp_path / "h.safetensors", unet=_trained("loha").pipe.unet)))
    assert {k.split(".", 1)[1] for k in loha} == {"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "alpha"}
    lokr = load_file(str(save_lora(tmp_path / "k.safetensors", unet=_trained("lokr_tucker_both").pipe.unet)))
    up_conv = "lora_unet_up_blocks_0_resnets_0_conv1"
    assert f"{up_conv}.lokr_t2" in lokr and f"{up_conv}.lokr_w1_a" in lokr and f"{linear}.lokr_w1_a" in lokr
    meta = read_lora_metadata(tmp_path / "k.safetensors")
    assert meta["ss_network_module"] == "lycoris.kohya" and json.loads(meta["ss_network_args"])["algo"] == "lokr"


# -- diffusers and peft ----------------------------------------------------------------------


def _load_in_diffusers(path):
    pipe = _pipeline()
    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Collect(logging.WARNING)
    logger = logging.getLogger("diffusers")
    level = logger.level
    logger.setLevel(logging.WARNING)  # an in-process worker test may have silenced diffusers
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pipe.load_lora_weights(str(path))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    problems = [r.getMessage() for r in records]
    problems += [str(w.message) for w in caught if not issubclass(w.category, (DeprecationWarning, FutureWarning))]
    return pipe, problems


def test_output_axis_dora_loads_in_diffusers(tmp_path):
    t = _trained("dora_out")
    path = save_lora(tmp_path / "d.safetensors", unet=t.pipe.unet, text_encoder=t.pipe.text_encoder, lora_format="diffusers")
    assert any(k.startswith("text_encoder.") and k.endswith(".lora_magnitude_vector.weight") for k in load_file(str(path)))
    pipe, problems = _load_in_diffusers(path)
    assert problems == []
    _assert_outputs(pipe, t)


def test_diffusers_drops_kohya_dora_scales(tmp_path):
    """diffusers 0.42's SD loader filters `dora_scale` out with a warning: a known limitation, so
    kohya DoRA files are for A1111/ComfyUI/Forge (test above), PEFT-key files for diffusers."""
    t = _trained("dora_out")
    pipe, problems = _load_in_diffusers(save_lora(tmp_path / "k.safetensors", unet=t.pipe.unet, text_encoder=t.pipe.text_encoder))
    assert any("dora_scale" in p for p in problems)


@pytest.mark.parametrize("variant", ["loha", "lokr", "lokr_tucker_both"])
def test_peft_file_loads_with_peft(variant, tmp_path):
    from peft import LoHaConfig, LoKrConfig, inject_adapter_in_model, set_peft_model_state_dict

    t = _trained(variant)
    path = save_lora(tmp_path / "p.safetensors", unet=t.pipe.unet, lora_format="diffusers")
    meta = json.loads(read_lora_metadata(path)["lora_adapter_metadata"])
    cfg = {k.removeprefix("unet."): v for k, v in meta.items()}
    cls = LoHaConfig if cfg.pop("peft_type") == "LOHA" else LoKrConfig
    if t.spec.decompose_factor != -1:  # not recorded in the tensors: the run's setting
        cfg["decompose_factor"] = t.spec.decompose_factor
    fresh = _pipeline()
    inject_adapter_in_model(cls(**cfg), fresh.unet)
    state = {k.removeprefix("unet."): v for k, v in load_file(str(path)).items()}
    result = set_peft_model_state_dict(fresh.unet, state)
    assert not result.unexpected_keys
    fresh.text_encoder = t.pipe.text_encoder
    _assert_outputs(fresh, t, text=False)


# -- options -------------------------------------------------------------------------------


def _spec(**options):
    return AdapterSpec.from_config(TrainConfig(**options))


def _layer(pipe, name):
    return dict(pipe.unet.named_modules())[name]


@pytest.mark.parametrize("output_axis", [False, True])
def test_lora_decompose_options_set_the_axis(output_axis):
    pipe = _pipeline()
    spec = _spec(lora_decompose=True, lora_decompose_output_axis=output_axis)
    add_lora(pipe.unet, kind="unet", rank=2, alpha=1.0, dropout=0.0, layer_preset="full", spec=spec)
    layer = _layer(pipe, "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q")
    weight = layer.get_base_layer().weight.detach()
    state = {k.rsplit(".", 1)[-1]: v for k, v in lora_state_dict(pipe.unet).items() if k.startswith("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.")}
    if output_axis:
        torch.testing.assert_close(state["lora_magnitude_vector"], weight.norm(dim=1))
    else:
        torch.testing.assert_close(state["dora_scale"], weight.norm(dim=0, keepdim=True))
    assert _spec().decompose is False and not any("magnitude" in k or "dora" in k for k in lora_state_dict(_plain_lora()))


def _plain_lora():
    pipe = _pipeline()
    add_lora(pipe.unet, kind="unet", rank=2, alpha=1.0, dropout=0.0, layer_preset="attn-only", spec=_spec())
    return pipe.unet


@pytest.mark.parametrize("epsilon", [True, False])
def test_lora_decompose_norm_epsilon(epsilon):
    """A column whose merged weight is zero: the epsilon keeps DoRA finite, without it 0/0."""
    lin = nn.Sequential(nn.Linear(4, 3))
    with torch.no_grad():
        lin[0].weight[:, 1] = 0.0
    spec = _spec(lora_decompose=True, lora_decompose_norm_epsilon=epsilon)
    add_lora(lin, kind="unet", rank=1, alpha=1.0, dropout=0.0, layer_preset="full", spec=spec)
    y = lin(torch.ones(1, 4))
    assert torch.isfinite(y).all() == epsilon


def test_peft_type_and_lokr_options():
    def shapes(**options):
        pipe = _pipeline()
        spec = _spec(**options)
        add_lora(pipe.unet, kind="unet", rank=spec.rank(TrainConfig(**options)), alpha=1.0, dropout=0.0, layer_preset="full", spec=spec)
        state = lora_state_dict(pipe.unet)
        return {k.rsplit(".", 1)[-1]: tuple(v.shape) for k, v in state.items() if k.startswith("down_blocks.0.resnets.0.conv1.")}, pipe

    loha, _ = shapes(peft_type="LOHA", lora_rank=3)
    assert loha == {"hada_w1_a": (16, 3), "hada_w1_b": (3, 144), "hada_w2_a": (16, 3), "hada_w2_b": (3, 144)}
    lokr, pipe = shapes(peft_type="LOKR", lokr_dim=1, lora_rank=16)  # LoKr's rank is lokr_dim
    assert lokr == {"lokr_w1": (4, 4), "lokr_w2_a": (4, 1), "lokr_w2_b": (1, 36)}
    assert lora_rank_alpha(pipe.unet) == (1, 1.0)
    lokr, _ = shapes(peft_type="LOKR", lokr_dim=1, lokr_decompose_factor=2)
    assert lokr == {"lokr_w1": (2, 2), "lokr_w2_a": (8, 1), "lokr_w2_b": (1, 72)}
    lokr, _ = shapes(peft_type="LOKR", lokr_dim=1, lokr_decompose_both=True)
    assert set(lokr) == {"lokr_w1_a", "lokr_w1_b", "lokr_w2_a", "lokr_w2_b"}
    lokr, _ = shapes(peft_type="LOKR", lokr_dim=1, lokr_use_tucker=True)
    assert lokr == {"lokr_w1": (4, 4), "lokr_t2": (1, 1, 3, 3), "lokr_w2_a": (1, 4), "lokr_w2_b": (1, 4)}


@pytest.mark.parametrize("options", [{"peft_type": "LOHA"}, {"peft_type": "LOKR", "lokr_dim": 2}, {"peft_type": "LOKR", "lokr_dim": 2, "lokr_decompose_both": True},
                                     {"peft_type": "LOKR", "lokr_dim": 2, "lokr_use_tucker": True}, {"peft_type": "LOKR", "lokr_dim": 2, "lokr_full_matrix": True}])
def test_loha_and_lokr_start_as_lycoris_and_onetrainer_start_them(options):
    """LoHa: w1_a normal std 0.1, w1_b and w2_b standard normal, w2_a zero; LoKr: w1 (or its
    factors) Kaiming, w2 (or w2_b) zero; Tucker core Kaiming. peft starts LoHa Kaiming (each step
    then moves the delta about 150x less at the same learning rate) and LoKr with w1 zero."""
    torch.manual_seed(0)
    pipe = _pipeline()
    config = TrainConfig(lora_rank=16, **options)
    spec = _spec(**options)
    add_lora(pipe.unet, kind="unet", rank=spec.rank(config), alpha=1.0, dropout=0.0, layer_preset="full", spec=spec)
    state = lora_state_dict(pipe.unet)
    by_name: dict[str, list[torch.Tensor]] = {}
    for key, value in state.items():
        by_name.setdefault(key.rsplit(".", 1)[-1], []).append(value.float().flatten())
    values = {name: torch.cat(v) for name, v in by_name.items()}
    zero = {"hada_w2_a"} if options["peft_type"] == "LOHA" else {"lokr_w2", "lokr_w2_b"}
    for name, v in values.items():
        if name in zero:
            assert not v.any(), name
        else:
            assert v.std() > 0.01, name
    if options["peft_type"] == "LOHA":
        assert values["hada_w1_a"].std() == pytest.approx(0.1, rel=0.1)
        assert values["hada_w1_b"].std() == pytest.approx(1.0, rel=0.1) and values["hada_w2_b"].std() == pytest.approx(1.0, rel=0.1)
    else:
        assert zero & set(values) and ({"lokr_w1"} & set(values) or {"lokr_w1_a", "lokr_w1_b"} <= set(values))
    layer = next(iter(lora_layers(pipe.unet).values()))
    assert not layer.get_delta_weight(ADAPTER_NAME).any()  # the model is unchanged at step 0


def test_settings_that_cannot_work_are_refused():
    with pytest.raises(ValueError, match="oft_block_size"):
        _spec(peft_type="OFT_2", oft_block_size=0)
    with pytest.raises(ValueError, match="lora_decompose"):
        _spec(peft_type="LOHA", lora_decompose=True)
    with pytest.raises(ValueError, match="lokr_decompose_factor"):
        _spec(peft_type="LOKR", lokr_decompose_factor=0)
    with pytest.raises(ValueError, match="dropout_probability"):
        add_lora(_pipeline().unet, kind="unet", rank=2, alpha=1.0, dropout=0.1, layer_preset="full", spec=_spec(peft_type="LOHA"))


def test_a_file_of_another_variant_is_refused(tmp_path):
    path = save_lora(tmp_path / "h.safetensors", unet=_trained("loha").pipe.unet)
    parts = load_lora_file(path).parts
    with pytest.raises(ValueError, match="set peft_type to LOHA"):
        check_start_file(_spec(), parts, path)
    dora = load_lora_file(save_lora(tmp_path / "d.safetensors", unet=_trained("dora").pipe.unet)).parts
    with pytest.raises(ValueError, match="turn lora_decompose on"):
        check_start_file(_spec(), dora, path)
    with pytest.raises(ValueError, match="lora_decompose_output_axis off"):
        check_start_file(_spec(lora_decompose=True, lora_decompose_output_axis=True), dora, path)
    check_start_file(_spec(lora_decompose=True), dora, path)


@pytest.mark.parametrize("variant", ["loha", "lokr", "lokr_full", "lokr_tucker_both"])  # (Linear: w1 as a product)
def test_the_real_shape_delta_is_peft_s_on_a_plain_linear_layer(variant):
    """The delta LoHa / LoKr layers over GGUF or NF4 weights compute (lora_variants._delta_in_real_shape,
    whose trained factors peft cannot reshape to the stored bytes) is the one peft computes on a plain layer."""
    from ot_gradio.training.lora_variants import _delta_in_real_shape

    spec, rank = VARIANTS[variant]
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(32, 48), nn.Linear(48, 16))
    add_lora(net, kind="unet", rank=rank, alpha=ALPHA, dropout=0.0, layer_preset="full", spec=spec)
    layers = lora_layers(net)
    assert len(layers) == 2
    for layer in layers.values():
        with torch.no_grad():
            for p in layer.parameters():
                if p.requires_grad:
                    p.normal_()
        torch.testing.assert_close(_delta_in_real_shape(layer, "default"), layer.get_delta_weight("default"))
