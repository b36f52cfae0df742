"""The Muon optimizers split the weights as OneTrainer does: hidden-layer matrices (by name) to
Muon, the rest to the AdamW inside, with its own learning rates and settings."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.config.enums import Optimizer as O
from ot_gradio.config.optimizer import OptimizerConfig
from ot_gradio.training.optimizers import create_optimizer, parameter_names

CPU = torch.device("cpu")
MUONS = [O.MUON, O.MUON_ADV, O.ADAMUON_ADV]


def parts() -> dict[str, torch.nn.Module]:
    """An SD-like UNet (a block, conv_in) and CLIP text encoder (a layer, the embeddings), named as diffusers names them."""
    torch.manual_seed(0)
    unet = torch.nn.ModuleDict({"down_blocks": torch.nn.Linear(8, 8), "conv_in": torch.nn.Conv2d(2, 4, 3)})
    layers = torch.nn.ModuleDict({"layers": torch.nn.Linear(8, 8)})
    text = torch.nn.ModuleDict({"text_model": torch.nn.ModuleDict({"encoder": layers, "embeddings": torch.nn.Embedding(5, 8)})})
    return {"unet": unet, "text_encoder": text}


def build(name: O, model_type: str = "STABLE_DIFFUSION_15", **settings):
    model = parts()
    groups = [{"params": list(m.parameters()), "lr": 0.02, "name": part} for part, m in model.items()]
    config = OptimizerConfig(optimizer=name, **{"MuonWithAuxAdam": True, **settings})
    optimizer = create_optimizer(groups, config, CPU, names=parameter_names(model), model_type=model_type)
    names = {id(p): n for n, p in ((f"{k}.{n}", p) for k, m in model.items() for n, p in m.named_parameters())}
    split = {g["name"]: sorted(names[id(p)] for p in g["params"]) for g in optimizer.param_groups}
    return optimizer, groups, split, model


@pytest.mark.parametrize("name", MUONS)
def test_hidden_layer_matrices_go_to_muon_the_rest_to_its_adamw(name):
    optimizer, groups, split, model = build(name, muon_adam_lr=3e-4, muon_te1_adam_lr=1e-4)
    assert split == {
        "unet": ["unet.down_blocks.weight"],
        "unet/adam": ["unet.conv_in.bias", "unet.conv_in.weight", "unet.down_blocks.bias"],
        "text_encoder": ["text_encoder.text_model.encoder.layers.weight"],
        "text_encoder/adam": ["text_encoder.text_model.embeddings.weight", "text_encoder.text_model.encoder.layers.bias"],
    }
    lrs = {g["name"]: g["lr"] for g in optimizer.param_groups}
    assert lrs == {"unet": 0.02, "unet/adam": 3e-4, "text_encoder": 0.02, "text_encoder/adam": 1e-4}
    assert [len(g["params"]) for g in groups] == [4, 3]  # the caller's groups are left whole
    before = {n: p.detach().clone() for part, m in model.items() for n, p in m.named_parameters()}
    x = torch.randn(3, 8)
    loss = model["unet"]["down_blocks"](x).square().mean() + model["text_encoder"]["text_model"]["encoder"]["layers"](x).mean()
    loss = loss + model["unet"]["conv_in"](torch.randn(1, 2, 5, 5)).mean() + model["text_encoder"]["text_model"]["embeddings"].weight.sum()
    loss.backward()
    optimizer.step()
    moved = {n for part, m in model.items() for n, p in m.named_parameters() if not torch.equal(before[n], p)}
    assert {"down_blocks.weight", "conv_in.weight", "text_model.embeddings.weight", "text_model.encoder.layers.weight"} <= moved


@pytest.mark.parametrize(("layers", "regex", "muon"), [
    ("conv_in", False, {"unet.conv_in.weight"}),
    (r"^unet\.(down|conv)", True, {"unet.conv_in.weight", "unet.down_blocks.weight"}),
])
def test_the_users_hidden_layers_replace_the_default(layers, regex, muon):
    _, _, split, _ = build(O.MUON, muon_hidden_layers=layers, muon_adam_regex=regex)
    assert {n for name, ns in split.items() if "/adam" not in name for n in ns} == muon


def test_muon_adam_settings_reach_the_adamw():
    adam = {"beta1": 0.8, "beta2": 0.9, "eps": 1e-9, "weight_decay": 0.1}
    optimizer, *_ = build(O.MUON, muon_adam_config=adam)
    group = next(g for g in optimizer.param_groups if g["name"] == "unet/adam")
    assert group["betas"] == (0.8, 0.9) and group["eps"] == 1e-9 and group["weight_decay"] == 0.1
    adv, *_ = build(O.MUON_ADV, muon_adam_config={**adam, "use_atan2": True})
    assert adv.param_groups[0]["adam_betas"] == (0.8, 0.9) and adv.param_groups[0]["adam_use_atan2"] is True


def test_what_muon_cannot_do_names_the_field():
    with pytest.raises(ValueError, match="optimizer.muon_hidden_layers: there is no default list of hidden layers for HUNYUAN_VIDEO"):
        build(O.MUON, model_type="HUNYUAN_VIDEO")
    with pytest.raises(ValueError, match="optimizer.muon_hidden_layers: '\\(\\[' is not a regular expression"):
        build(O.MUON, muon_hidden_layers="([", muon_adam_regex=True)
    with pytest.raises(ValueError, match="optimizer.MuonWithAuxAdam: Muon cannot train the 1-D weights .* of unet, text_encoder"):
        build(O.MUON_ADV, MuonWithAuxAdam=False)


@pytest.mark.parametrize("name", MUONS)
def test_a_part_stopped_by_stop_training_after_keeps_its_weights_in_both_halves(name):
    """The trainer stops a part by taking its weights' gradients away (ParamGroup.freeze): the split
    groups are new dicts, so their learning rate stays, but neither Muon nor its AdamW (weight decay
    on) may move a weight without a gradient."""
    optimizer, _, _, model = build(name, weight_decay=0.1)
    text = model["text_encoder"]
    for p in text.parameters():
        p.requires_grad_(False)
    before = {n: p.detach().clone() for n, p in text.named_parameters()}
    x = torch.randn(3, 8)
    for _ in range(2):
        optimizer.zero_grad(set_to_none=True)
        (model["unet"]["down_blocks"](x).square().mean() + model["unet"]["conv_in"](torch.randn(1, 2, 5, 5)).mean()).backward()
        optimizer.step()
    assert all(torch.equal(before[n], p) for n, p in text.named_parameters())
    assert not torch.equal(model["unet"]["down_blocks"].weight, parts()["unet"]["down_blocks"].weight)
