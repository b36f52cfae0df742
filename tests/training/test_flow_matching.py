"""The flow-matching objective (training/flow_matching.py) through the real training step, on a
stand-in family with a linear denoiser, and the options it refuses."""

from __future__ import annotations

import math

import pytest
import torch

from ot_gradio.config.doctor import errors
from ot_gradio.config.enums import LossWeight, ModelType, TimestepDistribution
from ot_gradio.config.families import FAMILIES, FamilyInfo
from ot_gradio.config.flow_options import flow_matching_conflicts
from ot_gradio.config.schema import TrainConfig
from ot_gradio.data.batches import Batch
from ot_gradio.models.family import Family
from ot_gradio.training.device import Precision
from ot_gradio.training.diffusion import DiffusionStep, configure_model
from ot_gradio.training.flow_matching import FlowMatchingSchedule, resolution_shift, shift_t, t_from_index
from ot_gradio.training.schedules import DdpmSchedule


class FlowFamily(Family):
    """The members of the flow contract the core reads; predict is a 1x1 conv of the input."""

    schedule_kind = "flow_matching"
    prediction_type = "flow"
    text_encoder_names = ("text_encoder",)
    denoiser = "transformer"

    def __init__(self, dynamic: bool = True):
        from diffusers import FlowMatchEulerDiscreteScheduler

        self.noise_scheduler = FlowMatchEulerDiscreteScheduler(
            shift=3.0, use_dynamic_shifting=dynamic, base_shift=0.5, max_shift=1.15,
            base_image_seq_len=256, max_image_seq_len=4096,
        )
        torch.manual_seed(0)
        self.transformer = torch.nn.Conv2d(4, 4, 1)
        self.seen_t = None
        self.configured = None

    @property
    def parts(self):
        return {"transformer": self.transformer}

    def configure_flow(self, config):
        self.configured = config

    def set_attention(self, mechanism, device):
        pass

    def image_seq_len(self, latents):
        return (latents.shape[-2] // 2) * (latents.shape[-1] // 2)

    def encode_text(self, captions, grad=frozenset()):
        return {}

    def predict(self, noisy, t, conditioning, batch):
        self.seen_t = t
        return self.transformer(noisy)


def _config(**kw) -> TrainConfig:
    return TrainConfig.model_validate({"concepts": [], "samples": [], **kw})


def _batch(latents):
    return Batch(size=(64, 64), captions=["a"] * latents.shape[0], loss_weights=torch.ones(latents.shape[0]),
                 image_paths=["x"] * latents.shape[0], latents=latents)


def test_step_trains_velocity_on_the_straight_path():
    model = FlowFamily()
    latents = torch.randn(2, 4, 8, 8)
    noise = torch.randn(2, 4, 8, 8)
    index = torch.tensor([99, 749])
    step = DiffusionStep(model, _config(), torch.device("cpu"), Precision("FLOAT_32", torch.device("cpu")),
                         noise_fn=lambda lat: (noise, index))
    loss = step.loss(_batch(latents))
    t = torch.tensor([0.1, 0.75])
    assert torch.allclose(model.seen_t, t)
    tt = t.view(-1, 1, 1, 1)
    expected = torch.nn.functional.mse_loss(model.transformer((1 - tt) * latents + tt * noise), noise - latents)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_sigma_loss_weight_is_t():
    model = FlowFamily()
    latents, noise = torch.randn(2, 4, 8, 8), torch.randn(2, 4, 8, 8)
    index = torch.tensor([199, 599])
    cpu = torch.device("cpu")
    losses = {}
    for fn in (LossWeight.CONSTANT, LossWeight.SIGMA):
        step = DiffusionStep(model, _config(loss_weight_fn=fn), cpu, Precision("FLOAT_32", cpu), noise_fn=lambda lat: (noise, index))
        losses[fn] = step.loss(_batch(latents)).item()
    t = torch.tensor([0.2, 0.6]).view(-1, 1, 1, 1)
    per_sample = ((model.transformer((1 - t) * latents + t * noise) - (noise - latents)) ** 2).mean(dim=(1, 2, 3))
    assert losses[LossWeight.SIGMA] == pytest.approx((per_sample * t.flatten()).mean().item(), rel=1e-5)
    assert losses[LossWeight.SIGMA] != pytest.approx(losses[LossWeight.CONSTANT], rel=1e-3)


def test_resolution_shift_is_diffusers_calculate_shift():
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    for tokens in (256, 1024, 4096, 6000):
        assert resolution_shift(tokens, {}) == pytest.approx(math.exp(calculate_shift(tokens)), rel=1e-9)
    # two shifts compose into their product
    t = torch.linspace(0.01, 1, 50)
    assert torch.allclose(shift_t(shift_t(t, 2.0), 1.7), shift_t(t, 3.4), atol=1e-6)


def test_dynamic_shifting_replaces_timestep_shift_as_onetrainer():
    """OneTrainer: "If enabled, the shifting parameters are taken from the model's scheduler
    configuration and Timestep Shift is ignored" (we multiplied the two)."""
    model, cpu = FlowFamily(), torch.device("cpu")
    latents = torch.zeros(1, 4, 64, 64)
    dynamic = FlowMatchingSchedule(model, _config(dynamic_timestep_shifting=True, timestep_shift=3.0), cpu).shift(latents)
    assert dynamic == FlowMatchingSchedule(model, _config(dynamic_timestep_shifting=True), cpu).shift(latents) != 3.0
    assert FlowMatchingSchedule(model, _config(timestep_shift=3.0), cpu).shift(latents) == 3.0


def test_dynamic_shift_moves_timesteps_towards_noise_for_larger_images():
    model = FlowFamily()
    cpu = torch.device("cpu")
    cfg = _config(dynamic_timestep_shifting=True, timestep_distribution=TimestepDistribution.LOGIT_NORMAL)
    schedule = FlowMatchingSchedule(model, cfg, cpu)
    torch.manual_seed(0)
    small = schedule.draw_timesteps(torch.zeros(1, 4, 32, 32), 4000).mean()
    torch.manual_seed(0)
    large = schedule.draw_timesteps(torch.zeros(1, 4, 128, 128), 4000).mean()
    assert 0.4 < small < large
    plain = FlowMatchingSchedule(model, _config(timestep_distribution=TimestepDistribution.LOGIT_NORMAL), cpu)
    torch.manual_seed(0)
    assert plain.draw_timesteps(torch.zeros(1, 4, 128, 128), 4000).mean() == pytest.approx(0.5, abs=0.02)
    t = plain.draw_timesteps(torch.zeros(1, 4, 8, 8), 1000)
    assert 0 < t.min() and t.max() <= 1


def test_index_to_t_matches_the_schedulers_sigmas():
    from diffusers import FlowMatchEulerDiscreteScheduler

    sigmas = FlowMatchEulerDiscreteScheduler(shift=1.0).sigmas  # descending, 1.0 ... 0.001
    assert torch.allclose(t_from_index(torch.arange(1000)).flip(0), sigmas.float(), atol=1e-6)


def test_ddpm_families_keep_the_ddpm_schedule():
    from ot_gradio.models.sd15 import StableDiffusion15
    from ot_gradio.models.tiny.sd15 import tiny_sd15_components

    cpu = torch.device("cpu")
    step = DiffusionStep(StableDiffusion15(**tiny_sd15_components()), _config(), cpu, Precision("FLOAT_32", cpu))
    assert isinstance(step.schedule, DdpmSchedule)


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("loss_weight_fn", "MIN_SNR_GAMMA", "loss_weight_fn"),
        ("force_v_prediction", True, "force_v_prediction"),
        ("rescale_noise_scheduler_to_zero_terminal_snr", True, "rescale_noise_scheduler_to_zero_terminal_snr"),
    ],
)
def test_options_that_do_not_apply_are_refused(field, value, named, monkeypatch):
    cfg = _config(**{field: value})
    problems = flow_matching_conflicts(cfg)
    assert len(problems) == 1 and problems[0].startswith(named)
    # the doctor refuses them for a flow family before the run starts
    monkeypatch.setitem(FAMILIES, ModelType.FLUX_DEV_1, FamilyInfo(("transformer", "text_encoder", "vae"), "transformer",
                                                                  ("text_encoder",), implemented=True, schedule="flow_matching"))
    assert any(p.startswith(named) for p in errors(_config(model_type="FLUX_DEV_1", **{field: value})))
    assert not any(p.startswith(named) for p in errors(_config(model_type="STABLE_DIFFUSION_15", **{field: value})))
    # and the trainer's model setup refuses them too
    cpu = torch.device("cpu")
    with pytest.raises(ValueError, match=named):
        configure_model(FlowFamily(), cfg, cpu, Precision("FLOAT_32", cpu))


def test_generalized_offset_noise_refused():
    cfg = _config(generalized_offset_noise=True, offset_noise_weight=0.1)
    assert [p.split(":")[0] for p in flow_matching_conflicts(cfg)] == ["generalized_offset_noise"]
    assert flow_matching_conflicts(_config(offset_noise_weight=0.1)) == []


def test_configure_model_hands_the_config_to_the_family():
    model = FlowFamily()
    cpu = torch.device("cpu")
    cfg = _config()
    configure_model(model, cfg, cpu, Precision("FLOAT_32", cpu))
    assert model.configured is cfg
