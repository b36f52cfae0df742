"""Model-side training options on the tiny SD 1.5, built in memory: prediction type and zero
terminal SNR (training and sampling), attention backends, autocast cache, quantized weight
types, and how a training step wires captions, masks and loss weights together."""

import numpy as np
import pytest
import torch

from ot_gradio.config.enums import DataType
from ot_gradio.config.schema import TrainConfig
from ot_gradio.data.batches import Batch
from ot_gradio.data.buckets import Bucketing
from ot_gradio.training.device import Precision, weight_dtype
from ot_gradio.training.diffusion import DiffusionStep, check_quantized_parts_frozen, configure_model

CPU = torch.device("cpu")


def tiny_model():
    from ot_gradio.models.sd15 import StableDiffusion15
    from ot_gradio.models.tiny.sd15 import tiny_sd15_components

    return StableDiffusion15(**tiny_sd15_components())


def config(**values):
    return TrainConfig.model_validate(values)


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def batch(captions=("a red circle", "a blue square"), mask=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Batch(
        size=(64, 64),
        captions=list(captions),
        loss_weights=torch.ones(len(captions)),
        image_paths=[f"{i}.png" for i in range(len(captions))],
        latents=torch.randn(len(captions), 4, 8, 8, generator=g),
        mask=mask,
    )


def fixed(t=500):
    def noise_fn(latents):
        g = torch.Generator().manual_seed(7)
        return torch.randn(latents.shape, generator=g), torch.full((latents.shape[0],), t)

    return noise_fn


# --- prediction type and zero terminal SNR -----------------------------------------------------


def test_force_v_prediction_changes_training_and_sampling():
    model = tiny_model()
    configure_model(model, config(force_v_prediction=True), CPU, Precision(DataType.FLOAT_32, CPU))
    assert model.prediction_type == "v_prediction"
    assert model.scheduler.config.prediction_type == "v_prediction"  # saved with the model
    assert model.pipeline("EULER").scheduler.config.prediction_type == "v_prediction"
    latents, noise, t = torch.randn(1, 4, 8, 8), torch.randn(1, 4, 8, 8), torch.tensor([400])
    assert torch.allclose(model.prediction_target(latents, noise, t), model.noise_scheduler.get_velocity(latents, noise, t))


def test_force_epsilon_on_a_v_model_and_both_forced_is_refused():
    model = tiny_model()
    model.configure_noise_schedule(prediction_type="v_prediction")
    configure_model(model, config(force_epsilon_prediction=True), CPU, Precision(DataType.FLOAT_32, CPU))
    assert model.prediction_type == "epsilon" and model.pipeline("DDIM").scheduler.config.prediction_type == "epsilon"
    with pytest.raises(ValueError, match="both"):
        configure_model(tiny_model(), config(force_v_prediction=True, force_epsilon_prediction=True), CPU, Precision(DataType.FLOAT_32, CPU))


def test_zero_terminal_snr_for_training_and_sampling():
    model = tiny_model()
    warnings = configure_model(model, config(rescale_noise_scheduler_to_zero_terminal_snr=True), CPU, Precision(DataType.FLOAT_32, CPU))
    # zero terminal SNR switches to v-prediction, as OneTrainer's setups do (epsilon cannot learn the last step)
    assert warnings == [] and model.prediction_type == "v_prediction"
    assert model.pipeline("EULER").scheduler.config.prediction_type == "v_prediction"
    epsilon = tiny_model()
    warnings = configure_model(epsilon, config(rescale_noise_scheduler_to_zero_terminal_snr=True, force_epsilon_prediction=True),
                               CPU, Precision(DataType.FLOAT_32, CPU))
    assert epsilon.prediction_type == "epsilon" and any("force_epsilon_prediction" in w for w in warnings)
    assert model.noise_scheduler.alphas_cumprod[-1].item() == pytest.approx(0.0, abs=1e-12)
    assert tiny_model().noise_scheduler.alphas_cumprod[-1].item() > 1e-3
    sampler = model.pipeline("EULER").scheduler
    assert sampler.config.rescale_betas_zero_snr and sampler.config.timestep_spacing == "trailing"

    # an epsilon model samples on the original betas from the last timestep, as OneTrainer: at zero signal DDIM's
    # epsilon step divides by zero (every sample came out black)
    ddim = epsilon.pipeline("DDIM").scheduler
    ddim.set_timesteps(4)
    assert not ddim.config.rescale_betas_zero_snr and int(ddim.timesteps[0]) == 999 and ddim.alphas_cumprod[999] > 1e-3
    image = np.asarray(epsilon.sample("a red circle", height=64, width=64, steps=2, sampler="DDIM", device=CPU))
    assert image.max() > 0
    assert epsilon.noise_scheduler.alphas_cumprod[-1].item() == pytest.approx(0.0, abs=1e-12)  # it trains on the rescaled one

    v_model = tiny_model()
    assert configure_model(v_model, config(rescale_noise_scheduler_to_zero_terminal_snr=True, force_v_prediction=True), CPU, Precision(DataType.FLOAT_32, CPU)) == []
    for sampler in ("DDIM", "EULER"):
        image = v_model.sample("a red circle", height=64, width=64, steps=2, sampler=sampler, device=CPU)
        assert image.size == (64, 64)


def test_zero_terminal_snr_samples_rescale_the_guidance(monkeypatch):
    """As OneTrainer samples a zero-terminal-SNR run (cfg_rescale 0.7): diffusers' rescale runs with
    0.7, and the image differs from the one without it. Another run's samples are not rescaled."""
    from diffusers.pipelines.stable_diffusion import pipeline_stable_diffusion

    from ot_gradio.models import sd15

    seen = []
    original = pipeline_stable_diffusion.rescale_noise_cfg
    monkeypatch.setattr(pipeline_stable_diffusion, "rescale_noise_cfg",
                        lambda cfg, text, guidance_rescale=0.0: seen.append(guidance_rescale) or original(cfg, text, guidance_rescale))
    model = tiny_model()
    configure_model(model, config(rescale_noise_scheduler_to_zero_terminal_snr=True, force_v_prediction=True), CPU, Precision(DataType.FLOAT_32, CPU))
    model.unet.conv_out.weight.data.normal_(std=0.5, generator=torch.Generator().manual_seed(0))  # a prediction with some spread

    def pixels():
        image = model.sample("a red circle", negative_prompt="blue", height=64, width=64, steps=3, cfg_scale=7.0, sampler="DDIM", device=CPU)
        return torch.tensor(list(image.getdata()), dtype=torch.float32)

    rescaled = pixels()
    assert seen and set(seen) == {sd15.ZERO_SNR_GUIDANCE_RESCALE}
    monkeypatch.setattr(sd15, "ZERO_SNR_GUIDANCE_RESCALE", 0.0)
    assert (pixels() - rescaled).abs().max() > 1  # the rescale changes the image
    assert tiny_model().guidance_rescale(tiny_model().pipeline()) == {}  # no zero terminal SNR: no rescale


# --- attention and precision -------------------------------------------------------------------


def _processors(model):
    return {type(p).__name__ for p in model.unet.attn_processors.values()}


def test_attention_mechanisms(model):
    model.set_attention("DEFAULT", CPU)
    assert _processors(model) == {"AttnProcessor"}
    model.set_attention("SDP", CPU)
    assert _processors(model) == {"AttnProcessor2_0"}
    for name in ("XFORMERS", "FLASH"):
        with pytest.raises(ValueError, match=f"{name}.*SDP"):
            model.set_attention(name, CPU)
    assert _processors(model) == {"AttnProcessor2_0"}


def test_configure_model_applies_the_attention_option():
    model = tiny_model()
    configure_model(model, config(attention_mechanism="DEFAULT"), CPU, Precision(DataType.FLOAT_32, CPU))
    assert _processors(model) == {"AttnProcessor"}


def test_autocast_cache_option():
    for enabled in (True, False):
        with Precision(DataType.BFLOAT_16, CPU, autocast_cache=enabled).autocast():
            assert torch.is_autocast_enabled("cpu") and torch.is_autocast_cache_enabled() is enabled


def test_train_dtypes():
    assert Precision(DataType.FLOAT_32, CPU).dtype is None
    assert Precision(DataType.BFLOAT_16, CPU).dtype == torch.bfloat16
    half = Precision(DataType.FLOAT_16, CPU)
    assert half.dtype is None and "FLOAT_32" in half.note and half.scaler is None  # CPU: float32 is the fast choice
    assert Precision(DataType.TFLOAT_32, CPU).dtype is None


@pytest.mark.filterwarnings("ignore:torch.cuda.amp.GradScaler is enabled, but CUDA is not available")
def test_float16_scales_the_loss_only_when_every_trained_weight_is_float32():
    """OneTrainer's rule: FLOAT_16 weights would crash torch's scaler ("Attempting to unscale FP16
    gradients") and bfloat16 ones (its SDXL preset's UNet under FLOAT_16) train unscaled there."""
    cuda = torch.device("cuda")  # the rule only: nothing runs on the device
    weights = {dtype: torch.nn.Parameter(torch.zeros(2, dtype=dtype)) for dtype in (torch.float32, torch.float16, torch.bfloat16)}
    for trained, scaled in (([torch.float32], True), ([torch.float32, torch.float16], False), ([torch.bfloat16], False)):
        precision = Precision(DataType.FLOAT_16, cuda)
        precision.scale_gradients_of(weights[d] for d in trained)
        assert (precision.scaler is not None) is scaled, trained
    for other in (DataType.BFLOAT_16, DataType.FLOAT_32):
        precision = Precision(other, cuda)
        precision.scale_gradients_of([weights[torch.float32]])
        assert precision.scaler is None


# --- quantized weight types --------------------------------------------------------------------


def test_weight_dtypes_on_cpu_and_gpu():
    cuda = torch.device("cuda")
    assert weight_dtype(DataType.FLOAT_16, CPU) == torch.float32
    assert weight_dtype(DataType.FLOAT_16, cuda) == torch.float16
    assert weight_dtype(DataType.NFLOAT_4, cuda, torch.bfloat16) == torch.bfloat16  # the layers that stay unquantized
    assert weight_dtype(DataType.FLOAT_8, CPU, torch.bfloat16) == torch.float32


@pytest.mark.parametrize("data_type", [DataType.FLOAT_8, DataType.INT_8, DataType.NFLOAT_4, DataType.INT_W8A8, DataType.FLOAT_W8A8])
def test_quantized_unet_still_predicts_and_lora_trains_on_top(data_type):
    from ot_gradio.training.lora import add_lora

    reference = tiny_model()
    model = tiny_model()
    cfg = config(unet={"weight_dtype": data_type.value})
    configure_model(model, cfg, CPU, Precision(DataType.FLOAT_32, CPU))
    linears = [m for m in model.unet.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(type(m) is not torch.nn.Linear for m in linears)
    stored = {p.dtype for m in linears for p in m.parameters(recurse=False) if p.ndim == 2}
    assert stored.isdisjoint({torch.float32, torch.float16, torch.bfloat16}), stored

    # 16x16: at 8x8 the tiny UNet's mid block sees one token, where self-attention's q and k get no gradient
    x, t, hidden = torch.randn(1, 4, 16, 16), torch.tensor([300]), torch.randn(1, 77, 32)
    with torch.no_grad():
        ref, out = reference.predict(x, t, hidden), model.predict(x, t, hidden)
    assert (out - ref).abs().mean() < 0.1 * ref.abs().mean()

    params = add_lora(model.unet, kind="unet", rank=2, alpha=2, dropout=0.0, layer_preset="attn-only")
    assert all(p.dtype == torch.float32 and p.requires_grad for p in params)
    check_quantized_parts_frozen(model, cfg)
    for p in params[1::2]:  # lora_B starts at zero; give it a value so lora_A gets a gradient too
        torch.nn.init.normal_(p, std=0.01)
    model.predict(x, t, hidden).pow(2).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in params)


def test_a_quantized_part_that_trains_itself_is_refused():
    model = tiny_model()
    cfg = config(text_encoder={"weight_dtype": "FLOAT_8"})
    configure_model(model, cfg, CPU, Precision(DataType.FLOAT_32, CPU))
    model.text_encoder.requires_grad_(True)
    with pytest.raises(ValueError, match="text_encoder.weight_dtype"):
        check_quantized_parts_frozen(model, cfg)


@pytest.mark.parametrize("data_type", ["FLOAT_8", "INT_W8A8"])
def test_a_fine_tune_of_a_quantized_part_is_refused_by_name(data_type):
    """Before any weight is asked for a gradient (int8 codes cannot be: torch would raise its own error)."""
    from ot_gradio.training.methods import get_method

    model = tiny_model()
    cfg = config(training_method="FINE_TUNE", output_model_format="DIFFUSERS", text_encoder={"weight_dtype": data_type})
    configure_model(model, cfg, CPU, Precision(DataType.FLOAT_32, CPU))
    with pytest.raises(ValueError, match=f"^text_encoder.weight_dtype: {data_type} weights cannot be trained"):
        get_method("FINE_TUNE").setup(model, cfg, CPU)


# --- a training step wires the options ---------------------------------------------------------


def test_caption_dropout_trains_with_empty_captions(model, monkeypatch):
    seen = []
    tokenize = model.tokenize
    monkeypatch.setattr(model, "tokenize", lambda captions: seen.append(list(captions)) or tokenize(captions))
    DiffusionStep(model, config(text_encoder={"dropout_probability": 1.0}), CPU, Precision(DataType.FLOAT_32, CPU)).loss(batch())
    DiffusionStep(model, config(), CPU, Precision(DataType.FLOAT_32, CPU)).loss(batch())
    assert seen == [["", ""], ["a red circle", "a blue square"]]
    torch.manual_seed(0)
    step = DiffusionStep(model, config(text_encoder={"dropout_probability": 0.3}), CPU, Precision(DataType.FLOAT_32, CPU))
    dropped = sum(c == "" for _ in range(500) for c in step.captions(["x", "y"]))
    assert dropped / 1000 == pytest.approx(0.3, abs=0.05)


def test_masked_training_in_a_step(model):
    black = torch.zeros(2, 1, 64, 64)
    black[1, :, :, :32] = 1.0  # the second sample is half white
    masked = config(masked_training=True, unmasked_weight=0.0, unmasked_probability=0.0)
    with torch.no_grad():
        full = DiffusionStep(model, config(), CPU, Precision(DataType.FLOAT_32, CPU), fixed()).loss(batch(mask=black))
        only_black = DiffusionStep(model, masked, CPU, Precision(DataType.FLOAT_32, CPU), fixed()).loss(batch(captions=["a"], mask=black[:1]))
        half = DiffusionStep(model, masked, CPU, Precision(DataType.FLOAT_32, CPU), fixed()).loss(batch(mask=black))
        always_whole = DiffusionStep(model, masked.model_copy(update={"unmasked_probability": 1.0}), CPU, Precision(DataType.FLOAT_32, CPU), fixed())
        whole = always_whole.loss(batch(mask=black))
    assert only_black.item() == 0.0
    assert 0 < half.item() < full.item()
    assert whole.item() == pytest.approx(full.item(), rel=1e-6)


def test_masked_prior_preservation_pulls_towards_the_lora_off_prediction():
    """weight w: the masked loss plus w x the MSE to the base model's (LoRA off) prediction outside
    the mask, computed here with a copy of the model taken before the LoRA; no gradient through it."""
    import copy

    from ot_gradio.training.methods import get_method

    model = tiny_model()
    base = copy.deepcopy(model)
    w = 0.7
    cfg = config(training_method="LORA", text_encoder={"train": False}, masked_training=True, unmasked_weight=0.0,
                 unmasked_probability=0.0, masked_prior_preservation_weight=w)
    method = get_method("LORA")
    params = [p for group in method.setup(model, cfg, CPU) for p in group.params]
    for p in params:  # lora_B starts at zero: make the LoRA change the prediction
        torch.nn.init.normal_(p, std=0.05)
    mask = torch.zeros(2, 1, 64, 64)
    mask[:, :, :, :32] = 1.0  # left half white: outside the mask is the right half of the 8x8 latents
    fp32 = Precision(DataType.FLOAT_32, CPU)

    def step_loss(weight):
        model.unet.zero_grad()
        step = method.training_step(model, cfg.model_copy(update={"masked_prior_preservation_weight": weight}), CPU, fp32, fixed())
        loss = step.loss(batch(mask=mask))
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in params]

    today, _ = step_loss(0.0)
    loss, grads = step_loss(w)
    assert all(p.requires_grad for p in params)  # turning the LoRA off for the prior leaves it trainable

    b = batch(mask=mask)
    noise, t = fixed()(b.latents)
    noisy = model.add_noise(b.latents, noise, t)
    cond = model.encode_text(b.captions)
    with torch.no_grad():
        prior = base.predict(noisy, t, base.encode_text(b.captions))
        off_by_hand = torch.nn.functional.mse_loss(model.predict(noisy, t, cond), model.prediction_target(b.latents, noise, t))
    model.unet.zero_grad()
    pred = model.predict(noisy, t, cond)
    masked = ((pred - model.prediction_target(b.latents, noise, t)) ** 2 * mask[:, :, ::8, ::8]).mean()
    expected = masked + w * ((pred - prior) ** 2 * (1 - mask[:, :, ::8, ::8])).mean()
    expected.backward()
    assert not torch.allclose(prior, pred.detach(), atol=1e-3)  # the LoRA changes the prediction
    assert today.item() == pytest.approx(masked.item(), rel=1e-5)  # weight 0: today's masked loss
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert loss.item() > today.item() and off_by_hand.item() > 0
    for got, p in zip(grads, params, strict=True):  # the prior is a constant: same gradients as the hand-made loss
        assert torch.allclose(got, p.grad, rtol=1e-4, atol=1e-7)


def test_prior_prediction_samples_train_towards_the_lora_off_prediction():
    """A batch with a PRIOR_PREDICTION sample (row 0) and a STANDARD one: row 0's target is the
    prediction of the model taken before the LoRA, for the same noise, timestep and caption; row 1
    keeps its own target; no gradient flows through the prior. A batch without the mark: today's loss."""
    import copy

    from ot_gradio.training.methods import get_method

    model = tiny_model()
    base = copy.deepcopy(model)
    cfg = config(training_method="LORA", text_encoder={"train": False},
                 concepts=[{"path": "a"}, {"path": "b", "type": "PRIOR_PREDICTION"}])
    method = get_method("LORA")
    params = [p for group in method.setup(model, cfg, CPU) for p in group.params]
    for p in params:  # lora_B starts at zero: make the LoRA change the prediction
        torch.nn.init.normal_(p, std=0.05)
    step = method.training_step(model, cfg, CPU, Precision(DataType.FLOAT_32, CPU), fixed())
    plain = step.loss(batch()).item()
    marked = batch()
    marked.prior_prediction = torch.tensor([True, False])
    model.unet.zero_grad()
    loss = step.loss(marked)
    loss.backward()
    grads = [p.grad.clone() for p in params]
    assert all(p.requires_grad for p in params)  # turning the LoRA off for the prior leaves it trainable

    b = batch()
    noise, t = fixed()(b.latents)
    noisy = model.add_noise(b.latents, noise, t)
    with torch.no_grad():
        prior = base.predict(noisy, t, base.encode_text(b.captions))
    target = model.prediction_target(b.latents, noise, t)
    model.unet.zero_grad()
    pred = model.predict(noisy, t, model.encode_text(b.captions))
    expected = torch.cat([(pred[:1] - prior[:1]) ** 2, (pred[1:] - target[1:]) ** 2]).mean()
    expected.backward()
    assert not torch.allclose(prior, pred.detach(), atol=1e-3)  # the LoRA changes the prediction
    assert plain == pytest.approx(torch.nn.functional.mse_loss(pred, target).item(), rel=1e-5)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5) and loss.item() < plain
    for got, p in zip(grads, params, strict=True):  # the prior is a constant: same gradients as the hand-made loss
        assert torch.allclose(got, p.grad, rtol=1e-4, atol=1e-7)


def test_masked_prior_preservation_needs_a_base_model():
    from ot_gradio.training.methods import get_method

    cfg = config(training_method="FINE_TUNE", masked_training=True, masked_prior_preservation_weight=0.5)
    with pytest.raises(ValueError, match="^masked_prior_preservation_weight:"):
        get_method("FINE_TUNE").training_step(tiny_model(), cfg, CPU, Precision(DataType.FLOAT_32, CPU))
    cfg = config(training_method="FINE_TUNE", concepts=[{"path": "a", "type": "PRIOR_PREDICTION"}])
    with pytest.raises(ValueError, match=r"^concepts\[0\].type:"):
        get_method("FINE_TUNE").training_step(tiny_model(), cfg, CPU, Precision(DataType.FLOAT_32, CPU))


def test_loss_weight_function_in_a_step(model):
    with torch.no_grad():
        plain = DiffusionStep(model, config(), CPU, Precision(DataType.FLOAT_32, CPU), fixed(20)).loss(batch())
        step = DiffusionStep(model, config(loss_weight_fn="MIN_SNR_GAMMA", loss_weight_strength=1.0), CPU, Precision(DataType.FLOAT_32, CPU), fixed(20))
        weighted = step.loss(batch())
    ac = model.noise_scheduler.alphas_cumprod[20].item()
    assert weighted.item() == pytest.approx(plain.item() * min(ac / (1 - ac), 1.0) / (ac / (1 - ac)), rel=1e-5)


@pytest.mark.parametrize(("scaler", "processes", "factor"), [("NONE", 1, 1), ("BATCH", 1, 2), ("GRADIENT_ACCUMULATION", 1, 3),
                                                           ("BOTH", 1, 6), ("GLOBAL_BATCH", 4, 8), ("GLOBAL_BOTH", 4, 24)])
def test_loss_scaler_multiplies_the_step_loss(model, scaler, processes, factor):
    from ot_gradio.training.distributed import Distributed

    sizes = {"batch_size": 2, "gradient_accumulation_steps": 3}
    with torch.no_grad():
        plain = DiffusionStep(model, config(**sizes), CPU, Precision(DataType.FLOAT_32, CPU), fixed()).loss(batch())
        step = DiffusionStep(model, config(loss_scaler=scaler, **sizes), CPU, Precision(DataType.FLOAT_32, CPU), fixed(),
                             dist=Distributed(world=processes))
        scaled = step.loss(batch())
    assert scaled.item() == pytest.approx(plain.item() * factor, rel=1e-6)


def test_step_draws_timesteps_and_perturbed_noise_from_the_config(model):
    cfg = config(
        min_noising_strength=0.25, max_noising_strength=0.5, timestep_distribution="SIGMOID", noising_weight=20.0,
        perturbation_noise_weight=0.1, offset_noise_weight=0.1, generalized_offset_noise=True,
    )
    step = DiffusionStep(model, cfg, CPU, Precision(DataType.FLOAT_32, CPU))
    t, noisy, target = step.noise(torch.zeros(256, 4, 8, 8))
    assert int(t.min()) >= 250 and int(t.max()) < 500
    assert t.float().mean().item() > 430  # SIGMOID with a large weight favours the noisy end; uniform would give 375
    assert (noisy - target).std().item() == pytest.approx(0.1, rel=0.1)
    assert step.schedule.psi is not None and step.schedule.psi.shape == (1000,)


def test_kohyas_noise_options_reach_the_steps_noise(model):
    step = DiffusionStep(model, config(multires_noise_iterations=8, multires_noise_discount=0.8), CPU, Precision(DataType.FLOAT_32, CPU))
    _, noisy, _ = step.noise(torch.zeros(64, 4, 16, 16))
    assert (noisy.mean(dim=(-2, -1)).var() / noisy.var()).item() > 0.05  # coarse noise: white noise's share is ~0.004
    torch.manual_seed(0)
    step = DiffusionStep(model, config(perturbation_noise_weight=0.2, perturbation_noise_random_strength=True), CPU,
                         Precision(DataType.FLOAT_32, CPU))
    strengths = [(lambda d: (d[1] - d[2]).std().item())(step.noise(torch.zeros(8, 4, 8, 8))) for _ in range(20)]
    assert max(strengths) < 0.25 and min(strengths) < 0.1  # drawn in [0, 0.2] each step, not always 0.2
    latents = torch.zeros(32, 4, 8, 8)
    latents[:, 1] = 5.0  # one channel far from 0: its offset is raised by 0.5 x 5
    step = DiffusionStep(model, config(offset_noise_weight=0.01, adaptive_noise_scale=0.5), CPU, Precision(DataType.FLOAT_32, CPU))
    _, noisy, _ = step.noise(latents)
    means = noisy.mean(dim=(-2, -1))  # [B, C]: white noise's mean is ~0.125 std, the offset's 2.5 in channel 1
    assert means[:, 1].std().item() > 1.0 and means[:, 0].std().item() < 0.5


def test_clip_skip_reaches_training_and_sampling(model, monkeypatch):
    ids = model.tokenize(["a red circle"])
    configure_model(model, config(text_encoder_layer_skip=1), CPU, Precision(DataType.FLOAT_32, CPU))
    try:
        with torch.no_grad():
            trained_on = model.encode_text(["a red circle"])["encoder_hidden_states"]
            assert torch.equal(trained_on, model.encode_prompt(ids, layer_skip=1))
            assert not torch.equal(trained_on, model.encode_prompt(ids))
        seen = {}
        import diffusers

        def fake_call(self, **kwargs):
            seen.update(kwargs)
            raise RuntimeError("stop here")

        monkeypatch.setattr(diffusers.StableDiffusionPipeline, "__call__", fake_call)
        with pytest.raises(RuntimeError, match="stop here"):
            model.sample("a red circle", height=32, width=32, steps=1)
        # the prompt reaches the pipeline encoded as in training (the pipeline's own clip_skip
        # reads text_encoder.text_model, which transformers' CLIPTextModel no longer has)
        assert torch.equal(seen["prompt_embeds"], trained_on) and "clip_skip" not in seen
        monkeypatch.undo()
        assert model.sample("a red circle", height=32, width=32, steps=1).size == (32, 32)  # the real pipeline, clip skip on
    finally:
        configure_model(model, config(), CPU, Precision(DataType.FLOAT_32, CPU))


# --- circular padding --------------------------------------------------------------------------


def test_circular_padding_tiles_training_sampling_and_the_lora(tmp_path):
    """With circular padding the UNet commutes with a wrap-around shift of the latents (what makes
    samples tile), its LoRA's down convolutions pad alike, sampling runs and the LoRA saves as usual."""
    from safetensors import safe_open

    from ot_gradio.training.lora_variants import ADAPTER_NAME
    from ot_gradio.training.methods import get_method

    def lora_keys(model, cfg, name):
        method = get_method("LORA")
        method.setup(model, cfg, CPU)
        with safe_open(str(method.save(model, cfg, tmp_path / name, {})), framework="pt") as f:
            return set(f.keys())

    x, t, hidden = torch.randn(1, 4, 16, 16), torch.tensor([300]), torch.randn(1, 77, 32)
    shifted = x.roll(8, dims=-1)  # the tiny UNet halves the latents once: a shift by 8 stays on its grid
    plain, model = tiny_model(), tiny_model()
    lora = {"training_method": "LORA", "output_model_format": "KOHYA_LORA", "lora_rank": 2}
    configure_model(plain, config(**lora), CPU, Precision(DataType.FLOAT_32, CPU))
    cfg = config(force_circular_padding=True, **lora)
    configure_model(model, cfg, CPU, Precision(DataType.FLOAT_32, CPU))
    for part in ("unet", "vae"):
        convs = [m for m in getattr(model, part).modules() if isinstance(m, torch.nn.Conv2d)]
        assert convs and all(m.padding_mode == "circular" for m in convs)
    with torch.no_grad():
        tiled = model.predict(shifted, t, hidden) - model.predict(x, t, hidden).roll(8, dims=-1)
        cut = plain.predict(shifted, t, hidden) - plain.predict(x, t, hidden).roll(8, dims=-1)
    assert tiled.abs().max() < 1e-4 < cut.abs().max()

    assert lora_keys(model, cfg, "circular.safetensors") == lora_keys(plain, config(**lora), "plain.safetensors")
    downs = [m.lora_A[ADAPTER_NAME] for m in model.unet.modules() if isinstance(getattr(m, "base_layer", None), torch.nn.Conv2d)]
    assert downs and all(d.padding_mode == "circular" for d in downs)
    assert model.sample("a cat", height=64, width=64, steps=2).size == (64, 64)


def test_masked_step_with_the_mask_augmentations(model, tmp_path):
    """A masked-training step on a batch whose masks were shrunk, turned and cut (data/mask_augment.py)."""
    from PIL import Image

    from ot_gradio.config.concept import ConceptConfig
    from ot_gradio.data import build_dataset

    for name in ("a", "b"):
        Image.new("RGB", (160, 96), (20, 60, 200)).save(tmp_path / f"{name}.png")
        mask = Image.new("L", (160, 96), 0)
        mask.paste(255, (100, 20, 140, 60))
        mask.save(tmp_path / f"{name}-masklabel.png")
    image = {"enable_random_circular_mask_shrink": True, "enable_random_mask_rotate_crop": True}
    concept = ConceptConfig(name="c", path=str(tmp_path), image=image)
    batch = build_dataset([concept], "64", 2, masked_training=True, bucketing=Bucketing(enabled=False)).epoch_batches(0)[0]
    assert batch.pixels.shape == (2, 3, 64, 64) and 0.05 < batch.mask.mean() < 0.95
    cfg = config(masked_training=True, unmasked_weight=0.0, unmasked_probability=0.0)
    loss = DiffusionStep(model, cfg, CPU, Precision(DataType.FLOAT_32, CPU), fixed()).loss(batch)
    assert torch.isfinite(loss) and loss.item() > 0


def test_a_cuda_run_keeps_cudnn_attention_out_of_sdp():
    """On CUDA the run's process takes PyTorch's cuDNN attention kernel out of SDP's choice (its
    backward failed in a Flux step on an H200: models/attention.keep_cudnn_attention_off); a CPU
    run leaves the flag as it is."""
    previous = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        configure_model(tiny_model(), config(), CPU, Precision(DataType.FLOAT_32, CPU))
        assert torch.backends.cuda.cudnn_sdp_enabled()
        cuda = torch.device("cuda")  # nothing moves there: configure_model only sets the model's options
        configure_model(tiny_model(), config(), cuda, Precision(DataType.FLOAT_32, cuda))
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(previous)
