"""Validation loss: the loss on held-out images (concepts of type VALIDATION), which are never
trained, computed every `validate_after` `validate_after_unit` when `validation` is on.

The number must be comparable across steps and across runs, so everything random in a training
step is fixed here: each validation image gets its own noise and timestep, drawn from generators
seeded by the run's seed and the image's place in the (seeded, epoch-0) order, and so is every
other draw of the step (which clips start from their first frame, image_to_video_share); caption
dropout and the unmasked-probability draw are off; dropout layers are in eval mode. It runs under
no_grad on the live weights, and leaves the training RNG untouched, so a run with validation
trains exactly the same steps as one without.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..config.enums import ConceptType
from .intervals import Every
from .loss import loss_scale
from .masking import conditions_on_images, condlabel_images

if TYPE_CHECKING:
    from .run_state import RunState

NUM_TIMESTEP_INDICES = 1000  # fixed draws are indices; flow families map them to t = (i + 1) / 1000
_SEED_OFFSET = 7_919  # keeps the validation draws apart from the training seed's own stream


def validation_concepts(config: Any) -> list[Any]:
    """The enabled VALIDATION concepts, as plain concepts the dataset builder reads."""
    return [
        c.model_copy(update={"type": ConceptType.STANDARD})
        for c in config.concepts
        if c.enabled and ConceptType(c.type) == ConceptType.VALIDATION
    ]


class FixedDraws:
    """noise_fn for DiffusionStep: the same noise and timesteps for the same validation batch."""

    def __init__(self, seed: int):
        self.seed = seed
        self.batch_index = 0

    def __call__(self, latents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed + _SEED_OFFSET + self.batch_index)
        noise = torch.randn(latents.shape, generator=gen)
        timesteps = torch.randint(0, NUM_TIMESTEP_INDICES, (latents.shape[0],), generator=gen)
        return noise, timesteps


class Validator:
    """Built by the trainer after its dataset; its `every` says when the trainer calls `run`."""

    def __init__(self, run: RunState):
        from ..data import build_dataset  # noqa: PLC0415
        from ..data.buckets import Bucketing  # noqa: PLC0415
        from ..data.video import run_sampling  # noqa: PLC0415
        from .vae_advice import nonfinite_latents_hint  # noqa: PLC0415

        cfg, model = run.config, run.model
        self.model = model
        self.every = Every(cfg.validate_after, cfg.validate_after_unit)
        self.dataset = build_dataset(
            validation_concepts(cfg),
            cfg.resolution,
            1,  # one image per batch: every held-out image counts, whatever its aspect bucket
            bucketing=Bucketing.from_config(cfg, model.bucket_step),
            latent_caching=cfg.latent_caching and not run.method.needs_pixels,
            cache_dir=cfg.cache_dir,
            vae_id=model.vae_id,
            seed=cfg.seed,
            encode_fn=lambda pixels: model.encode_images(pixels, generator=torch.Generator().manual_seed(cfg.seed)),
            held_out=True,
            conditioning_fn=model.encode_conditioning if model.caches_conditioning(conditions_on_images(cfg)) else None,
            conditioning_kind=model.conditioning_kind,
            frames=run_sampling(cfg, model.frame_step),
            control=model.control_image,
            depth=model.depth_maps,
            masked_training=cfg.masked_training,
            condlabel=condlabel_images(cfg, model),
            nonfinite_hint=nonfinite_latents_hint(model, cfg),
        )
        fixed = cfg.model_copy(deep=True)
        for part in model.text_encoder_names:
            getattr(fixed, part).dropout_probability = 0.0
        fixed.caption_dropout_probability = 0.0
        fixed.unmasked_probability = 0.0
        fixed.masked_prior_preservation_weight = 0.0  # as OneTrainer's validation: no prior prediction
        self.draws = FixedDraws(cfg.seed)
        self.step = run.method.training_step(model, fixed, run.device, run.precision, self.draws)  # its own objective
        self.step.loss_scale = loss_scale(cfg, run.dist.world)  # `loss_scaler` as in training (GLOBAL_*: the run's GPUs)
        self.step.text_cache = run.text_cache

    @property
    def image_count(self) -> int:
        return sum(len(b.image_paths) for b in self.dataset.epoch_batches(0))

    def loss(self) -> float:
        """The mean loss over every validation image, with the fixed draws."""
        parts = self.model.parts
        modes = {name: module.training for name, module in parts.items()}
        total, count = 0.0, 0
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            for module in parts.values():
                module.eval()
            try:
                for index, batch in enumerate(self.dataset.epoch_batches(0)):
                    self.draws.batch_index = index
                    torch.manual_seed(self.draws.seed + _SEED_OFFSET + index)  # the step's other draws (image-to-video clips)
                    n = len(batch.image_paths)
                    total += float(self.step.loss(batch, frozenset())) * n
                    count += n
            finally:
                for name, module in parts.items():
                    module.train(modes[name])
        return total / max(count, 1)

    def run(self, run: RunState) -> float:
        """Compute the loss and report it: events.jsonl ("validation"), TensorBoard, the log."""
        loss = self.loss()
        c = run.counters
        run.report.validation(loss=loss, global_step=c.global_step, epoch=c.epoch, images=self.image_count)
        if run.tensorboard is not None:
            run.tensorboard.add_scalar("loss/validation", loss, c.global_step)
        print(f"validation loss at step {c.global_step}: {loss:.6f}", flush=True)
        return loss


def setup_validation(run: RunState) -> Validator | None:
    """`validation` on with VALIDATION concepts: a Validator for the main process; otherwise None
    (with a warning when validation is on but there is nothing to validate on)."""
    cfg = run.config
    if not cfg.validation:
        return None
    if not validation_concepts(cfg):
        run.report.warning("validation is on but no enabled concept has the type VALIDATION: add one (held-out "
                           "images) on the Concepts tab; no validation loss is computed")
        return None
    if not run.dist.is_main:
        return None
    run.report.status("caching", "caching the validation images")
    return Validator(run)
