"""The run's set-up, before the first step: the device and precision, the model and its
training method, offloading, the memory planner's checkpointing decision, the dataset with its
latent and text caches, the parts parked in RAM, then the optimizer, scheduler, intervals,
TensorBoard and the resume. `Trainer` (trainer.py) inherits it and runs the steps.
"""

from __future__ import annotations

import contextlib
import math
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..config.doctor import only_cache_problem
from ..config.enums import EMAMode
from ..config.families import family_info
from ..config.include_parts import excluded_parts
from ..config.lr_schedules import warmup_steps
from ..config.optimizer import SCHEDULE_FREE
from ..models.civitai_download import unpinned_version_note
from ..models.civitai_download import use_token as use_civitai_token
from ..models.common import base_model_source, base_module
from .async_reduce import AsyncGradientReducer
from .caption_window import window_warnings
from .debug_output import debug_writer
from .device import Precision, channels_last_on_cpu, resolve_device
from .diffusion import check_quantized_parts_frozen, configure_model
from .distributed import Distributed
from .ema import EMA
from .embeddings import caption_warnings
from .fp16_fallback import part_load_dtypes
from .intervals import Every
from .lora_forward import cast_once_layers
from .masking import conditions_on_images, condlabel_images
from .methods import get_method
from .norm_casts import affine_norms
from .optimizers import create_optimizer, fused_back_pass, parameter_names
from .param_groups import all_params, optimizer_groups, scale_learning_rates
from .placement import Placement, fill_text_cache
from .preflight import TrainingError, check_concepts, check_writable
from .resume_damaged import resume_past_damaged
from .resume_plan import say_plan_change
from .schedulers import create_scheduler
from .start_files import fetch_start_files
from .unit_scales import skip_unit_divisions
from .validation import setup_validation

if TYPE_CHECKING:
    from ..models.base import ModelFamily

# the most RAM the text encoders' outputs take once they stop training mid-run (a quarter of the free RAM when less)
MEMORY_TEXT_CACHE_BYTES = 4 * 2**30


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


class TrainerSetup:
    """The set-up half of `Trainer`: its attributes are the trainer's (trainer.py's __init__)."""

    def setup(self) -> None:
        from ..models.registry import get_family  # noqa: PLC0415

        cfg = self.config
        if problem := only_cache_problem(cfg):
            raise TrainingError(problem)
        check_concepts(cfg)
        check_writable(cfg, self.paths.backup)
        self.device, warning = resolve_device(cfg.train_device)
        if warning:
            self.report.warning(warning)
        self.dist = Distributed.from_env(self.device.type)
        if self.dist.active and self.device.type == "cuda":  # one GPU per process, in CUDA_VISIBLE_DEVICES order
            self.device = torch.device("cuda", self.dist.local_rank)
            torch.cuda.set_device(self.device)
        if self.dist.active and cfg.optimizer.fused_back_pass:
            raise TrainingError("optimizer.fused_back_pass: it steps each weight inside the backward pass, before the "
                                "gradients of the other GPUs arrive; turn it off for multi-GPU training")
        self.precision = Precision(cfg.train_dtype, self.device, cfg.enable_autocast_cache)
        self.defer_loss_reads = self.device.type != "cpu" and not self.dist.active
        if self.precision.note:
            self.report.warning(self.precision.note)

        self.report.status("loading", f"loading {cfg.base_model_name}")
        family = get_family(cfg.model_type)
        dtypes = part_load_dtypes(cfg, family, family_info(cfg.model_type).parts, self.device, self.precision.dtype)
        with self.dist.main_first():  # multi-GPU: one process downloads (or builds) the model, then the others load it
            hub = {"cache_dir": cfg.huggingface_cache_dir or None, "offline": cfg.offline_mode,
                   "token": cfg.secrets.huggingface_token or None}
            use_civitai_token(cfg.secrets.civitai_token)  # a Civitai address downloads with the run's key
            with self._download_watch(cfg, hub):
                # a Hugging Face file or Civitai address: its file, downloaded
                source = base_model_source(cfg.base_model_name, **hub, model_type=cfg.model_type.value)
                self.model: ModelFamily = family.load(
                    source,
                    **hub,
                    dtypes=dtypes,
                    part_models={part: getattr(cfg, part).model_name for part in family_info(cfg.model_type).parts},
                    **({"excluded": excluded} if (excluded := excluded_parts(cfg)) else {}),  # include: false
                )
                try:  # a LoRA or embeddings to start from that download: fetched here, in the watch, on the main process first
                    fetch_start_files(cfg)
                except ValueError as e:
                    raise TrainingError(str(e)) from e
        if self.dist.is_main and self.model.text_encoder_files:  # the text encoders read from files of their own
            for part in self.model.text_encoder_names:
                if name := str(getattr(cfg, part).model_name or "").strip():
                    print(f"{part}: {type(getattr(self.model, part)).__name__} read from {name}", flush=True)
        if self.dist.is_main and (note := unpinned_version_note(cfg.base_model_name, source)):
            self.report.warning(note)
        # seeded after loading: building or converting a model may draw random numbers (the tiny
        # models are built on first use), and the run must not depend on whether that happened
        seed_everything(cfg.seed)
        try:
            # quantized parts (FLOAT_8, INT_8, W8A8...) are converted while still in RAM and reach the card
            # already small: moved first, a Flux transformer would sit there whole (24 GB in bf16)
            for warning in configure_model(self.model, cfg, self.device, self.precision):
                self.report.warning(warning)
            self.model.to(self.device)
            self.method = get_method(cfg.training_method)
            self.param_groups = self.method.setup(self.model, cfg, self.device)
            self.precision.scale_gradients_of(p for g in self.param_groups for p in g.params if p.requires_grad)
            if self.precision.dtype == torch.float16 and self.device.type == "cuda" and self.precision.scaler is None:
                self.report.warning("train_dtype: FLOAT_16 without loss scaling, as OneTrainer: some trained weights are not "
                                    "float32 (a FLOAT_16 or BFLOAT_16 part or LoRA weight type), and tiny float16 gradients may "
                                    "round to 0; BFLOAT_16 needs no scaling")
            scale_learning_rates(self.param_groups, cfg, self.dist.world)
            check_quantized_parts_frozen(self.model, cfg)
        except ValueError as e:
            raise TrainingError(str(e)) from e
        if not any(g.trains for g in self.param_groups):
            raise TrainingError(
                "nothing to train: enable training for "
                + " or ".join(part.replace("_", " ") for part in (self.model.denoiser, *self.model.text_encoder_names))
            )
        self.trained_params = all_params(self.param_groups)
        # a part due to stop before the first step (ALWAYS, or after 0) is frozen now, so that what follows (the text
        # cache, which parts wait in RAM, the memory plan) sees it frozen; a resumed run's later stops come after the resume
        trained = sorted(g.name for g in self.param_groups if g.trains)
        self._stop_parts_if_due()
        if not any(g.trains for g in self.param_groups):
            raise TrainingError(f"nothing to train: {', '.join(trained)} would stop training before the first step "
                                "(stop_training_after 0, or stop_training_after_unit ALWAYS); set a later stop")
        self.dist.broadcast_parameters(self.trained_params)  # every process starts from the same weights
        if self.dist.active and cfg.async_gradient_reduce:
            self.async_reduce = AsyncGradientReducer(self.dist, cfg.gradient_reduce_precision, cfg.fused_gradient_reduce,
                                                     cfg.async_gradient_reduce_buffer)
        self._set_train_modes()
        self._install_offloading()
        # which frozen parts wait in RAM while the steps run (placement.py); the planner counts them there
        self.placement = Placement.for_run(self.model, cfg, self.device, self.param_groups, self.method.embeddings is not None,
                                            step_parts=self.method.step_parts)
        self.text_cache_off_reason = self.placement.text_cache_off_reason
        self.diffusion = self.method.training_step(self.model, cfg, self.device, self.precision, self.noise_fn, dist=self.dist)
        # the memory planner's probe runs the denoiser on meta tensors in a thread of its own
        # while the VAE caches latents here (it draws no random numbers this thread draws)
        decision = None if cfg.only_cache else self._start_checkpointing_decision()  # only_cache: no step to plan
        self.report.status("caching", "scanning concepts and caching latents")
        # Encoding samples the latent distribution with its own generator, so the training noise
        # does not depend on how much of the cache was already filled.
        encode_rng = torch.Generator().manual_seed(cfg.seed)
        # every process plans the same global batches of batch_size x processes and trains its slice;
        # the main process fills the caches first, the others then read them
        self.global_batch_size = cfg.batch_size * self.dist.world
        try:
            with self.dist.main_first():
                self._build_dataset(encode_rng)
                self._setup_text_cache()
        finally:
            if decision is not None:
                decision.wait()
        if cfg.only_cache:  # train() fills the text cache and ends the run
            return
        self._finish_checkpointing_decision(decision)
        if cfg.compile:
            self._compile_denoiser()
        # LoRA weights cast once a step (lora_forward.step_casts); not under compile, which fuses
        # the casts itself, nor across processes, whose gradient hooks start reducing during the backward
        parts = list(self.model.parts.values())
        self.cast_once = [] if cfg.compile or self.dist.active else cast_once_layers(parts)
        if getattr(self.diffusion, "text_cache", None) is not None:
            self._drop_text_encoder_casts()  # no step runs them
        self.frozen_norms = [] if cfg.compile or self.dist.active else affine_norms(parts)  # norm_casts.py
        if not cfg.compile:
            skip_unit_divisions(parts)  # ResNet and attention outputs divided by 1.0: unit_scales.py
        self.ema = None
        if cfg.ema != EMAMode.OFF:
            ema_device = self.device if cfg.ema == EMAMode.GPU else torch.device("cpu")
            self.ema = EMA(self.trained_params, cfg.ema_decay, cfg.ema_update_step_interval, ema_device)
        for warning in self.dataset.warnings:
            self.report.warning(warning)
        self._warn_never_trained()
        self.validator = setup_validation(self._run_state())  # validation.py: held-out images' loss, when on
        self._park_parts()
        self.diffusion.debug = debug_writer(self._run_state(), self.placement, lambda: self.counters.global_step + 1)  # debug_mode
        self.steps_per_epoch = self.dataset.steps_per_epoch
        self._setup_steps()

    def _build_dataset(self, encode_rng: torch.Generator) -> None:
        from ..data import build_dataset  # noqa: PLC0415
        from ..data.buckets import Bucketing  # noqa: PLC0415
        from ..data.video import run_sampling  # noqa: PLC0415
        from .vae_advice import nonfinite_latents_hint  # noqa: PLC0415

        cfg = self.config
        # while caching, the VAE runs channels-last on CPU (device.py); without the cache it encodes at every step as loaded
        with channels_last_on_cpu(self.model.parts.get("vae") if cfg.latent_caching else None, self.device) as layout:
            self.dataset = build_dataset(
                cfg.concepts,
                cfg.resolution,
                self.global_batch_size,
                # the sizes the denoiser needs (PixArt: patch x VAE = 16 px) and the config's bucket options
                bucketing=Bucketing.from_config(cfg, self.model.bucket_step),
                latent_caching=cfg.latent_caching and not self.method.needs_pixels,
                cache_dir=cfg.cache_dir,
                vae_id=self.model.vae_id,
                seed=cfg.seed,
                encode_fn=lambda pixels: self.model.encode_images(layout(pixels), generator=encode_rng).contiguous(),
                clear_cache=cfg.clear_cache_before_training and self.dist.is_main,
                # inpainting models with masked training or -condlabel images: the conditioning images' latents are cached
                # too (depth models: depth maps)
                conditioning_fn=self.model.encode_conditioning if self.model.caches_conditioning(conditions_on_images(cfg)) else None,
                conditioning_kind=self.model.conditioning_kind,
                progress=lambda done, total: self.report.progress(phase="caching", done=done, total=total),
                threads=cfg.dataloader_threads,
                frames=run_sampling(cfg, self.model.frame_step),  # a video family reads clips
                control=self.model.control_image,  # an image-conditioned family trains on (image, -control image) pairs
                depth=self.model.depth_maps,  # a depth model reads an image's -depth map where there is one
                masked_training=cfg.masked_training,  # the concepts' mask augmentations apply
                condlabel=condlabel_images(cfg, self.model),  # custom_conditioning_image: an image's -condlabel image
                nonfinite_hint=nonfinite_latents_hint(self.model, cfg),  # NaN latents: the VAE's type, what to change
            )
        if self.model.control_image:  # samples without a control image of their own edit the first pair's
            self.model.default_control_image = str(self.dataset.concepts[0].items[0].control_path)
        share = self.model.image_to_video_share  # a text-to-video model's image-to-video clips (Wan 2.2 TI2V 5B, LTX-2)
        if self.model.image_to_video or share >= 1:  # samples without an image of their own start from the first clip's first frame
            self.model.default_control_image = str(self.dataset.concepts[0].items[0].path)
        if share > 0 and all(item.sampling is None for concept in self.dataset.concepts for item in concept.items):
            self.dataset.warnings.append(
                f"image_to_video_share is {share:g} but every training item is an image: images train text-to-video only "
                "(nothing follows their one frame). Add clips to train image-to-video.")
        embeddings = getattr(self.method, "embeddings", None)
        self.dataset.warnings += caption_warnings(embeddings, self.dataset.concepts)
        self.dataset.warnings += window_warnings(
            self.model.tokenizers,
            ((i.path, concept.text.frame(c)) for concept in self.dataset.concepts for i in concept.scan.items for c in i.captions),
            self.method.transform_text, [e.placeholder for e in embeddings.items if e.trains] if embeddings is not None else [],
            windows=getattr(self.model, "caption_windows", 1), can_widen=hasattr(self.model, "caption_windows"))
        if self.model.image_to_video:
            stills = sum(item.sampling is None for concept in self.dataset.concepts for item in concept.items)
            if stills:
                self.dataset.warnings.append(
                    f"{stills} image(s) train as one-frame clips that start from themselves: an image-to-video model learns "
                    "little from them beyond copying the start. Train on clips; a look or a character shows in clips too.")

    def _setup_steps(self) -> None:
        """Step counts, optimizer, scheduler, intervals, TensorBoard and the resume."""
        cfg = self.config
        accum = cfg.gradient_accumulation_steps
        batches = [self.dataset.steps_in_epoch(e) for e in range(cfg.epochs)]
        self.total_steps = sum(max(1, math.ceil(n / accum)) if n else 0 for n in batches)
        self._say_empty_epochs(batches)

        warmup = 0 if cfg.optimizer.optimizer in SCHEDULE_FREE else warmup_steps(cfg.learning_rate_warmup_steps, self.total_steps)
        self.optimizer = create_optimizer(optimizer_groups(self.param_groups), cfg.optimizer, self.device,
                                          names=parameter_names(self.model.parts), model_type=cfg.model_type, warmup_steps=warmup)
        if self.dist.is_main:
            print(f"optimizer {cfg.optimizer.optimizer.value}: {self.optimizer.step_kernel}", flush=True)
        self.optimizer = fused_back_pass(self.optimizer, optimizer_groups(self.param_groups), cfg, self.device, self.precision.scaler,
                                         warmup_steps=warmup)
        for offload in self.layer_offload:  # offloaded trained weights go back to RAM after their fused step
            offload.return_trained_after_steps()
        self.scheduler = create_scheduler(
            self.optimizer,
            cfg.learning_rate_scheduler,
            self.total_steps,
            cfg.learning_rate_warmup_steps,
            cfg.learning_rate_cycles,
            cfg.learning_rate_min_factor,
            config=cfg, steps_per_epoch=self.steps_per_epoch,
        )
        self.sample_every = Every(cfg.sample_after, cfg.sample_after_unit, cfg.sample_skip_first)
        self.backup_every = Every(cfg.backup_after, cfg.backup_after_unit)
        self.save_every = Every(cfg.save_every, cfg.save_every_unit, cfg.save_skip_first)
        if cfg.tensorboard and self.paths.tensorboard is not None and self.dist.is_main:
            from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415

            self._tb = SummaryWriter(str(self.paths.tensorboard))
        if cfg.continue_last_backup and (resumed := resume_past_damaged(self._run_state)) is not None:
            self.counters, self.ema = resumed.counters, resumed.ema
            say_plan_change(resumed, cfg, self.dataset.steps_in_epoch, self.report)  # a backup of another data plan
        self._stop_parts_if_due()
        self.dist.sync_random_state()  # multi-GPU: every process draws the main process's numbers from here on

    def _setup_text_cache(self) -> None:
        """With latent caching on and no text encoder (nor embedding) training, text encoder
        outputs are cached by caption as OneTrainer does (data/text_cache.py says when not)."""
        from ..data.text_cache import TextEmbeddingCache, text_encoder_id  # noqa: PLC0415

        cfg = self.config
        if self.text_cache_off_reason is not None:  # placement.py asked text_cache_problem
            return
        cache = TextEmbeddingCache(Path(cfg.cache_dir) / "text", text_encoder_id(self.model, self.precision.dtype))
        if cfg.clear_cache_before_training and self.dist.is_main:
            cache.clear()
        self.diffusion.text_cache = cache

    def _cache_frozen_text(self) -> None:
        """Every text encoder has stopped training (`stop_training_after`) in a run that could not
        cache their outputs while they trained: from now on each caption's output is kept in RAM
        (data/text_cache.MemoryTextCache) where the captions allow a cache at all (text_cache_problem),
        and the encoders run once per caption, not at every step. Their LoRA layers leave the step's
        casts, as they no longer run in a step."""
        from ..data.text_cache import MemoryTextCache, text_cache_problem  # noqa: PLC0415
        from .memory_plan import free_memory  # noqa: PLC0415

        step = getattr(self, "diffusion", None)  # (none yet when a part is frozen before the first step)
        if (getattr(step, "text_cache", True) is not None or self.trained_text_parts
                or not any(g.model_part in self.model.text_encoder_names for g in self.param_groups)):
            return  # cached already, a step reading no text, an encoder still training, or none has trained
        cfg = self.config
        if text_cache_problem(latent_caching=cfg.latent_caching, trained_text_parts=(), concepts=cfg.concepts,
                              uses_embeddings=self.method.embeddings is not None, reads_images=self.model.control_image):
            return
        ram = free_memory(torch.device("cpu"))
        step.text_cache = MemoryTextCache("frozen in this run", min(MEMORY_TEXT_CACHE_BYTES, (ram or MEMORY_TEXT_CACHE_BYTES) // 4))
        if getattr(self, "validator", None) is not None:
            self.validator.step.text_cache = step.text_cache
        self._drop_text_encoder_casts()
        print(f"text cache: the text encoders no longer train; their outputs are kept in RAM by caption for the rest of the run "
              f"(up to {step.text_cache.limit_bytes / 2**30:.1f} GiB)", flush=True)

    def _drop_text_encoder_casts(self) -> None:
        """The text encoders' LoRA layers out of the step's casts (lora_forward.step_casts): their
        outputs are cached, so no step runs them."""
        encoders = {id(m) for part in self.model.text_encoder_names if part in self.model.parts for m in self.model.parts[part].modules()}
        self.cast_once = [layer for layer in self.cast_once if id(layer) not in encoders]

    def _park_parts(self) -> None:
        """The parts no training step runs go to RAM (placement.py), after the caches are filled:
        the text cache first gets every caption the training and validation data can give."""
        if self.placement.parks_text_encoders and self.diffusion.text_cache is not None:  # (a method step reading no text has none)
            sources = [(self.diffusion, self.dataset)]
            if self.validator is not None:
                sources.append((self.validator.step, self.validator.dataset))
            with self.dist.main_first(), self.precision.autocast():
                encoded = fill_text_cache(self.diffusion.text_cache, self.model.encode_text, sources)
            print(f"text cache: {encoded} caption(s) encoded before the text encoders leave {self.device}", flush=True)
        self.placement.park()
        if message := self.placement.message():
            print(message, flush=True)
            self.report.status("caching", message)

    def _start_checkpointing_decision(self) -> Any:
        """Gradient checkpointing per part: the denoiser always (it runs every step), a text encoder
        only while it trains (a frozen one keeps no activations anyway). ON/OFF as set; AUTO (the
        default) asks the memory planner: on only when the run would not fit without it. Its probe
        starts here, in a thread of its own (memory_plan.CheckpointingDecision)."""
        from .memory_plan import CheckpointingDecision  # noqa: PLC0415

        # a method's own step (FINE_TUNE_VAE) runs neither: no probe of a step that never runs
        parts = [self.model.denoiser, *sorted(self.trained_text_parts)] if self.method.step_parts is None else []
        settings = {part: getattr(self.config, part).gradient_checkpointing for part in parts}
        return CheckpointingDecision(self.model, self.config, self.device, self.precision, self.param_groups,
                                     self.trained_text_parts, settings, background=True, parked=self.placement.parked)

    def _download_watch(self, cfg: Any, hub: dict[str, Any]) -> contextlib.AbstractContextManager:
        """While the model loads, what it downloads into the hub cache as the run's status (download_watch.py):
        on the main process, when downloads are allowed."""
        from ..models.download_watch import watch_downloads  # noqa: PLC0415

        if not self.dist.is_main:
            return contextlib.nullcontext()
        return watch_downloads(lambda message, detail: self.report.status("loading", message, download=detail),
                               cfg.base_model_name, hub["cache_dir"], hub["offline"])

    def _finish_checkpointing_decision(self, decision: Any) -> None:
        """Checkpointing as decided; the log (stdout) and the events say what was chosen and why."""
        self.checkpointing, message, self.memory_plan = decision.finish()
        print(message, flush=True)
        self.report.status("caching", message)

    def _install_offloading(self) -> None:
        """The parts' `offload_fraction` / `activation_offloading` (offload.py): installed after the
        method's layers exist (only frozen weights are offloaded); the log and events say what."""
        from .offload import install_offloading  # noqa: PLC0415

        self.layer_offload, message = install_offloading(self.model, self.config, self.device)
        if message:
            print(message, flush=True)
            self.report.status("loading", message)

    def _compile_denoiser(self) -> None:
        """`compile`: torch.compile the denoiser in place (`nn.Module.compile`), after the method
        added its LoRA layers or embeddings. The module, its parameters and its state-dict keys
        stay as they are, so saving, backups and EMA see the same weights; it compiles during the
        first steps, and again for new shapes (another bucket, sampling). With offloading on the
        denoiser it is compiled block by block instead (offload.compile_blocks)."""
        from .offload import compile_blocks  # noqa: PLC0415

        module = self.model.parts[self.model.denoiser]
        module = base_module(module)
        offload = next((o for o in self.layer_offload if o.part == self.model.denoiser), None)
        if offload is None or not (offload.blocks or offload.activations):
            module.compile()
            return
        message = compile_blocks(module, offload)
        print(message, flush=True)
        self.report.status("caching", message)

    def _set_train_modes(self) -> None:
        """Parts with trained weights in train mode (dropout, checkpointing), the rest in eval."""
        trained = {id(p) for p in self.trained_params if p.requires_grad}
        for module in self.model.parts.values():
            module.train(any(id(p) in trained for p in module.parameters()))
        # a group's model part is where its weights live (an embedding's is its text encoder);
        # gradients must flow through that encoder
        self.trained_text_parts = frozenset(
            g.model_part for g in self.param_groups if g.model_part in self.model.text_encoder_names and g.trains
        )

    def _warn_never_trained(self) -> None:
        """Images whose aspect bucket can never fill a batch are never trained: say which."""
        summary = self.dataset.summary(self.global_batch_size)
        lost = [item["path"] for concept in summary["concepts"] for item in concept["never_trained"]]
        if lost:
            shown = ", ".join(Path(p).name for p in lost[:20]) + (f" and {len(lost) - 20} more" if len(lost) > 20 else "")
            self.report.warning(
                f"{len(lost)} image(s) will never be trained because their aspect bucket cannot fill a batch of "
                f"{self._batch_words()}: {shown}. Lower the batch size, add images of that shape, or crop them."
            )

    def _say_empty_epochs(self, batches: list[int]) -> None:
        """An epoch of a few samples (SAMPLES 2 across two aspect buckets) may fill no batch and
        train no step while others do: said, naming them; a run none of whose epochs trains is
        refused (build_dataset refuses one where no early epoch fills a batch)."""
        from ..data.errors import DataError  # noqa: PLC0415

        empty = [e + 1 for e, n in enumerate(batches) if not n]
        if not empty:
            return
        fix = "lower the batch size, raise Balancing or turn aspect ratio bucketing off"
        if len(empty) == len(batches):
            raise DataError(f"none of the run's {len(batches)} epoch(s) fills a batch of {self._batch_words()}: the samples of "
                            f"each epoch fall into aspect buckets too small for one, so nothing would train; {fix}")
        shown = ", ".join(map(str, empty[:20])) + (f" and {len(empty) - 20} more" if len(empty) > 20 else "")
        self.report.warning(f"{len(empty)} of the run's {len(batches)} epochs train no step (epoch {shown}): their samples fall "
                            f"into aspect buckets that fill no batch of {self._batch_words()}, and are left out; {fix} "
                            "for every epoch to train")

    def _batch_words(self) -> str:
        size = self.config.batch_size
        if not self.dist.active:
            return f"batch_size={size}"
        return f"batch_size={size} x {self.dist.world} processes = {self.global_batch_size}"
