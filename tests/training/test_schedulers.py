import math

import pytest

from ot_gradio.config.enums import LearningRateScheduler as S
from ot_gradio.config.lr_schedules import lr_curve, lr_factor, warmup_steps


def test_constant_is_one_after_warmup():
    """The warmup rises from 0 at the first step, as OneTrainer's and diffusers' (we began at 1/n)."""
    assert [lr_factor(S.CONSTANT, s, 100, warmup=10) for s in (0, 4, 9)] == [0.0, 0.4, 0.9]
    assert all(lr_factor(S.CONSTANT, s, 100, warmup=10) == 1.0 for s in range(10, 100))


def test_warmup_fraction_of_total():
    assert warmup_steps(0.1, 200) == 20
    assert warmup_steps(30, 200) == 30
    assert warmup_steps(0, 200) == 0
    # OneTrainer's reading: up to 1 (included) a fraction, rounded down
    assert warmup_steps(0.33, 30) == 9 and warmup_steps(1, 30) == 30 and warmup_steps(1.5, 30) == 1


@pytest.mark.parametrize("step", [0, 25, 50, 99])
def test_linear_and_cosine_formulas(step):
    total = 100
    p = step / total
    assert lr_factor(S.LINEAR, step, total) == pytest.approx(1 - p)
    assert lr_factor(S.COSINE, step, total) == pytest.approx(0.5 * (1 + math.cos(math.pi * p)))
    assert lr_factor(S.REX, step, total) == pytest.approx((1 - p) / (0.1 + 0.9 * (1 - p)))  # OneTrainer's d = 0.9
    assert lr_factor(S.COSINE_WITH_RESTARTS, step, total, cycles=2) == pytest.approx(0.5 * (1 + math.cos(2 * math.pi * 2 * p)))
    assert lr_factor(S.COSINE_WITH_HARD_RESTARTS, step, total, cycles=2) == pytest.approx(0.5 * (1 + math.cos(math.pi * ((2 * p) % 1))))


def test_min_factor_floor():
    curve = lr_curve(S.LINEAR, 100, 0, 1, 0.2, base_lr=1.0)
    assert min(curve) >= 0.2 - 1e-9
    assert curve[0] == pytest.approx(1.0)


def test_unavailable_scheduler_names_the_field():
    with pytest.raises(ValueError, match="learning_rate_scheduler"):
        lr_factor("NOPE", 0, 10)


def test_torch_scheduler_follows_the_formula():
    import torch

    from ot_gradio.training.schedulers import create_scheduler

    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.5)
    sched = create_scheduler(opt, S.COSINE, 10, 2, 1, 0.0)
    seen = []
    for _ in range(10):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx(lr_curve(S.COSINE, 10, 2, 1, 0.0, 0.5))


FORMULAS = {
    S.CONSTANT: lambda p, c: 1.0,
    S.LINEAR: lambda p, c: 1 - p,
    S.COSINE: lambda p, c: 0.5 * (1 + math.cos(math.pi * p)),
    S.COSINE_WITH_RESTARTS: lambda p, c: 0.5 * (1 + math.cos(2 * math.pi * c * p)),
    S.COSINE_WITH_HARD_RESTARTS: lambda p, c: 0.5 * (1 + math.cos(math.pi * ((c * p) % 1))),
    S.REX: lambda p, c: (1 - p) / (0.1 + 0.9 * (1 - p)),
    S.ADAFACTOR: lambda p, c: 1.0,  # the LR comes from the optimizer: the plot shows the initial LR
    S.CUSTOM: lambda p, c: 1.0,  # unknown until the class runs: the plot shows the base LR
}


@pytest.mark.parametrize("scheduler", list(S))
def test_every_scheduler_curve_equals_its_formula(scheduler):
    total, warm, cycles, floor = 60, 10, 2, 0.1
    for step in range(total):
        expected = FORMULAS[scheduler]((step - warm) / (total - warm), cycles) if step >= warm else step / warm
        if scheduler == S.ADAFACTOR:
            expected = 1.0  # no warmup and no floor: Adafactor computes its own rate
        elif step >= warm:
            expected = floor + (1 - floor) * max(0.0, expected)
        assert lr_factor(scheduler, step, total, warm, cycles, floor) == pytest.approx(expected), (scheduler, step)


@pytest.mark.parametrize("scheduler", [s for s in S if s not in (S.ADAFACTOR, S.CUSTOM)])
def test_every_torch_scheduler_follows_the_page_curve(scheduler):
    import torch

    from ot_gradio.training.schedulers import create_scheduler

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
    sched = create_scheduler(opt, scheduler, 20, 3, 2, 0.1)
    seen = []
    for _ in range(20):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx(lr_curve(scheduler, 20, 3, 2, 0.1, 0.5))


def _custom_config(path, params, **kw):
    from ot_gradio.config.schema import TrainConfig

    return TrainConfig(learning_rate_scheduler=S.CUSTOM, custom_learning_rate_scheduler=path, scheduler_params=params, **kw)


def _lrs(opt, sched, steps):
    seen = []
    for _ in range(steps):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return seen


def test_custom_scheduler_by_import_path():
    import torch

    from ot_gradio.training.schedulers import create_scheduler

    config = _custom_config("torch.optim.lr_scheduler.StepLR", [{"key": "step_size", "value": "2"}, {"key": "gamma", "value": "0.5"}])
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.8)
    sched = create_scheduler(opt, S.CUSTOM, 10, 0, 1, 0, config=config, steps_per_epoch=5)
    assert _lrs(opt, sched, 6) == pytest.approx([0.8, 0.8, 0.4, 0.4, 0.2, 0.2])


def test_custom_scheduler_placeholders_and_warmup():
    import torch

    from ot_gradio.training.schedulers import create_scheduler

    # LinearLR from 1 to 0 over %SCHEDULER_STEPS% (the optimizer steps after the warmup: 8 - 2 = 6 here)
    params = [{"key": "start_factor", "value": "1.0"}, {"key": "end_factor", "value": "0.0"},
              {"key": "total_iters", "value": "%SCHEDULER_STEPS%"}]
    config = _custom_config("torch.optim.lr_scheduler.LinearLR", params, epochs=2)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = create_scheduler(opt, S.CUSTOM, 8, 2, 1, 0, config=config, steps_per_epoch=4)
    seen = _lrs(opt, sched, 8)
    assert seen[:2] == pytest.approx([0.0, 0.5])  # the warmup, as the page plots it
    # then down over the 6 steps left, to 1/6 at the last step (with %SCHEDULER_STEPS% = all 8 it ended at 3/8)
    assert seen[2:] == pytest.approx([1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])


@pytest.mark.parametrize(("path", "params", "match"), [
    ("NoDots", [], "custom_learning_rate_scheduler: 'NoDots' is not a class path"),
    ("", [], "custom_learning_rate_scheduler"),
    ("no_such_module_xyz.Sched", [], "custom_learning_rate_scheduler: cannot import module 'no_such_module_xyz'"),
    ("torch.optim.lr_scheduler.NoSuchScheduler", [], "custom_learning_rate_scheduler: module 'torch.optim.lr_scheduler' has no class"),
    ("torch.optim.lr_scheduler.StepLR", [{"key": "step_size", "value": "two"}], r"scheduler_params\[0\].value"),
    ("torch.optim.lr_scheduler.StepLR", [{"key": "nope", "value": "1"}], "scheduler_params: torch.optim.lr_scheduler.StepLR does not take"),
    # not schedulers: called with the parameters they would run code (a hub model's, with trust_remote_code)
    ("transformers.pipeline", [{"key": "task", "value": "'feature-extraction'"}, {"key": "trust_remote_code", "value": "True"}],
     "custom_learning_rate_scheduler: transformers.pipeline is not a learning rate scheduler"),
    ("os.system", [], "custom_learning_rate_scheduler: os.system is not a learning rate scheduler"),
])
def test_custom_scheduler_errors_name_the_field(path, params, match):
    import torch

    from ot_gradio.training.schedulers import create_scheduler

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match=match):
        create_scheduler(opt, S.CUSTOM, 10, 0, 1, 0, config=_custom_config(path, params), steps_per_epoch=5)


def test_custom_scheduler_takes_transformers_schedule_functions():
    import torch

    from ot_gradio.training.schedulers import create_scheduler

    params = [{"key": "num_warmup_steps", "value": "0"}, {"key": "num_training_steps", "value": "%TOTAL_STEPS%"}]
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = create_scheduler(opt, S.CUSTOM, 4, 0, 1, 0, config=_custom_config("transformers.get_linear_schedule_with_warmup", params),
                             steps_per_epoch=4)
    seen = _lrs(opt, sched, 4)
    assert seen[0] == 1.0 and seen[3] < seen[2] < seen[1] < seen[0]  # linear decay over the run's steps


def test_adafactor_scheduler_needs_the_adafactor_optimizer():
    import torch

    from ot_gradio.training.schedulers import create_scheduler

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match="learning_rate_scheduler: ADAFACTOR"):
        create_scheduler(opt, S.ADAFACTOR, 10, 0, 1, 0)


def test_schedule_free_optimizers_run_at_a_constant_rate_without_warmup():
    import torch

    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.training.schedulers import create_scheduler

    config = TrainConfig(learning_rate_scheduler=S.COSINE, learning_rate_warmup_steps=3)
    config.optimizer.optimizer = "SCHEDULE_FREE_ADAMW"
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.3)
    sched = create_scheduler(opt, S.COSINE, 10, 3, 1, 0, config=config)
    assert _lrs(opt, sched, 10) == pytest.approx([0.3] * 10)


def test_adafactors_own_rate_is_reported_as_a_number():
    """With relative_step Adafactor computes its rate from each weight's RMS, a tensor: the scheduler
    hands the trainer a float (the run log once held "tensor(0.0030)", which stopped the page's
    start when it read the run's history)."""
    import torch

    from ot_gradio.training.optimizers.entries import adafactor
    from ot_gradio.training.schedulers import create_scheduler

    weight = torch.nn.Parameter(torch.ones(4, 4))
    opt = adafactor([weight], lr=1e-3, relative_step=True, scale_parameter=True, warmup_init=False)
    sched = create_scheduler(opt, S.ADAFACTOR, 10, 0, 1, 0)
    weight.grad = torch.ones(4, 4)
    opt.step()
    sched.step()
    (lr,) = sched.get_last_lr()
    assert type(lr) is float and 0 < lr < 1


def test_a_run_log_with_a_value_that_is_no_number_still_reads(tmp_path):
    import json

    from ot_gradio.runner.history import run_series, run_state
    from ot_gradio.runner.rundir import create_run

    run = create_run(tmp_path, {"model_type": "STABLE_DIFFUSION_15"})
    lines = [{"type": "metrics", "time": 1.0, "global_step": 1, "loss": 0.5, "lr": "tensor(0.0030)"},
             {"type": "metrics", "time": 2.0, "global_step": 2, "loss": "nan?", "lr": 0.001},
             {"type": "metrics", "time": 3.0, "global_step": 3, "loss": 0.4, "smooth_loss": 0.0, "lr": 0.002}]
    run.events.write_text("".join(json.dumps(line) + "\n" for line in lines))
    state = run_state(run)
    assert state.losses == [(1, 0.5), (3, 0.4)] and state.lrs == [(2, 0.001), (3, 0.002)]
    series = run_series(run)
    assert series["step"] == [1, 3] and series["smooth_loss"] == [0.5, 0.0] and math.isnan(series["lr"][0])
