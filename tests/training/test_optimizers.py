"""Every registered optimizer trains a small model, and its settings reach the optimizer."""

from __future__ import annotations

import math

import pytest
import torch

from ot_gradio.config.enums import LearningRateScheduler as S
from ot_gradio.config.enums import Optimizer as O
from ot_gradio.config.optimizer import OptimizerConfig, optimizer_param_defaults
from ot_gradio.training.optimizers import (
    LIBRARY_LACKS,
    NOT_CONSTRUCTOR_ARGS,
    OPTIMIZERS,
    create_optimizer,
    optimizer_eval_mode,
    optimizer_train_mode,
    resolve_settings,
)

CPU = torch.device("cpu")
# Learning rates that make a difference in 20 steps; adaptive optimizers get 1 and a larger first
# step-size estimate (d0), which also shows that d0 reaches them.
LR = {O.SGD: 0.1, O.SGD_8BIT: 0.1, O.SCHEDULE_FREE_SGD: 0.1, O.LARS: 1.0, O.LARS_8BIT: 1.0, O.ADAGRAD: 0.05,
      O.ADAGRAD_8BIT: 0.05, O.LAMB: 0.05, O.LAMB_8BIT: 0.05, O.LION: 1e-3, O.LION_8BIT: 1e-3}
ADAPTIVE = {O.PRODIGY, O.PRODIGY_ADV, O.PRODIGY_PLUS_SCHEDULE_FREE, O.DADAPT_ADA_GRAD, O.DADAPT_ADAM, O.DADAPT_ADAN, O.DADAPT_LION, O.DADAPT_SGD}
SETTINGS = {O.DADAPT_ADA_GRAD: {"d0": 1e-2}, O.DADAPT_ADAM: {"d0": 1e-2}, O.DADAPT_ADAN: {"d0": 1e-2},
            O.DADAPT_LION: {"d0": 1e-3}, O.DADAPT_SGD: {"d0": 1e-3}, O.PRODIGY_ADV: {"d0": 1e-3},
            O.PRODIGY_PLUS_SCHEDULE_FREE: {"d0": 1e-3}, **dict.fromkeys((O.MUON, O.MUON_ADV, O.ADAMUON_ADV), {"MuonWithAuxAdam": True})}
STEPS = 20


def small_model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))


def groups(model: torch.nn.Sequential, lr: float) -> list[dict]:
    """Two groups, as the trainer passes them (UNet and text encoder)."""
    return [{"params": list(model[0].parameters()), "lr": lr, "name": "unet"},
            {"params": list(model[2].parameters()), "lr": lr, "name": "text_encoder"}]


def fixed_noise_loss(model: torch.nn.Module) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    x, noise = torch.randn(32, 16, generator=gen), torch.randn(32, 8, generator=gen)
    return ((model(x) - noise) ** 2).mean()


def train(optimizer: torch.optim.Optimizer, model: torch.nn.Module, steps: int = STEPS, scheduler=None) -> list[float]:
    optimizer_train_mode(optimizer)
    losses = []
    for _ in range(steps):
        loss = fixed_noise_loss(model)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.item())
    optimizer_eval_mode(optimizer)
    return losses


@pytest.mark.parametrize("name", sorted(OPTIMIZERS, key=str))
def test_every_optimizer_lowers_the_loss(name):
    model = small_model()
    settings = dict(SETTINGS.get(name, {}))
    if "8BIT" in name.value or "optim_bits" in optimizer_param_defaults(name):
        settings["min_8bit_size"] = 64  # the test weights are small: quantize them anyway
    config = OptimizerConfig(optimizer=name, **settings)
    optimizer = create_optimizer(groups(model, 1.0 if name in ADAPTIVE else LR.get(name, 1e-2)), config, CPU)
    first = fixed_noise_loss(model).item()
    train(optimizer, model)
    final = fixed_noise_loss(model).item()  # after eval mode: the weights a sample or a save would use
    assert final < 0.95 * first, f"{name.value}: {first:.4f} -> {final:.4f}"
    if "8BIT" in name.value:
        states = [v for p in model.parameters() for v in optimizer.state[p].values() if torch.is_tensor(v)]
        assert any(v.dtype == torch.uint8 for v in states), f"{name.value} kept no 8-bit state"


def test_the_optimizers_of_the_reference_page_are_registered():
    page = {"ADAGRAD", "ADAM", "ADAMW", "LAMB", "LARS", "LION", "RMSPROP", "SGD"}
    expected = page | {f"{n}_8BIT" for n in page} | {"DADAPT_ADA_GRAD", "DADAPT_ADAM", "DADAPT_ADAN", "DADAPT_LION",
                                                      "DADAPT_SGD", "PRODIGY", "ADAFACTOR", "CAME", "SCHEDULE_FREE_ADAMW",
                                                      "SCHEDULE_FREE_SGD", "AdEMAMix"}
    assert expected <= {o.value for o in OPTIMIZERS}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS, key=str))
def test_registry_keys_are_the_defaults_table_row(name):
    """What the page shows for an optimizer (its table row) is what reaches the constructor."""
    entry = OPTIMIZERS[name]
    used = set(entry.keys) | {k for keys in entry.tuples.values() for k in keys}
    row = set(optimizer_param_defaults(name))
    assert used <= row
    assert row - used <= set(NOT_CONSTRUCTOR_ARGS) | set(LIBRARY_LACKS.get(name, {}))


def test_prodigy_takes_every_setting_of_the_optimizers_page():
    config = OptimizerConfig(optimizer=O.PRODIGY, beta1=0.8, beta2=0.99, beta3=0.95, eps=1e-7, weight_decay=0.01, decouple=True,
                             use_bias_correction=True, safeguard_warmup=True, d0=1e-5, d_coef=2.5, growth_rate=1.5,
                             fsdp_in_use=False, slice_p=3)
    model = small_model()
    group = create_optimizer(groups(model, 1.0), config, CPU).param_groups[0]
    assert group["betas"] == (0.8, 0.99) and group["beta3"] == 0.95 and group["eps"] == 1e-7
    assert group["weight_decay"] == 0.01 and group["decouple"] is True and group["use_bias_correction"] is True
    assert group["safeguard_warmup"] is True and group["d"] == 1e-5 and group["d_coef"] == 2.5
    assert group["growth_rate"] == 1.5 and group["fsdp_in_use"] is False and group["slice_p"] == 3


def test_blank_settings_take_onetrainers_defaults():
    group = create_optimizer(groups(small_model(), 1.0), OptimizerConfig(optimizer=O.PRODIGY), CPU).param_groups[0]
    assert group["betas"] == (0.9, 0.999) and group["beta3"] is None and group["d_coef"] == 1.0
    assert group["growth_rate"] == math.inf and group["slice_p"] == 11  # "inf" in the table is a float
    assert resolve_settings(OptimizerConfig(optimizer=O.ADAMW))["weight_decay"] == 0.01


@pytest.mark.parametrize(("name", "arg"), [(O.ADAMW, "betas"), (O.ADAM_8BIT, "betas"), (O.LION, "betas"), (O.DADAPT_ADAN, "betas"),
                                           (O.CAME, "betas"), (O.ADEMAMIX, "betas")])
def test_betas_and_weight_decay_reach_the_optimizer(name, arg):
    three = name in (O.DADAPT_ADAN, O.CAME, O.ADEMAMIX)
    config = OptimizerConfig(optimizer=name, beta1=0.8, beta2=0.95, beta3=0.97 if three else None, weight_decay=0.03)
    group = create_optimizer(groups(small_model(), 1e-3), config, CPU).param_groups[0]
    assert tuple(group[arg]) == ((0.8, 0.95, 0.97) if three else (0.8, 0.95))
    assert group["weight_decay"] == 0.03


def test_library_specific_argument_names():
    came = resolve_settings(OptimizerConfig(optimizer=O.CAME, eps=1e-29, eps2=1e-15))
    assert came["eps1"] == 1e-29 and came["eps2"] == 1e-15
    adafactor = create_optimizer(groups(small_model(), 1e-3), OptimizerConfig(optimizer=O.ADAFACTOR, eps=1e-29, eps2=2e-3,
                                 clip_threshold=0.5, decay_rate=-0.7), CPU).param_groups[0]
    assert adafactor["eps"] == (1e-29, 2e-3) and adafactor["clip_threshold"] == 0.5 and adafactor["decay_rate"] == -0.7
    assert adafactor["beta1"] is None  # blank by default: no first moment, no extra memory
    lamb = create_optimizer(groups(small_model(), 1e-3), OptimizerConfig(optimizer=O.LAMB, max_unorm=0.5, optim_bits=8), CPU)
    assert lamb.args.max_unorm == 0.5 and lamb.args.optim_bits == 8
    sf = create_optimizer(groups(small_model(), 1e-3), OptimizerConfig(optimizer=O.SCHEDULE_FREE_ADAMW, r=0.5, weight_lr_power=1.0), CPU)
    assert sf.param_groups[0]["r"] == 0.5 and sf.param_groups[0]["weight_lr_power"] == 1.0
    dadapt = create_optimizer(groups(small_model(), 1.0), OptimizerConfig(optimizer=O.DADAPT_ADAN, no_prox=True, log_every=5), CPU)
    assert dadapt.param_groups[0]["no_prox"] is True and dadapt.param_groups[0]["log_every"] == 5


@pytest.mark.parametrize(("name", "settings", "seen"), [
    (O.ADOPT, {"cautious": True, "decoupled_decay": True, "fixed_decay": True}, {"cautious": True, "weight_decouple": True, "fixed_decay": True}),
    (O.ADABELIEF, {"rectify": False, "degenerated_to_sgd": False}, {"rectify": False, "degenerated_to_sgd": False}),
    (O.TIGER, {"beta1": 0.8}, {"beta": 0.8}),
    (O.AIDA, {"adanorm": True, "r": 0.5, "ams_bound": True}, {"adanorm": True, "adanorm_r": 0.5, "ams_bound": True}),
    (O.YOGI, {"initial_accumulator": 1e-3, "adam_debias": True}, {"initial_accumulator": 1e-3, "adam_debias": True}),
    (O.ADAMW_ADV, {"nnmf_factor": True, "use_atan2": True, "beta3_ema": 0.99, "stochastic_rounding": False},
     {"nnmf_factor": True, "use_atan2": True, "beta3_ema": 0.99, "stochastic_rounding": False}),
    (O.LION_ADV, {"auto_kappa_p": False, "clip_threshold": 0.5}, {"auto_kappa_p": False, "clip_threshold": 0.5}),
    (O.SIGNSGD_ADV, {"momentum": 0.5, "alpha_grad": 3.0}, {"momentum": 0.5, "alpha_grad": 3.0}),
    (O.PRODIGY_ADV, {"d_limiter": True, "prodigy_steps": 7, "slice_p": 3}, {"d_limiter": True, "prodigy_steps": 7, "slice_p": 3}),
    (O.PRODIGY_PLUS_SCHEDULE_FREE, {"use_speed": True, "split_groups": False, "schedulefree_c": 2.0},
     {"use_speed": True, "split_groups": False, "schedulefree_c": 2.0}),
])
def test_settings_of_the_newer_optimizers_reach_them(name, settings, seen):
    optimizer = create_optimizer(groups(small_model(), 1e-3), OptimizerConfig(optimizer=name, **settings), CPU)
    group = optimizer.param_groups[0]  # where the library keeps it: the param group, or the optimizer itself
    assert {k: group[k] if k in group else getattr(optimizer, k, None) for k in seen} == seen


@pytest.mark.parametrize("name", [O.ADAMW_ADV, O.ADOPT_ADV, O.PRODIGY_ADV])
def test_kourkoutas_beta_is_held_over_the_runs_warmup(name):
    """OneTrainer passes its learning-rate warmup to the adv-optm optimizers as `k_warmup_steps`."""
    config = OptimizerConfig(optimizer=name, kourkoutas_beta=True)
    optimizer = create_optimizer(groups(small_model(), 1e-3), config, CPU, warmup_steps=12)
    assert optimizer.defaults["kourkoutas_beta"] is True and optimizer.defaults["k_warmup_steps"] == 12
    assert create_optimizer(groups(small_model(), 1e-3), config, CPU).defaults["k_warmup_steps"] == 0


def test_optimizer_bits_choose_the_implementation():
    model = small_model()
    assert type(create_optimizer(groups(model, 0.01), OptimizerConfig(optimizer=O.ADAGRAD), CPU)).__module__.startswith("torch")
    eight = create_optimizer(groups(model, 0.01), OptimizerConfig(optimizer=O.RMSPROP, optim_bits=8, min_8bit_size=64), CPU)
    assert type(eight).__module__.startswith("bitsandbytes")
    train(eight, model, steps=1)
    assert eight.state[model[0].weight]["state1"].dtype == torch.uint8


def test_settings_the_library_refuses_name_the_field():
    with pytest.raises(ValueError, match="optimizer.momentum: bitsandbytes' LARS needs momentum above 0"):
        create_optimizer(groups(small_model(), 0.1), OptimizerConfig(optimizer=O.LARS, momentum=0), CPU)
    with pytest.raises(ValueError, match="optimizer.amsgrad"):
        create_optimizer(groups(small_model(), 0.1), OptimizerConfig(optimizer=O.ADAMW_8BIT, amsgrad=True), CPU)
    with pytest.raises(ValueError, match="optimizer.use_triton"):
        create_optimizer(groups(small_model(), 0.1), OptimizerConfig(optimizer=O.LION, use_triton=True), CPU)
    # OneTrainer's momentum 0 is refused by these libraries: their defaults here work
    assert resolve_settings(OptimizerConfig(optimizer=O.LARS))["momentum"] == 0.9


def test_adafactor_adaptive_mode_ignores_the_learning_rate():
    from ot_gradio.training.schedulers import create_scheduler

    config = OptimizerConfig(optimizer=O.ADAFACTOR, relative_step=True, scale_parameter=True)
    weights = []
    for lr in (1e-3, 123.0):
        model = small_model()
        optimizer = create_optimizer(groups(model, lr), config, CPU)
        scheduler = create_scheduler(optimizer, S.ADAFACTOR, STEPS, 0, 1, 0)
        losses = train(optimizer, model, scheduler=scheduler)
        assert losses[-1] < losses[0]
        reported = optimizer.param_groups[0]["lr"]
        assert reported != lr and reported == pytest.approx(optimizer._get_lr(optimizer.param_groups[0], optimizer.state[model[0].weight]))
        weights.append(model[0].weight.detach().clone())
    assert torch.equal(weights[0], weights[1])


def test_adafactor_constant_mode_uses_the_learning_rate_and_scheduler():
    from ot_gradio.config.lr_schedules import lr_curve
    from ot_gradio.training.schedulers import create_scheduler

    config = OptimizerConfig(optimizer=O.ADAFACTOR, relative_step=False, scale_parameter=False)
    moved = []
    for lr in (1e-3, 1e-2):
        model = small_model()
        before = model[0].weight.detach().clone()
        optimizer = create_optimizer(groups(model, lr), config, CPU)
        scheduler = create_scheduler(optimizer, S.LINEAR, STEPS, 0, 1, 0)
        seen = []
        optimizer_train_mode(optimizer)
        for _ in range(3):
            seen.append(optimizer.param_groups[0]["lr"])
            loss = fixed_noise_loss(model)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
        assert seen == pytest.approx(lr_curve(S.LINEAR, STEPS, 0, 1, 0, lr)[:3])
        moved.append((model[0].weight - before).abs().mean().item())
    assert moved[1] > 5 * moved[0]


@pytest.mark.parametrize("name", [O.SCHEDULE_FREE_ADAMW, O.PRODIGY_PLUS_SCHEDULE_FREE])
def test_schedule_free_averages_for_sampling_and_comes_back(name):
    model = small_model()
    config = OptimizerConfig(optimizer=name, **SETTINGS.get(name, {}))
    optimizer = create_optimizer(groups(model, 1.0 if name in ADAPTIVE else 1e-2), config, CPU)
    train(optimizer, model, steps=5)  # ends in eval mode
    averaged = model[0].weight.detach().clone()
    optimizer_train_mode(optimizer)
    training = model[0].weight.detach().clone()
    assert not torch.allclose(averaged, training)
    optimizer_eval_mode(optimizer)
    optimizer_eval_mode(optimizer)  # twice is harmless
    assert torch.allclose(model[0].weight, averaged, atol=1e-6)
    plain = create_optimizer(groups(small_model(), 1e-2), OptimizerConfig(optimizer=O.ADAMW), CPU)
    optimizer_eval_mode(plain)  # a no-op for other optimizers
    optimizer_train_mode(plain)


@pytest.mark.parametrize("name", [O.ADAMW, O.ADAMW_ADV, O.LION_ADV])  # ours around the step; adv-optm's own
def test_stochastic_rounding_keeps_small_bfloat16_updates(name):
    def run(rounding: bool) -> torch.Tensor:
        torch.manual_seed(0)
        weight = torch.nn.Parameter(torch.ones(4096, dtype=torch.bfloat16))
        config = OptimizerConfig(optimizer=name, weight_decay=0.0, stochastic_rounding=rounding, fused=False)
        optimizer = create_optimizer([{"params": [weight], "lr": 1e-3, "name": "unet"}], config, CPU)
        for _ in range(30):  # each step moves by ~1e-3, below half the bfloat16 spacing at 1.0 (2**-8)
            optimizer.zero_grad()
            weight.float().sum().backward()
            optimizer.step()
        assert weight.dtype == torch.bfloat16
        return weight.detach().float().mean().item()

    assert run(False) == 1.0  # round-to-nearest loses every update
    assert run(True) == pytest.approx(1.0 - 30e-3, abs=5e-3)


def test_stochastic_rounding_state_stays_float32_after_a_backup():
    weight = torch.nn.Parameter(torch.ones(64, dtype=torch.bfloat16))
    config = OptimizerConfig(optimizer=O.ADAMW, stochastic_rounding=True, fused=False)
    optimizer = create_optimizer([{"params": [weight], "lr": 1e-3, "name": "unet"}], config, CPU)
    weight.float().sum().backward()
    optimizer.step()
    again = create_optimizer([{"params": [weight], "lr": 1e-3, "name": "unet"}], config, CPU)
    saved = optimizer.state_dict()
    again.load_state_dict(saved)
    assert again.state[weight]["exp_avg"].dtype == torch.float32
    assert torch.equal(again.state[weight]["exp_avg_sq"], saved["state"][0]["exp_avg_sq"])  # as saved, not rounded to bfloat16
    weight.float().sum().backward()
    again.step()


class _Config:
    def __init__(self, optimizer: OptimizerConfig, accumulation: int = 1):
        self.optimizer = optimizer
        self.gradient_accumulation_steps = accumulation


def test_fused_back_pass_steps_in_the_backward_pass_with_the_same_result():
    from ot_gradio.training.optimizers import FusedBackPass, fused_back_pass
    from ot_gradio.training.schedulers import create_scheduler

    results = []
    for fused in (False, True):
        model = small_model()
        config = OptimizerConfig(optimizer=O.ADAMW, fused_back_pass=fused, fused=False, foreach=False)
        param_groups = groups(model, 1e-2)
        optimizer = fused_back_pass(create_optimizer(param_groups, config, CPU), param_groups, _Config(config), CPU)
        assert isinstance(optimizer, FusedBackPass) == fused
        scheduler = create_scheduler(optimizer, S.LINEAR, STEPS, 2, 1, 0)
        train(optimizer, model, steps=5, scheduler=scheduler)
        if fused:
            assert all(p.grad is None for p in model.parameters())  # freed in the backward pass
            state = optimizer.state_dict()
            again = fused_back_pass(create_optimizer(param_groups, config, CPU), param_groups, _Config(config), CPU)
            again.load_state_dict(state)
            assert torch.equal(again.optimizer_of(model[0].weight).state[model[0].weight]["exp_avg"],
                               optimizer.optimizer_of(model[0].weight).state[model[0].weight]["exp_avg"])
            optimizer.remove_hooks()
        results.append(model[0].weight.detach().clone())
    assert torch.allclose(results[0], results[1], atol=1e-6)


def test_fused_back_pass_clips_each_weights_gradient_by_its_own_norm_as_onetrainer_does():
    """With clip_grad_norm set, the fused back pass cannot clip by the global norm (the gradients
    never exist at once); OneTrainer clips each weight's gradient by its own norm before its step."""
    from ot_gradio.training.optimizers import fused_back_pass

    settings = OptimizerConfig(optimizer=O.ADAMW, fused_back_pass=True, fused=False, foreach=False)
    for clip in (0.5, None):
        a, b = torch.nn.Parameter(torch.zeros(4)), torch.nn.Parameter(torch.zeros(4))
        groups_ = [{"params": [a, b], "lr": 1e-3, "name": "unet"}]
        cfg = _Config(settings)
        cfg.clip_grad_norm = clip
        optimizer = fused_back_pass(create_optimizer(groups_, settings, CPU), groups_, cfg, CPU)
        seen = {}
        for name, p in (("a", a), ("b", b)):
            sub = optimizer.optimizer_of(p)
            sub.step = lambda step=sub.step, name=name, p=p, seen=seen: (seen.__setitem__(name, p.grad.norm().item()), step())[1]
        (30 * a.sum() + 0.1 * b.sum()).backward()  # gradient norms: 60 for a, 0.2 for b
        assert seen["a"] == pytest.approx(0.5 if clip else 60.0, rel=1e-5)
        assert seen["b"] == pytest.approx(0.2, rel=1e-5)  # within the limit: as computed
        assert a.grad is None and b.grad is None
        optimizer.remove_hooks()


@pytest.mark.parametrize("name", [O.ADAMW, O.ADAMW_ADV])  # one optimizer per weight; one stepped per weight (step_parameter)
def test_fused_back_pass_accumulates_over_a_window_as_the_plain_step(name):
    """Gradient accumulation 2: the hooks step only in the window's last backward pass (the trainer
    sets `stepping`), on the two batches' summed gradients, as a plain step after both; refused before."""
    from ot_gradio.training.optimizers import fused_back_pass, set_stepping

    results = []
    for fused in (False, True):
        model = small_model()
        config = OptimizerConfig(optimizer=name, fused_back_pass=fused, fused=False, foreach=False)
        param_groups = groups(model, 1e-2)
        optimizer = fused_back_pass(create_optimizer(param_groups, config, CPU), param_groups, _Config(config, accumulation=2), CPU)
        optimizer_train_mode(optimizer)
        g = torch.Generator().manual_seed(3)
        for batch in range(6):
            x = torch.randn(4, 16, generator=g)
            last = batch % 2 == 1
            set_stepping(optimizer, last)
            (model(x).square().mean() / 2).backward()
            if not last:
                assert model[0].weight.grad is not None  # held for the window's last batch
            else:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        optimizer_eval_mode(optimizer)
        results.append(model[0].weight.detach().clone())
    assert torch.allclose(results[0], results[1], atol=1e-6)


def test_a_fused_back_pass_that_the_optimizer_does_not_offer_leaves_it_unchanged():
    from ot_gradio.training.optimizers import fused_back_pass

    param_groups = groups(small_model(), 1e-3)
    prodigy = OptimizerConfig(optimizer=O.PRODIGY, fused_back_pass=True)  # does not offer it: unchanged
    plain = create_optimizer(param_groups, prodigy, CPU)
    assert fused_back_pass(plain, param_groups, _Config(prodigy, accumulation=4), CPU) is plain


def test_fused_back_pass_with_adaptive_adafactor_reports_its_learning_rate():
    from ot_gradio.training.optimizers import fused_back_pass
    from ot_gradio.training.schedulers import create_scheduler

    model = small_model()
    config = OptimizerConfig(optimizer=O.ADAFACTOR, fused_back_pass=True, relative_step=True, scale_parameter=True)
    param_groups = groups(model, 1e-3)
    optimizer = fused_back_pass(create_optimizer(param_groups, config, CPU), param_groups, _Config(config), CPU)
    scheduler = create_scheduler(optimizer, S.ADAFACTOR, STEPS, 0, 1, 0)
    losses = train(optimizer, model, steps=10, scheduler=scheduler)
    assert losses[-1] < losses[0]
    assert optimizer.param_groups[0]["lr"] != 1e-3
    optimizer.remove_hooks()


@pytest.mark.parametrize("name", [O.ADAMW_ADV, O.SIGNSGD_ADV, O.PRODIGY_ADV, O.PRODIGY_PLUS_SCHEDULE_FREE, O.MUON_ADV])
def test_fused_back_pass_of_optimizers_that_step_one_weight_keeps_one_optimizer(name):
    """adv-optm's and Prodigy Plus step one weight themselves: the fused back pass keeps the one
    optimizer (Prodigy's step size spans all the weights) and ends where the plain steps end."""
    from ot_gradio.training.optimizers import fused_back_pass
    from ot_gradio.training.optimizers.fused_back_pass import ParameterSteps

    results = []
    for fused in (False, True):
        model = small_model()
        config = OptimizerConfig(optimizer=name, fused_back_pass=fused, **SETTINGS.get(name, {}))
        param_groups = groups(model, 1.0 if name in ADAPTIVE else 1e-2)
        optimizer = fused_back_pass(create_optimizer(param_groups, config, CPU), param_groups, _Config(config), CPU)
        assert isinstance(optimizer, ParameterSteps) == fused
        losses = train(optimizer, model, steps=4)
        assert losses[-1] < losses[0]
        if fused:
            assert all(p.grad is None for p in model.parameters())  # freed in the backward pass
            again = fused_back_pass(create_optimizer(param_groups, config, CPU), param_groups, _Config(config), CPU)
            again.load_state_dict(optimizer.state_dict())
            assert again.param_groups[0].get("d") == optimizer.param_groups[0].get("d")
            optimizer.remove_hooks()
            again.remove_hooks()
        results.append(model[0].weight.detach().clone())
    assert torch.allclose(results[0], results[1], atol=1e-6)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS, key=str))
def test_a_resumed_optimizer_continues_as_if_never_stopped(name, tmp_path):
    """The optimizer state a backup saves (torch.save of the state dict, as backup.py writes it)
    brings back every moment and step size: two steps, save, load into a new optimizer, two more
    steps end where four steps in one go end."""
    config = OptimizerConfig(optimizer=name, **SETTINGS.get(name, {}))
    lr = 1.0 if name in ADAPTIVE else LR.get(name, 1e-2)
    ends = []
    for resume in (False, True):
        model = small_model()
        optimizer = create_optimizer(groups(model, lr), config, CPU)
        train(optimizer, model, steps=2)
        if resume:
            torch.save(optimizer.state_dict(), tmp_path / "state.pt")
            optimizer = create_optimizer(groups(model, lr), config, CPU)
            optimizer.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=False))
        train(optimizer, model, steps=2)
        ends.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.allclose(ends[0], ends[1], atol=1e-6), f"{name.value}: resumed weights differ by {(ends[0] - ends[1]).abs().max():.2e}"


@pytest.mark.parametrize("name", [O.ADAMW, O.ADAMW_ADV])  # FusedBackPass and ParameterSteps
def test_a_fused_back_pass_does_not_keep_its_model_alive(name):
    """Its gradient hooks sit on the weights (held by their C++ side, which the garbage collector
    cannot see through): hooks that held the optimizer, itself keyed by the weights, kept the model
    and its optimizer state alive after the run (bench/gpu_check.py: 6 GB left on the card by a
    fine-tune for the next run)."""
    import gc
    import weakref

    from ot_gradio.training.optimizers import fused_back_pass

    model = small_model()
    config = OptimizerConfig(optimizer=name, fused_back_pass=True, **SETTINGS.get(name, {}))
    param_groups = groups(model, 1e-2)
    optimizer = fused_back_pass(create_optimizer(param_groups, config, CPU), param_groups, _Config(config), CPU)
    train(optimizer, model, steps=2)
    assert all(p.grad is None for p in model.parameters())  # stepped by the hooks
    weight, stepper = weakref.ref(model[0].weight), weakref.ref(optimizer)
    del model, optimizer, param_groups
    gc.collect()
    assert stepper() is None and weight() is None
