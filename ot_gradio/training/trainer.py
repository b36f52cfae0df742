"""The training loop. It talks to a model family, a training method and the dataset through
their interfaces only, and reports everything through a `Reporter` (events, log, TensorBoard).

Where the training options live: the step's math (timesteps, noise, loss, masks, caption
dropout, prediction type, attention, quantized weights) in diffusion.py and the modules it names;
EMA in ema.py; train data type and autocast cache in device.py. The loop itself handles
`stop_training_after` per part (after each optimizer step and each epoch), gradient
checkpointing (UNet; text encoder when it trains), EMA sampling / saving / backups.
With several processes (multi-GPU, distributed.py) each trains its slice of every batch, the
gradients are averaged before each optimizer step, and only the main process samples and writes.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..config.doctor import only_cache_problem
from ..config.enums import EMAMode, TimeUnit
from ..config.families import family_info
from ..config.io import config_to_dict
from ..config.lr_schedules import warmup_steps
from ..config.optimizer import SCHEDULE_FREE
from ..config.schema import TrainConfig
from ..data.prefetch import LoadStats, prefetched
from ..models.common import base_module
from .backup import Counters, write_backup
from .debug_output import debug_writer
from .device import Precision, channels_last_on_cpu, resolve_device, weight_dtype
from .diffusion import check_quantized_parts_frozen, configure_model
from .distributed import Distributed
from .ema import EMA
from .intervals import Every
from .masking import conditions_on_images, condlabel_images
from .methods import get_method
from .optimizers import create_optimizer, fused_back_pass, optimizer_eval_mode, optimizer_train_mode, parameter_names
from .param_groups import all_params, optimizer_groups, scale_learning_rates
from .placement import Placement, fill_text_cache
from .preflight import TrainingError, check_concepts, check_writable
from .resume import resume_from_latest_backup
from .run_state import Reporter, RunPaths, RunState
from .samples import sample_during_training
from .schedulers import create_scheduler
from .step_log import LossLog, StepLog, check_finite
from .validation import setup_validation

if TYPE_CHECKING:
    from ..models.base import ModelFamily

# With `defer_loss_reads` (asynchronous devices), the loop reads the logged losses at most this often.
LOSS_READ_SECONDS = 1.0


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


class Trainer:
    def __init__(self, config: TrainConfig, paths: RunPaths, reporter: Reporter, noise_fn: Callable | None = None):
        self.config = config
        self.paths = paths
        self.report = reporter
        self.noise_fn = noise_fn  # tests pass fixed noise/timesteps here
        self.counters = Counters()
        self.stop_requested = False
        self._tb = None
        self.optimizer: Any = None  # made after the dataset and validation (_setup_steps)
        self.scheduler: Any = None
        self.data_stats = LoadStats()  # time the loop waited for batches
        self.dist = Distributed()  # setup joins the other processes of a multi-GPU run
        # Each step's loss is read from the device at once, or with `defer_loss_reads` (GPUs; not
        # with several processes, which average each step's loss anyway) later (`_read_losses`).
        self.defer_loss_reads = False
        self.losses = LossLog(reporter)

    # --- setup ------------------------------------------------------------------------------
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
        dtypes = {
            part: weight_dtype(getattr(cfg, part).weight_dtype, self.device, self.precision.dtype)
            for part in family_info(cfg.model_type).parts
        }
        with self.dist.main_first():  # multi-GPU: one process downloads (or builds) the model, then the others load it
            self.model: ModelFamily = family.load(
                cfg.base_model_name,
                cache_dir=cfg.huggingface_cache_dir or None,
                offline=cfg.offline_mode,
                token=cfg.secrets.huggingface_token or None,
                dtypes=dtypes,
                part_models={part: getattr(cfg, part).model_name for part in family_info(cfg.model_type).parts},
            )
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
        self.dist.broadcast_parameters(self.trained_params)  # every process starts from the same weights
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
        from ..data.video import run_sampling  # noqa: PLC0415

        cfg = self.config
        # while caching, the VAE runs channels-last on CPU (device.py); without the cache it encodes at every step as loaded
        with channels_last_on_cpu(self.model.parts.get("vae") if cfg.latent_caching else None, self.device) as layout:
            self.dataset = build_dataset(
                cfg.concepts,
                cfg.resolution,
                self.global_batch_size,
                aspect_ratio_bucketing=cfg.aspect_ratio_bucketing,
                latent_caching=cfg.latent_caching and not self.method.needs_pixels,
                cache_dir=cfg.cache_dir,
                vae_id=self.model.vae_id,
                seed=cfg.seed,
                encode_fn=lambda pixels: self.model.encode_images(layout(pixels), generator=encode_rng).contiguous(),
                clear_cache=cfg.clear_cache_before_training and self.dist.is_main,
                bucket_step=self.model.bucket_step,  # sizes the denoiser needs (PixArt: patch x VAE = 16 px)
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
            )
        if self.model.control_image:  # samples without a control image of their own edit the first pair's
            self.model.default_control_image = str(self.dataset.concepts[0].items[0].control_path)

    def _setup_steps(self) -> None:
        """Step counts, optimizer, scheduler, intervals, TensorBoard and the resume."""
        cfg = self.config
        accum = cfg.gradient_accumulation_steps
        self.total_steps = sum(
            max(1, math.ceil(self.dataset.steps_in_epoch(e) / accum)) for e in range(cfg.epochs)
        )

        warmup = 0 if cfg.optimizer.optimizer in SCHEDULE_FREE else warmup_steps(cfg.learning_rate_warmup_steps, self.total_steps)
        self.optimizer = create_optimizer(optimizer_groups(self.param_groups), cfg.optimizer, self.device,
                                          names=parameter_names(self.model.parts), model_type=cfg.model_type, warmup_steps=warmup)
        if self.dist.is_main:
            print(f"optimizer {cfg.optimizer.optimizer.value}: {self.optimizer.step_kernel}", flush=True)
        self.optimizer = fused_back_pass(self.optimizer, optimizer_groups(self.param_groups), cfg, self.device, self.precision.scaler,
                                         warmup_steps=warmup)
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
        if cfg.continue_last_backup and (resumed := resume_from_latest_backup(self._run_state())) is not None:
            self.counters, self.ema = resumed.counters, resumed.ema
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

    def _batch_words(self) -> str:
        size = self.config.batch_size
        if not self.dist.active:
            return f"batch_size={size}"
        return f"batch_size={size} x {self.dist.world} processes = {self.global_batch_size}"

    # --- the loop ---------------------------------------------------------------------------
    def train(self) -> str:
        """Run to the end or to a stop request. Returns 'done' or 'stopped'."""
        cfg = self.config
        if cfg.only_cache:
            return self._only_cache()
        self.report.status("training", "")
        self.losses.start(self.counters.global_step, cfg.epochs, self.steps_per_epoch, self.total_steps, self._tb)
        accum = cfg.gradient_accumulation_steps
        optimizer_train_mode(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        while self.counters.epoch < cfg.epochs and not self.stop_requested:
            batches = self.dataset.epoch_batches(self.counters.epoch, shard=self.dist.shard)
            images = 0
            # the next batches load in `dataloader_threads` threads while this one trains (data/prefetch.py)
            for index, batch in prefetched(batches, self.counters.epoch_step, cfg.dataloader_threads, stats=self.data_stats):
                images += len(batch.image_paths)
                loss = self._forward_backward(batch, accum)
                self.counters.epoch_step = index + 1
                if self.counters.epoch_step % accum == 0 or self.counters.epoch_step == len(batches):
                    self._optimizer_step()
                    self.counters.global_step += 1
                    self._stop_parts_if_due()
                    self.losses.add(self._step_log(loss, batch.image_paths))
                    if not self.defer_loss_reads or time.monotonic() - self.losses.last_read >= LOSS_READ_SECONDS:
                        self._read_losses()
                    self._after_step()
                if self.stop_requested:
                    break
            if self.dist.active:  # in log.txt: together the processes train every image once per epoch
                print(f"process {self.dist.rank}/{self.dist.world}: epoch {self.counters.epoch + 1}: trained {images} images", flush=True)
            if self.counters.epoch_step >= len(batches):
                self.counters.epoch += 1
                self.counters.epoch_step = 0
                self._stop_parts_if_due()
                self._after_epoch()
        return self._finish()

    def _only_cache(self) -> str:
        """`only_cache`: setup filled the latent cache; here the text cache gets every caption a
        step can ask for (when it is on), then the run ends as done: no step, no model written."""
        texts = 0
        for warning in self.dataset.warnings:
            self.report.warning(warning)
        if self.diffusion.text_cache is not None:
            with self.dist.main_first(), self.precision.autocast():
                texts = fill_text_cache(self.diffusion.text_cache, self.model.encode_text, [(self.diffusion, self.dataset)])
        report = self.dataset.cache_report
        message = (f"only_cache: cache filled in {self.config.cache_dir} ({report.encoded} latent(s) encoded, {report.hits} already "
                   f"there; {texts} caption(s) encoded); no training, no model written")
        print(message, flush=True)
        self.report.status("done", message)
        self.dist.barrier()
        self.dist.close()
        return "done"

    def _forward_backward(self, batch: Any, accum: int) -> float | torch.Tensor:
        """The step's loss: read now (a float, checked before the backward pass), or with
        `defer_loss_reads` left on the device (checked when `_read_losses` reads it)."""
        loss = self.diffusion.loss(batch, self.trained_text_parts)
        value: float | torch.Tensor = loss.detach()
        if not self.defer_loss_reads:
            value = self.dist.mean(float(value), self.device)  # every process sees the same loss and stops together
            check_finite(value, self.counters.global_step + 1, batch.image_paths, self.dist.rank if self.dist.active else None)
        scaled = loss / accum
        if not scaled.requires_grad:
            return value  # every part has reached its stop_training_after
        if self.precision.scaler is not None:
            self.precision.scaler.scale(scaled).backward()
        else:
            scaled.backward()
        return value

    def _optimizer_step(self) -> None:
        params = all_params(self.param_groups, trained_only=True)
        cfg = self.config
        self.dist.reduce_gradients(params, cfg.gradient_reduce_precision, cfg.fused_gradient_reduce, cfg.async_gradient_reduce_buffer)
        scaler = self.precision.scaler
        if scaler is not None:
            scaler.unscale_(self.optimizer)
        if self.config.clip_grad_norm:
            torch.nn.utils.clip_grad_norm_(params, self.config.clip_grad_norm)
        if scaler is not None:
            scaler.step(self.optimizer)
            scaler.update()
        else:
            self.optimizer.step()
        self.method.after_optimizer_step(self.model)  # e.g. preserve_embedding_norm
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.step(self.trained_params, self.counters.global_step)

    def _stop_parts_if_due(self) -> None:
        """Freeze parts whose `stop_training_after` is reached: checked after each optimizer step
        and each finished epoch, so 'after N' means exactly N steps or epochs of training."""
        stopped = False
        for group in self.param_groups:
            after, unit = group.stop_training_after, group.stop_training_after_unit  # an embedding's own setting
            if group.stop_training_after_unit is None:  # else the config section of the part
                part = getattr(self.config, group.name, None)
                after, unit = (part.stop_training_after, part.stop_training_after_unit) if part is not None else (None, None)
            if after is None or group.frozen:
                continue
            done = {TimeUnit.STEP: self.counters.global_step, TimeUnit.EPOCH: self.counters.epoch}.get(TimeUnit(unit))
            if done is not None and done >= after:
                group.freeze()
                stopped = True
                self.report.warning(f"{group.name}: stopped training after {after} {TimeUnit(unit).value.lower()}s")
        if stopped:
            self._set_train_modes()

    def _step_log(self, loss: float | torch.Tensor, image_paths: list[str]) -> StepLog:
        """What an optimizer step logs, taken when it ends (the loss may still be on the device)."""
        c = self.counters
        return StepLog(loss, list(image_paths), c.epoch + 1, c.epoch_step, c.global_step, time.monotonic(),
                        {g["name"]: g["lr"] for g in self.optimizer.param_groups})

    def _read_losses(self) -> None:
        """Log the unread steps (step_log.py). On a GPU a read waits for the step to finish, so
        with `defer_loss_reads` the loop reads at most every `LOSS_READ_SECONDS`, and always first
        thing in `sample`, `write_backup`, `save` and `_finish`: a loss that became NaN or inf
        stops the run there, before anything is made from the weights it produced."""
        self.losses.read()

    def _handle_requests(self) -> set[str]:
        asked = self.report.requests()
        if self.dist.active:  # the main process reads the page's requests; all act on them at this step
            asked = self.dist.broadcast(asked | ({"stop"} if self.stop_requested else set()))
        if "stop" in asked:
            self.stop_requested = True
        return asked

    def _after_step(self) -> None:
        asked = self._handle_requests()
        step = self.counters.global_step
        if self.validator is not None and self.validator.every.after_step(step):
            self.validator.run(self._run_state())
        if "sample" in asked or self.sample_every.after_step(step):
            self.sample()
        if "backup" in asked or self.backup_every.after_step(step):
            self.write_backup()
        if "save" in asked or self.save_every.after_step(step):
            self.save(intermediate=True)

    def _after_epoch(self) -> None:
        done = self.counters.epoch
        if self.validator is not None and self.validator.every.after_epoch(done):
            self.validator.run(self._run_state())
        if done >= self.config.epochs:
            return  # the end of the run samples, backs up and saves once
        if self.sample_every.after_epoch(done):
            self.sample()
        if self.backup_every.after_epoch(done):
            self.write_backup()
        if self.save_every.after_epoch(done):
            self.save(intermediate=True)

    def _finish(self) -> str:
        self._read_losses()
        stopped = self.stop_requested and self.counters.epoch < self.config.epochs
        if self.config.backup_before_save or stopped:
            self.write_backup()
        path = self.save(intermediate=False)
        if not stopped:
            self.sample()
        if self._tb is not None:
            self._tb.close()
        status = "stopped" if stopped else "done"
        self.report.status(status, f"model saved to {path}")
        self.dist.barrier()  # the other processes wait for the main one's save
        self.dist.close()
        return status

    # --- outputs ----------------------------------------------------------------------------
    def sample(self) -> None:
        """Sample every enabled prompt (samples.py: EMA and non-EMA, files, events, TensorBoard)."""
        self._read_losses()  # a NaN loss stops the run before its weights are used
        sampling = self.dist.is_main and any(s.enabled for s in self.config.samples)
        # the parked VAE joins the denoiser on the device for all the samples; parked text encoders
        # come for each prompt's encoding only (the family's sample brings them and sends them back)
        with self.placement.using(self.placement.for_samples() if sampling else ()):
            sample_during_training(self._run_state())

    def _run_state(self) -> RunState:
        """The run as samples.py, resume.py and validation.py read it, as it is now."""
        return RunState(
            self.config, self.paths, self.report, self.dist, self.device, self.precision, self.model, self.method,
            self.trained_params, self.counters, self.ema, optimizer=self.optimizer,
            scheduler=self.scheduler, tensorboard=self._tb, text_cache=self.diffusion.text_cache,
        )

    def write_backup(self) -> Path | None:
        self._read_losses()  # never back up weights a NaN loss produced
        if not self.dist.is_main:
            return None
        self.report.status("backup", "")
        optimizer_eval_mode(self.optimizer)
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}
        if self.precision.scaler is not None:
            state["scaler"] = self.precision.scaler.state_dict()
        if self.ema is not None:
            state["ema"] = self.ema.state_dict()
        keep = self.config.rolling_backup_count if self.config.rolling_backup else None
        path = write_backup(
            self.paths.backup,
            self.method.trainable_state(self.model),
            state,
            config_to_dict(self.config),
            self.counters,
            keep=keep,
        )
        self.report.backup(str(path))
        optimizer_train_mode(self.optimizer)
        self.report.status("training", "")
        return path

    def save(self, intermediate: bool) -> Path | None:
        self._read_losses()  # never save weights a NaN loss produced
        if not self.dist.is_main:
            return None
        self.report.status("saving", "")
        optimizer_eval_mode(self.optimizer)
        cfg = self.config
        dest = Path(cfg.output_model_destination)
        if intermediate:
            prefix = cfg.save_filename_prefix
            dest = self.paths.save / f"{prefix}{dest.stem}-step{self.counters.global_step}{dest.suffix}"
        metadata = {
            "ss_steps": str(self.counters.global_step),
            "ss_epoch": str(self.counters.epoch),
            "ss_resolution": cfg.resolution,
            "ss_base_model_name": cfg.base_model_name,
        }
        if self.ema is not None:
            with self.ema.applied(self.trained_params):  # the saved model is the average
                path = self.method.save(self.model, cfg, dest, metadata)
        else:
            path = self.method.save(self.model, cfg, dest, metadata)
        self.report.saved(str(path))
        for file in self.method.embedding_files:  # additional embeddings' own files, for ComfyUI / A1111
            self.report.saved(str(file), kind="embedding")
        optimizer_train_mode(self.optimizer)
        self.report.status("training", "")
        return path
