"""What a backup must share with the run that continues it, and what the resume says: a LoRA's
structure only where it shapes the adapters (the parts its LoRA trains; a new LoRA's shape, not a
Base LoRA's), a text encoder left out whose weights the backup holds is refused naming the part,
and changed optimizer settings are said per group as they act."""

import pytest
import torch

from ot_gradio.config.io import load_config
from ot_gradio.training.finetune_method import FineTuneMethod
from ot_gradio.training.resume import left_out_problems, must_match_problems
from ot_gradio.training.resume_optimizer import continue_optimizer
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer, TrainingError


def config(**values):
    return load_config({"training_method": "LORA", **values}).config


def problems(before: dict, after: dict) -> list[str]:
    return must_match_problems(config(**before).model_dump(mode="json"), config(**after))


@pytest.mark.parametrize(("model_type", "part"), [
    ("STABLE_DIFFUSION_15", "vae"), ("STABLE_DIFFUSION_15", "transformer"), ("STABLE_DIFFUSION_15", "text_encoder_2"),
    ("FLUX_DEV_1", "unet"), ("FLUX_DEV_1", "vae"), ("FLUX_DEV_1", "text_encoder_3"),
])
def test_a_part_the_models_lora_does_not_train_may_change(model_type, part):
    assert problems({"model_type": model_type, part: {"train": True}}, {"model_type": model_type, part: {"train": False}}) == []


@pytest.mark.parametrize(("model_type", "part"), [
    ("STABLE_DIFFUSION_15", "unet"), ("STABLE_DIFFUSION_15", "text_encoder"), ("FLUX_DEV_1", "transformer"),
    ("FLUX_DEV_1", "text_encoder_2"), ("STABLE_DIFFUSION_3", "text_encoder_3"),
])
def test_a_part_the_models_lora_trains_must_match(model_type, part):
    assert problems({"model_type": model_type}, {"model_type": model_type, part: {"train": False}}) == [
        f"{part}.train=True (Train) but this run has {part}.train=False"]


SHAPE = [{"lora_rank": 8}, {"lora_alpha": 8}, {"layer_filter_preset": "attn-only"}, {"lora_decompose": True},
         {"layer_filter_preset": "custom", "layer_filter": "attn1"}]


@pytest.mark.parametrize("change", SHAPE, ids=lambda c: next(iter(c)))
def test_a_base_lora_takes_its_shape_from_the_file(change):
    base = {"lora_model_name": "start.safetensors"}
    assert problems(base, {**base, **change}) == []
    assert problems({}, change)  # a new LoRA's shape is its settings'


def test_a_base_loras_adapter_type_still_must_match():
    base = {"lora_model_name": "start.safetensors"}
    assert problems(base, {**base, "peft_type": "LOHA"}) == ["peft_type='LORA' (Adapter type) but this run has peft_type='LOHA'"]
    lokr = {**base, "peft_type": "LOKR"}
    assert problems(lokr, {**lokr, "lokr_dim": 4, "lokr_full_matrix": True}) == []


def test_the_base_lora_itself_must_match():
    """The backup's LoRA has the Base LoRA's layers: another file (or none) builds other layers."""
    assert problems({"lora_model_name": "a.safetensors"}, {"lora_model_name": "b.safetensors"}) == [
        "lora_model_name='a.safetensors' (Base LoRA) but this run has lora_model_name='b.safetensors'"]
    assert problems({"lora_model_name": "a.safetensors"}, {}) != []
    assert problems({"training_method": "FINE_TUNE", "lora_model_name": "a"}, {"training_method": "FINE_TUNE"}) == []


def _changed(before: dict, after: dict, counters=None) -> list[str]:
    from ot_gradio.training.backup import Counters
    from ot_gradio.training.resume_changes import changed_settings

    return changed_settings(config(**before).model_dump(mode="json"), config(**after), counters or Counters(2, 0, 12))


def test_settings_changed_since_the_backup_are_said_with_both_values():
    said = _changed({}, {"dropout_probability": 0.1, "ema": "GPU", "masked_training": True,
                         "text_encoder": {"dropout_probability": 0.2}})
    assert said == ["continue_last_backup: changed since the backup, this run's values apply from step 12 on: "
                    "EMA (ema) 'OFF' -> 'GPU'; LoRA dropout (dropout_probability) 0.0 -> 0.1; Caption dropout "
                    "(text_encoder.dropout_probability) 0.0 -> 0.2; Masked training (masked_training) False -> True"]
    # what means nothing for this run: caption dropout on the UNet, a part SD 1.5 lacks, rank dropout of a LoHa
    assert _changed({"peft_type": "LOHA"}, {"peft_type": "LOHA", "unet": {"dropout_probability": 0.2},
                                            "transformer": {"guidance_scale": 3.0}, "lora_rank_dropout": 0.1}) == []
    assert _changed({"dropout_probability": 0.1}, {"dropout_probability": 0.1}) == []
    # the optimizer, schedule, rates, speed-only settings and samples are said elsewhere or change nothing learnt
    assert _changed({}, {"learning_rate": 1.0, "optimizer": {"optimizer": "LION"}, "learning_rate_warmup_steps": 5,
                         "compile": True, "unet": {"gradient_checkpointing": False, "learning_rate": 0.5},
                         "samples": [{"prompt": "x"}], "sample_after": 3}) == []


def test_a_seed_changed_inside_an_epoch_says_the_rest_of_it_is_drawn_anew():
    from ot_gradio.training.backup import Counters

    at_epoch_end = _changed({"seed": 42}, {"seed": 7}, Counters(2, 0, 12))
    assert at_epoch_end == ["continue_last_backup: changed since the backup, this run's values apply from step 12 on: "
                            "Seed (seed) 42 -> 7"]
    inside = _changed({"seed": 42}, {"seed": 7}, Counters(2, 3, 15))
    assert len(inside) == 1 and inside[0].startswith("continue_last_backup: seed 42 -> 7: the backup stopped 3 batch(es) "
                                                     "into epoch 3")
    assert inside[0].endswith("Set Seed back to 42 to continue exactly")
    # written at the epoch's last batch (Backup every N steps landing there): the epoch is done, nothing is drawn again
    from ot_gradio.training.resume_changes import changed_settings

    done = changed_settings(config(seed=42).model_dump(mode="json"), config(seed=7), Counters(2, 3, 15), lambda epoch: 3)
    assert done == ["continue_last_backup: changed since the backup, this run's values apply from step 15 on: Seed (seed) 42 -> 7"]


def test_a_left_out_part_whose_weights_the_backup_holds_is_named():
    flux = {"model_type": "FLUX_DEV_1", "text_encoder": {"include": False, "train": False}}
    keys = ["transformer.x.lora_A", "text_encoder.y.lora_A"]
    said = left_out_problems(keys, config(**flux))
    assert said == ["the backup holds text_encoder LoRA weights, but text_encoder is left out of this run "
                    "(text_encoder.include off): they would not be used and the saved model would lack them; turn "
                    "text_encoder.include on to keep them"]
    assert "holds text_encoder trained weights" in left_out_problems(keys, config(**flux, training_method="FINE_TUNE"))[0]
    assert left_out_problems(["transformer.x", "text_encoder_2.y", "embedding.0.u.text_encoder"], config(**flux)) == []
    assert left_out_problems(keys, config(model_type="FLUX_DEV_1")) == []  # included
    assert left_out_problems(keys, config(text_encoder={"include": False, "train": False})) == []  # SD 1.5 loads it: ignored


def test_a_fine_tune_refuses_weights_of_a_part_it_does_not_load():
    from ot_gradio.models.sd15 import StableDiffusion15
    from ot_gradio.models.tiny.sd15 import tiny_sd15_components

    model = StableDiffusion15(**tiny_sd15_components())
    method = FineTuneMethod()
    method.setup(model, config(training_method="FINE_TUNE"), torch.device("cpu"))
    state = method.trainable_state(model)
    with pytest.raises(ValueError, match="the backup holds trained text_encoder_2 weights, but this model does not load that part"):
        method.load_trainable_state(model, {**state, "text_encoder_2.w": torch.zeros(1)})
    method.load_trainable_state(model, state)


# --- the optimizer's settings -----------------------------------------------------------------


def _adamw(weights: dict[str, torch.nn.Parameter], weight_decay: float) -> torch.optim.AdamW:
    return torch.optim.AdamW([{"params": [w], "name": n} for n, w in weights.items()], lr=1e-3, weight_decay=weight_decay)


def test_changed_settings_are_said_for_the_groups_that_keep_the_backups():
    old_cfg = config(optimizer={"optimizer": "ADAMW", "weight_decay": 0.01})
    new_cfg = config(optimizer={"optimizer": "ADAMW", "weight_decay": 0.1})
    unet, text = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    before = _adamw({"unet": unet}, 0.01)  # the backup: the text encoder did not train
    torch.optim.lr_scheduler.LambdaLR(before, lambda _: 1.0)
    unet.grad = torch.ones(2)
    before.step()
    now = _adamw({"unet": unet, "text_encoder": text}, 0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(now, lambda _: 1.0)
    said = continue_optimizer(now, scheduler, {"optimizer": before.state_dict()}, old_cfg.model_dump(mode="json"), new_cfg, 1)
    assert [g["weight_decay"] for g in now.param_groups] == [0.01, 0.1]
    assert any("text_encoder (the backup has none)" in s for s in said)
    kept = [s for s in said if "weight_decay 0.01 -> 0.1" in s]
    assert len(kept) == 1 and ("the backup's values stay in effect in the groups loaded from the backup (unet); the groups "
                               "that start fresh take this run's") in kept[0]

    fresh = _adamw({"text_encoder": text}, 0.1)  # no group loads: this run's values act everywhere
    scheduler = torch.optim.lr_scheduler.LambdaLR(fresh, lambda _: 1.0)
    said = continue_optimizer(fresh, scheduler, {"optimizer": before.state_dict()}, old_cfg.model_dump(mode="json"), new_cfg, 1)
    assert any("(weight_decay 0.01 -> 0.1): this run's values apply" in s for s in said)
    assert not any("stay in effect" in s for s in said)


# --- a run with a text encoder left out (tiny Flux.1) -------------------------------------------


class Stop(Reporter):
    def __init__(self, at=None):
        self.at, self.step = at, 0

    def metrics(self, **fields):
        self.step = fields["global_step"]

    def requests(self):
        return {"stop"} if self.at is not None and self.step >= self.at else set()


def _flux(method: str, data, work, **changes) -> dict:
    return {"model_type": "FLUX_DEV_1", "training_method": method, "base_model_name": "tiny:flux", "train_device": "cpu",
            "train_dtype": "FLOAT_32", "workspace_dir": str(work / "ws"), "cache_dir": str(work / "cache"),
            "output_model_destination": str(work / "out" / "model.safetensors"), "concepts": [{"name": "c", "path": str(data)}],
            "resolution": "64", "batch_size": 2, "epochs": 2, "learning_rate_warmup_steps": 0, "lora_rank": 2, "samples": [],
            "backup_after_unit": "NEVER", "backup_before_save": False, "tensorboard": False,
            "text_encoder": {"train": True}, "text_encoder_2": {"train": False}, **changes}


def _run(data: dict, run, report, others=()) -> str:
    trainer = Trainer(load_config(data).config, RunPaths(run / "samples", run / "backup", run / "save", None, [run, *others]), report)
    trainer.setup()
    return trainer.train()


@pytest.mark.parametrize(("method", "said"), [
    ("FINE_TUNE", "the backup holds text_encoder trained weights, but text_encoder is left out of this run "
                  "(text_encoder.include off): they would not be used and the saved model would lack them; turn "
                  "text_encoder.include on to keep them"),
    ("LORA", "text_encoder.train=True (Train) but this run has text_encoder.train=False"),
])
def test_a_backup_that_trained_a_text_encoder_left_out_now_is_refused(tiny_dir, four_shapes, tmp_path, method, said):
    data = _flux(method, four_shapes, tmp_path)
    assert _run(data, tmp_path / "a", Stop(at=1)) == "stopped"
    left_out = {**data, "continue_last_backup": True, "text_encoder": {"train": False, "include": False}}
    with pytest.raises(TrainingError, match=said.replace("(", r"\(").replace(")", r"\)")):
        _run(left_out, tmp_path / "b", Stop(), others=[tmp_path / "a"])


def test_a_backup_of_before_the_step_changes_says_what_trains_otherwise():
    """Zero terminal SNR's v-prediction, OneTrainer's REX and a warmup of 1: a backup with no data plan
    in its marker (written before these changed) is told; one of this version, or settings none of
    them touches, is not."""
    from ot_gradio.training.resume_plan import step_warnings

    zsnr = {"rescale_noise_scheduler_to_zero_terminal_snr": True, "learning_rate_scheduler": "REX"}
    said = step_warnings(0, config(**zsnr).model_dump(mode="json"), config(**zsnr))
    assert len(said) == 1 and "turn Force epsilon prediction on to continue it as it trained" in said[0] and "REX" in said[0]
    assert step_warnings(3, config(**zsnr).model_dump(mode="json"), config(**zsnr)) == []
    forced = {**zsnr, "learning_rate_scheduler": "CONSTANT", "force_v_prediction": True}
    assert step_warnings(0, config(**forced).model_dump(mode="json"), config(**forced)) == []
    assert "whole run" in step_warnings(0, config(learning_rate_warmup_steps=1).model_dump(mode="json"), config())[0]


def test_a_fine_tunes_layer_preset_must_match_and_an_older_backups_trained_every_weight():
    from ot_gradio.training.resume import backup_config

    ft = {"training_method": "FINE_TUNE"}
    assert problems({**ft, "layer_filter_preset": "full"}, {**ft, "layer_filter_preset": "attn-only"}) == [
        "layer_filter_preset='full' (Layer preset) but this run has layer_filter_preset='attn-only'"]
    # a version-2 fine-tune's backup trained every weight whatever its (LoRA) preset said: it continues with "full"
    older = {**config(**ft).model_dump(mode="json"), "config_version": 2, "layer_filter_preset": "attn-mlp"}
    assert must_match_problems(backup_config(older), config(**ft, layer_filter_preset="full")) == []
