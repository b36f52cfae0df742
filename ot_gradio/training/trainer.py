"""The training loop. It talks to a model family, a training method and the dataset through
their interfaces only, and reports everything through a `Reporter` (events, log, TensorBoard).

Where the training options live: the step's math (timesteps, noise, loss, masks, caption
dropout, prediction type, attention, quantized weights) in diffusion.py and the modules it names;
EMA in ema.py; train data type and autocast cache in device.py. The loop itself handles
`stop_training_after` per part (after each optimizer step and each epoch), gradient
checkpointing (UNet; text encoder when it trains), EMA sampling / saving / backups.
With several processes (multi-GPU, distributed.py) each trains its slice of every batch, the
gradients are averaged before each optimizer step, and only the main process samples and writes.
The set-up before the first step (model, method, dataset, caches, optimizer) is trainer_setup.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..config.enums import TimeUnit
from ..config.io import config_to_dict
from ..config.schema import TrainConfig
from ..data.prefetch import LoadStats, prefetched
from .async_reduce import AsyncGradientReducer
from .backup import MARKER, Counters, write_backup
from .backup_prune import prune_backups
from .backup_training import run_training
from .distributed import Distributed
from .fp16_fallback import mixed_half_types
from .intervals import SECONDS_PER_UNIT
from .lora_forward import step_casts
from .norm_casts import step_norms
from .optimizers import optimizer_eval_mode, optimizer_train_mode, set_stepping
from .param_groups import all_params
from .placement import fill_text_cache
from .preflight import TrainingError
from .run_state import Reporter, RunPaths, RunState
from .samples import sample_during_training
from .save_retention import SaveRetention
from .step_log import LossLog, StepLog, check_finite
from .trainer_setup import TrainerSetup

__all__ = ["Reporter", "RunPaths", "Trainer", "TrainingError"]

# With `defer_loss_reads` (asynchronous devices), the loop reads the logged losses at most this often.
LOSS_READ_SECONDS = 1.0


class Trainer(TrainerSetup):
    def __init__(self, config: TrainConfig, paths: RunPaths, reporter: Reporter, noise_fn: Callable | None = None):
        self.config = config
        self.paths = paths
        self.report = reporter
        self.noise_fn = noise_fn  # tests pass fixed noise/timesteps here
        self.counters = Counters()
        self.stop_requested = False  # set at an optimizer step's end: the loop stops there
        self.stop_asked = False  # request_stop: acted on at the end of the accumulation window
        self.last_backup: tuple[Path, dict[str, int]] | None = None  # this run's newest backup, and its counters
        self._tb = None
        self.optimizer: Any = None  # made after the dataset and validation (_setup_steps)
        self.scheduler: Any = None
        self.data_stats = LoadStats()  # time the loop waited for batches
        self.dist = Distributed()  # setup joins the other processes of a multi-GPU run
        self.async_reduce: AsyncGradientReducer | None = None  # multi-GPU with async_gradient_reduce
        # Each step's loss is read from the device at once, or with `defer_loss_reads` (GPUs; not
        # with several processes, which average each step's loss anyway) later (`_read_losses`).
        self.defer_loss_reads = False
        self.losses = LossLog(reporter)
        self.retention = SaveRetention(config.save_keep_last)  # Keep last saves: this run's scheduled saves
        self.train_started: float | None = None  # time.monotonic() when the steps began (train)
        self.cast_once: list[torch.nn.Module] = []  # LoRA layers whose weights a step casts once (setup)
        self.frozen_norms: list[torch.nn.Module] = []  # layer and group norms a step runs without casts where frozen (norm_casts.py)

    # --- the loop ---------------------------------------------------------------------------
    def train(self) -> str:
        """Run to the end or to a stop request. Returns 'done' or 'stopped'."""
        cfg = self.config
        if cfg.only_cache:
            return self._only_cache()
        self.report.status("training", "")
        self.losses.start(self.counters.global_step, cfg.epochs, self.steps_per_epoch, self.total_steps, self._tb,
                          epoch=self.counters.epoch, epoch_step=self.counters.epoch_step)
        accum = cfg.gradient_accumulation_steps
        self.train_started = time.monotonic()  # stop_training_after in seconds, minutes or hours counts from here
        optimizer_train_mode(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        while self.counters.epoch < cfg.epochs and not self.stop_requested:
            batches = self.dataset.epoch_batches(self.counters.epoch, shard=self.dist.shard)
            images = 0
            # the next batches load in `dataloader_threads` threads while this one trains (data/prefetch.py)
            for index, batch in prefetched(batches, self.counters.epoch_step, cfg.dataloader_threads, stats=self.data_stats):
                images += len(batch.image_paths)
                steps = (index + 1) % accum == 0 or index + 1 == len(batches)  # this backward pass ends in an optimizer step
                if steps and self.async_reduce is not None:
                    self.async_reduce.arm(all_params(self.param_groups, trained_only=True))
                set_stepping(self.optimizer, steps)  # a fused back pass steps in the window's last backward pass only
                loss = self._forward_backward(batch, accum)
                self.counters.epoch_step = index + 1
                if steps:
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
        try:
            return self._loss_and_backward(batch, accum)
        except RuntimeError as exc:
            told = mixed_half_types(exc, self.config, self.model)
            if told is None:
                raise
            raise told from exc

    def _loss_and_backward(self, batch: Any, accum: int) -> float | torch.Tensor:
        # LoRA weights (lora_forward.py) and frozen 16-bit norms (norm_casts.py): no casts at each call
        with step_casts(self.cast_once, self.precision.dtype, self.device), step_norms(self.frozen_norms, self.precision.dtype, self.device):
            return self._loss_and_backward_cast(batch, accum)

    def _loss_and_backward_cast(self, batch: Any, accum: int) -> float | torch.Tensor:
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
        if self.async_reduce is not None:
            self.async_reduce.finish()  # the buckets started during the backward pass
        else:
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

    def _stop_rule(self, group: Any) -> tuple[int | None, TimeUnit | None]:
        """A group's `stop_training_after` and its unit: an embedding's own, else its part's section."""
        after, unit = group.stop_training_after, group.stop_training_after_unit
        if unit is None:
            part = getattr(self.config, group.name, None)
            after, unit = (part.stop_training_after, part.stop_training_after_unit) if part is not None else (None, None)
        return after, None if unit is None else TimeUnit(unit)

    def _stop_parts_if_due(self) -> None:
        """Freeze parts whose `stop_training_after` is reached: checked after each optimizer step
        and each finished epoch, so 'after N' means exactly N steps or epochs of training; in
        seconds, minutes or hours, the training time of this process (as OneTrainer counts it;
        the main process decides for all); ALWAYS freezes the part before the first step."""
        stopped = False
        for group in self.param_groups:
            after, unit = self._stop_rule(group)
            if group.frozen or unit is None or (after is None and unit != TimeUnit.ALWAYS):
                continue
            if unit in SECONDS_PER_UNIT:
                trained_s = 0.0 if self.train_started is None else time.monotonic() - self.train_started
                due = self.dist.broadcast(trained_s >= after * SECONDS_PER_UNIT[unit])
            else:
                done = {TimeUnit.STEP: self.counters.global_step, TimeUnit.EPOCH: self.counters.epoch}.get(unit)
                due = unit == TimeUnit.ALWAYS or (done is not None and done >= after)
            if due:
                group.freeze()
                stopped = True
                self.report.warning(f"{group.name}: not trained (stop training unit ALWAYS)" if unit == TimeUnit.ALWAYS
                                    else f"{group.name}: stopped training after {after} {unit.value.lower()}s")
        if stopped:
            self._set_train_modes()
            self._cache_frozen_text()

    def _step_log(self, loss: float | torch.Tensor, image_paths: list[str]) -> StepLog:
        """What an optimizer step logs, taken when it ends (the loss may still be on the device)."""
        c = self.counters
        return StepLog(loss, list(image_paths), c.epoch + 1, c.epoch_step, c.global_step, time.monotonic(),
                        {g["name"]: float(g["lr"]) for g in self.optimizer.param_groups})

    def _read_losses(self) -> None:
        """Log the unread steps (step_log.py). On a GPU a read waits for the step to finish, so
        with `defer_loss_reads` the loop reads at most every `LOSS_READ_SECONDS`, and always first
        thing in `sample`, `write_backup`, `save` and `_finish`: a loss that became NaN or inf
        stops the run there, before anything is made from the weights it produced."""
        self.losses.read()

    def request_stop(self) -> None:
        """Stop as the page's Stop does (Ctrl-C in `train`): at the end of the accumulation window
        under way, so the backup holds no half-accumulated gradients and resumes exactly; before
        the first step, at once."""
        if self.train_started is None:
            self.stop_requested = True
        self.stop_asked = True

    def _handle_requests(self) -> set[str]:
        asked = self.report.requests() | ({"stop"} if self.stop_asked else set())
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
        scheduled = self.save_every.after_step(step)  # (a time unit's check moves its clock: asked once)
        if "save" in asked or scheduled:
            self.save(intermediate=True, scheduled=scheduled)

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
            self.save(intermediate=True, scheduled=True)

    def _finish(self) -> str:
        self._read_losses()
        stopped = self.stop_requested and self.counters.epoch < self.config.epochs
        if (self.config.backup_before_save or stopped) and not self._backed_up_here():
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

    def _backed_up_here(self) -> bool:
        """A backup of this very step is on disk already (Backup every / Backup now at the step
        a stop came): the stop writes none of its own, which would be the same twice. A backup of
        an epoch's last step is not one of the epoch's end (its sample, validation and epoch saves
        not yet done): a stop after that end writes its own, so a resume does not do them again."""
        return (self.last_backup is not None and self.last_backup[1] == self.counters.as_dict()
                and (self.last_backup[0] / MARKER).exists())

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
            steps_in_epoch=getattr(getattr(self, "dataset", None), "steps_in_epoch", None),
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
        training = run_training(self.paths)  # a new training, or the one of the backup this run continued
        path = write_backup(self.paths.backup, self.method.trainable_state(self.model), state, config_to_dict(self.config),
                           self.counters, training=training.id, epoch_batches=self.dataset.steps_in_epoch(self.counters.epoch))
        self.last_backup = (path, self.counters.as_dict())
        self.report.backup(str(path))
        if self.config.rolling_backup:  # this training's backups in all its runs, this one's newest kept
            runs = [*self.paths.other_runs, self.paths.backup.parent]
            pruned = prune_backups(runs, path, self.config.rolling_backup_count, training)
            for old in pruned.deleted:
                print(f"deleted the older backup {old} (Rolling backup count: {self.config.rolling_backup_count})", flush=True)
            for old, why in pruned.failed:
                self.report.warning(f"rolling_backup: the older backup {old} could not be deleted ({why}); delete it to free "
                                    "its space")
        optimizer_train_mode(self.optimizer)
        self.report.status("training", "")
        return path

    def save(self, intermediate: bool, scheduled: bool = False) -> Path | None:
        """The model to the output file, or `intermediate`ly to the run's save folder; a `scheduled`
        one (Save every, not Save now) counts for Keep last saves (save_retention.py)."""
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
            if dest.resolve().parent != self.paths.save.resolve():  # (the doctor refuses such a prefix before the run)
                raise ValueError(f"save_filename_prefix: {prefix!r} leads out of the run's save folder")
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
        self.report.saved(str(Path(path).resolve()))  # whole: the page may run from another folder later
        for file in self.method.embedding_files:  # additional embeddings' own files, for ComfyUI / A1111
            self.report.saved(str(Path(file).resolve()), kind="embedding")
        if intermediate and scheduled:
            deleted, problems = self.retention.saved(Path(path))
            for old in deleted:
                print(f"deleted the older save {old} (Keep last saves: {cfg.save_keep_last})", flush=True)
            for problem in problems:
                self.report.warning(problem)
        optimizer_train_mode(self.optimizer)
        self.report.status("training", "")
        return path
