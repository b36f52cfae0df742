"""Training options in real (tiny) runs: EMA sampling, saving, backups and exact resume;
stop_training_after by step and by epoch with text encoder checkpointing and the noise and loss
options on; masked training with latent caching."""

import functools
import shutil

import pytest
import torch
from PIL import Image

from ot_gradio.config.io import load_config
from ot_gradio.data.buckets import Bucketing
from ot_gradio.training.backup import latest_backup, read_backup
from ot_gradio.training.lora_format import load_lora_file
from ot_gradio.training.lora_max_norm import delta_norm
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer


class Watch(Reporter):
    """Collects events; keeps a copy of the trained weights after every step; stops on request."""

    def __init__(self, stop_at=None):
        self.stop_at = stop_at
        self.trainer = None
        self.losses, self.samples, self.warnings, self.statuses, self.snapshots = [], [], [], [], []

    def metrics(self, **fields):
        self.losses.append(fields["loss"])
        if self.trainer is not None:
            self.snapshots.append({k: v.clone() for k, v in self.trainer.method.trainable_state(self.trainer.model).items()})

    def sample(self, **fields):
        self.samples.append(fields)

    def warning(self, message):
        self.warnings.append(message)

    def status(self, status, message=""):
        self.statuses.append((status, message))

    def requests(self):
        return {"stop"} if self.stop_at is not None and len(self.losses) >= self.stop_at else set()


def two_images(shapes, folder, mask=None):
    folder.mkdir()
    for image in sorted(p for p in shapes.iterdir() if p.suffix == ".png")[:2]:
        shutil.copy(image, folder / image.name)
        shutil.copy(image.with_suffix(".txt"), folder / image.with_suffix(".txt").name)
        if mask is not None:
            with Image.open(image) as img:
                Image.new("L", img.size, mask).save(folder / f"{image.stem}-masklabel.png")
    return folder


def run(data, run_dir, reporter, others=()):
    paths = RunPaths(run_dir / "samples", run_dir / "backup", run_dir / "save", None, [run_dir, *others])
    trainer = Trainer(load_config(data).config, paths, reporter)
    reporter.trainer = trainer
    trainer.setup()
    return trainer, trainer.train()


def part(state, name):
    return {k: v for k, v in state.items() if k.startswith(name + ".")}


def changed(a, b):
    return any(not torch.equal(a[k], b[k]) for k in a)


def test_ema_samples_saves_backs_up_and_resumes_exactly(lora_config, shapes, tmp_path):
    data = lora_config(
        concepts=[{"name": "two", "path": str(two_images(shapes, tmp_path / "two"))}],
        batch_size=1,
        epochs=2,
        ema="CPU",
        ema_decay=0.7,
        ema_update_step_interval=2,
        output_model_format="SAFETENSORS",
        samples=[{"prompt": "a red circle", "height": 64, "width": 64, "diffusion_steps": 2}],
    )
    report = Watch()
    straight, status = run(data, tmp_path / "straight", report)
    assert status == "done" and straight.counters.global_step == 4

    # sampled with the average and, with non_ema_sampling, with the live weights
    assert [s.get("ema") for s in report.samples] == [True, False]
    assert report.samples[1]["path"].endswith("-no-ema.jpg")
    straight.config.non_ema_sampling = False
    straight.sample()
    assert [s.get("ema") for s in report.samples[2:]] == [True]

    live = straight.method.trainable_state(straight.model)
    with straight.ema.applied(straight.trained_params):
        average = {k: v.clone() for k, v in straight.method.trainable_state(straight.model).items()}
    assert changed(live, average)
    saved = load_lora_file(tmp_path / "out" / "lora.safetensors").parts["unet"]
    assert saved and all(torch.equal(v, average[f"unet.{k}"]) for k, v in saved.items())

    backup = read_backup(latest_backup([tmp_path / "straight"]))
    assert all(torch.equal(a, b) for a, b in zip(backup.state["ema"]["weights"], straight.ema.weights, strict=True))

    first, status = run(data, tmp_path / "a", Watch(stop_at=3))
    assert status == "stopped" and first.counters.global_step == 3
    report = Watch()
    second, status = run({**data, "continue_last_backup": True}, tmp_path / "b", report, others=[tmp_path / "a"])
    assert status == "done" and any("continuing from backup" in m for _, m in report.statuses)
    resumed = second.method.trainable_state(second.model)
    assert all(torch.equal(live[k], resumed[k]) for k in live)
    assert all(torch.equal(a, b) for a, b in zip(straight.ema.weights, second.ema.weights, strict=True))


def test_stop_training_after_steps_and_epochs_with_noise_and_loss_options(lora_config, shapes, tmp_path):
    data = lora_config(
        concepts=[{"name": "two", "path": str(two_images(shapes, tmp_path / "two"))}],
        batch_size=1,
        epochs=3,
        text_encoder={"train": True, "stop_training_after": 1, "stop_training_after_unit": "STEP", "dropout_probability": 0.5,
                      "gradient_checkpointing": "ON"},  # explicit: the default AUTO turns it off on a roomy machine
        unet={"train": True, "gradient_checkpointing": False, "stop_training_after": 2, "stop_training_after_unit": "EPOCH"},
        force_v_prediction=True,
        rescale_noise_scheduler_to_zero_terminal_snr=True,
        loss_weight_fn="MIN_SNR_GAMMA",
        timestep_distribution="LOGIT_NORMAL",
        huber_strength=0.5,
        offset_noise_weight=0.1,
        generalized_offset_noise=True,
        perturbation_noise_weight=0.1,
        multires_noise_iterations=6,
        offset_noise_random_strength=True,
        adaptive_noise_scale=0.05,
        perturbation_noise_random_strength=True,
        lora_max_norm=0.02,
        lora_rank_dropout=0.1,
        lora_module_dropout=0.1,
        text_encoder_max_token_length=150,
        bucket_no_upscale=True,
        bucket_resolution_step=16,  # kohya's buckets, at the tiny model's 64 px
        min_bucket_resolution=32,
        max_bucket_resolution=128,
        attention_mechanism="DEFAULT",
        ema="GPU",
        ema_update_step_interval=1,
    )
    report = Watch()
    paths = RunPaths(tmp_path / "r" / "samples", tmp_path / "r" / "backup", tmp_path / "r" / "save", None, [])
    trainer = Trainer(load_config(data).config, paths, report)
    report.trainer = trainer
    trainer.setup()
    text_encoder = trainer.model.text_encoder
    assert getattr(text_encoder, "get_base_model", lambda: text_encoder)().is_gradient_checkpointing
    assert trainer.model.text_encoder.training and trainer.model.prediction_type == "v_prediction"
    before = {k: v.clone() for k, v in trainer.method.trainable_state(trainer.model).items()}
    assert trainer.train() == "done"

    assert len(report.losses) == 6 and all(torch.isfinite(torch.tensor(report.losses)))
    states = [before, *report.snapshots]
    te = [part(s, "text_encoder") for s in states]
    unet = [part(s, "unet") for s in states]
    assert changed(te[0], te[1]) and not any(changed(te[1], te[i]) for i in range(2, 7))
    assert all(changed(unet[i - 1], unet[i]) for i in range(1, 5))  # two epochs of two steps
    assert not changed(unet[4], unet[6])
    assert any("text_encoder: stopped training after 1 step" in w for w in report.warnings)
    assert any("unet: stopped training after 2 epoch" in w for w in report.warnings)
    assert not trainer.trained_text_parts and not trainer.model.text_encoder.training
    assert [s.get("ema") for s in report.samples] == [True, False]
    # bucket_no_upscale and kohya's buckets reached the data
    assert all(c.bucketing == Bucketing(no_upscale=True, kohya_step=16, min_side=32, max_side=128, quantization=8)  # SD 1.5: OneTrainer's 8 px
               for c in trainer.dataset.concepts)
    with torch.no_grad():  # max_token_length 150: the captions were read in two windows of 75
        assert trainer.model.encode_text(["a red circle"])["encoder_hidden_states"].shape[1] == 154
    # lora_max_norm: no layer's change (up @ down, alpha = rank) is above it, and the layers that grew most were capped
    state = trainer.method.trainable_state(trainer.model)
    norms = [delta_norm(state[k], state[k.replace("lora_A", "lora_B")], 1.0).item() for k in state if k.endswith("lora_A.weight")]
    assert max(norms) <= 0.02 * 1.0001 and max(norms) == pytest.approx(0.02, rel=1e-3)


def test_masked_training_with_latent_caching(lora_config, shapes, tmp_path):
    data = lora_config(
        concepts=[{"name": "masked", "path": str(two_images(shapes, tmp_path / "masked", mask=0))}],
        epochs=2,
        latent_caching=True,
        masked_training=True,
        unmasked_weight=0.0,
        unmasked_probability=0.0,
        text_encoder={"train": False},
        samples=[],
    )
    report = Watch()
    trainer, status = run(data, tmp_path / "run", report)
    assert status == "done"
    batch = trainer.dataset.epoch_batches(0)[0]
    assert batch.latents is not None and batch.mask is not None and batch.mask.max() == 0
    assert report.losses and all(loss == 0.0 for loss in report.losses)  # black masks: nothing to learn
    ups = [v for k, v in trainer.method.trainable_state(trainer.model).items() if "lora_B" in k]
    assert ups and all(v.abs().max() == 0 for v in ups)  # no gradient reached the LoRA
    text_encoder = trainer.model.text_encoder
    assert not getattr(text_encoder, "is_gradient_checkpointing", False)  # the frozen text encoder is not checkpointed


def test_a_prior_prediction_concept_trains_towards_the_base_model(lora_config, shapes, tmp_path):
    """Only a PRIOR_PREDICTION concept, with the text encoder's LoRA trained and latent caching on:
    the target is the prediction with the LoRA turned off, which a new LoRA (up weights zero) gives
    exactly, so every loss is 0 and no up weight moves. Against the images' own targets it is not."""
    data = lora_config(
        concepts=[{"name": "reg", "path": str(two_images(shapes, tmp_path / "reg")), "type": "PRIOR_PREDICTION"}],
        batch_size=1, epochs=2, latent_caching=True, samples=[],
    )
    report = Watch()
    trainer, status = run(data, tmp_path / "run", report)
    assert status == "done" and len(report.losses) == 4
    assert all(loss == 0.0 for loss in report.losses)
    assert trainer.trained_text_parts  # the prior re-encoded the captions with the text encoder's LoRA off
    ups = [v for k, v in trainer.method.trainable_state(trainer.model).items() if "lora_B" in k]
    assert ups and all(v.abs().max() == 0 for v in ups)
    batch = trainer.dataset.epoch_batches(0)[0]
    assert batch.prior_prediction.tolist() == [True]
    batch.prior_prediction = None  # the same batch with its own target
    with torch.no_grad():
        assert trainer.diffusion.loss(batch, trainer.trained_text_parts).item() > 0
    # the text encoder stopped (its LoRA frozen, its outputs cached in RAM): the prior still encodes without its
    # LoRA, so with the UNet's LoRA at zero the prediction differs from the prior by the text encoder's LoRA alone
    from ot_gradio.data.text_cache import MemoryTextCache

    for group in trainer.param_groups:
        if group.name == "text_encoder":
            group.freeze()
    text_ups = [p for name, p in trainer.model.text_encoder.named_parameters() if "lora_B" in name]
    with torch.no_grad():
        for p in text_ups:
            p.normal_(0.0, 0.5)
    batch.prior_prediction = torch.tensor([True])
    for cache in (None, MemoryTextCache("a test's", 2**20)):
        trainer.diffusion.text_cache = cache
        with torch.no_grad():
            assert trainer.diffusion.loss(batch, frozenset()).item() > 0


def test_compile_compiles_the_denoiser_in_place_and_trains_the_same(lora_config, shapes, tmp_path, monkeypatch, request):
    """`compile`: the UNet is compiled in place (same module, same keys in the saved LoRA) and a
    run trains as without it. torch.compile runs with dynamo's "eager" backend here: dynamo
    traces the UNet and runs its graphs, without inductor's C++ compile (17 minutes on this CPU)."""
    from safetensors.torch import load_file
    from torch._dynamo.utils import counters

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    # a failed trace must fail the test; torch's own patch, since monkeypatch's undo deletes the option
    # from dynamo's config (every later read of it then raises)
    strict = torch._dynamo.config.patch(suppress_errors=False)
    strict.__enter__()
    request.addfinalizer(lambda: strict.__exit__(None, None, None))
    folder = two_images(shapes, tmp_path / "two")
    results = {}
    for compiled in (False, True):
        data = lora_config(
            concepts=[{"name": "two", "path": str(folder)}], batch_size=1, epochs=1, compile=compiled,
            unet={"train": True, "gradient_checkpointing": True}, output_model_format="SAFETENSORS",
            output_model_destination=str(tmp_path / f"out-{compiled}" / "lora.safetensors"),
        )
        counters.clear()
        report = Watch()
        trainer, status = run(data, tmp_path / f"run-{compiled}", report)
        assert status == "done"
        unet = trainer.model.parts["unet"]
        assert (unet._compiled_call_impl is not None) is compiled
        assert (counters["frames"]["ok"] > 0) is compiled  # dynamo compiled the UNet's forward
        results[compiled] = (report.losses, load_file(tmp_path / f"out-{compiled}" / "lora.safetensors"))
    torch._dynamo.reset()  # later tests start without this test's compiled code
    (plain_losses, plain_lora), (losses, lora) = results[False], results[True]
    assert len(losses) == len(plain_losses) == 2
    assert torch.allclose(torch.tensor(losses), torch.tensor(plain_losses), atol=1e-5)
    assert lora.keys() == plain_lora.keys() and any("unet" in k for k in lora)
    assert all(torch.allclose(lora[k].float(), plain_lora[k].float(), atol=1e-5) for k in lora)
