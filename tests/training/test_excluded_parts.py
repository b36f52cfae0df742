"""OneTrainer's part switch `include: false` (SD 3 / 3.5, Flux.1, HiDream, HunyuanVideo): the text
encoder left out is never loaded (the model holds None and lists it in no part), its output is
zeros of its shape in training, the text cache (whose key differs from an included run's) and
samples; the doctor refuses a left-out part with Train on, and says the switch is ignored where a
model type has no such choice."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.config.doctor import check, errors
from ot_gradio.config.io import load_config
from ot_gradio.config.schema import TrainConfig
from ot_gradio.data.text_cache import text_encoder_id
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

# (model type, tiny model, the part left out, the conditioning entry that turns to zeros)
CASES = [
    ("FLUX_DEV_1", "tiny:flux", "text_encoder_2", "encoder_hidden_states"),  # T5
    ("FLUX_DEV_1", "tiny:flux", "text_encoder", "pooled_projections"),  # CLIP-L
    ("STABLE_DIFFUSION_3", "tiny:sd3", "text_encoder_3", None),  # T5: its tokens after the CLIPs'
    ("HI_DREAM_FULL", "tiny:hidream", "text_encoder_4", "llama"),
    ("HUNYUAN_VIDEO", "tiny:hunyuan_video", "text_encoder", "encoder_hidden_states"),  # Llama
]


pytestmark = pytest.mark.usefixtures("tiny_dir")  # the tiny models in a folder of their own


class Losses(Reporter):
    def __init__(self):
        self.losses = []

    def metrics(self, **fields):
        self.losses.append(fields["loss"])


def _config(model_type: str, tiny: str, data, work, **changes) -> dict:
    parts = {"text_encoder": {"train": False}, "text_encoder_2": {"train": False}, "text_encoder_3": {"train": False},
             "text_encoder_4": {"train": False}}
    return {"model_type": model_type, "training_method": "LORA", "base_model_name": tiny, "train_device": "cpu",
            "train_dtype": "FLOAT_32", "workspace_dir": str(work / "ws"), "cache_dir": str(work / "cache"),
            "output_model_destination": str(work / "out" / "lora.safetensors"), "concepts": [{"name": "c", "path": str(data)}],
            "resolution": "64", "batch_size": 2, "epochs": 1, "learning_rate_warmup_steps": 0, "lora_rank": 2,
            "samples": [], "backup_after_unit": "NEVER", "backup_before_save": False, "tensorboard": False,
            **parts, **changes}


def _zeroed(model, entry: str | None, cond: dict) -> bool:
    if entry is not None:
        return not cond[entry].any()
    t5_tokens = model.t5_sequence_length  # SD 3: CLIP-L | CLIP-G tokens, then T5's
    return not cond["encoder_hidden_states"][:, -t5_tokens:].any() and cond["encoder_hidden_states"][:, :-t5_tokens].any()


@pytest.mark.parametrize(("model_type", "tiny", "part", "entry"), CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_a_left_out_text_encoder_is_not_loaded_and_reads_zeros(four_shapes, tmp_path, model_type, tiny, part, entry):
    config = _config(model_type, tiny, four_shapes, tmp_path, **{part: {"train": False, "include": False}})
    cfg = load_config(config).config
    assert not errors(cfg) or all(part not in e for e in errors(cfg))
    report = Losses()
    trainer = Trainer(cfg, RunPaths(tmp_path / "s", tmp_path / "b", tmp_path / "o", None, []), report)
    trainer.setup()
    model = trainer.model
    assert getattr(model, part) is None and part not in model.parts and part not in model.text_encoder_names
    assert part in model.excluded_parts and part not in model.tokenizers
    assert trainer.train() == "done"
    assert report.losses and all(torch.isfinite(torch.tensor(report.losses)))
    with torch.no_grad():  # the conditioning a step and a sample read
        cond = model.encode_text(["a red circle", "a blue square"])
        assert _zeroed(model, entry, cond)
        sample = model.pipeline_inputs("a red circle", "", 3.5)
    assert sample  # the sample's prompt encoding runs without the part
    assert model.sample("a red circle", height=64, width=64, steps=1, cfg_scale=3.5) is not None


def test_text_cache_key_differs_from_an_included_runs():
    from ot_gradio.models.flux import FluxDev1

    full = FluxDev1.load("tiny:flux", offline=True)
    without_t5 = FluxDev1.load("tiny:flux", offline=True, excluded=("text_encoder_2",))
    assert text_encoder_id(full) != text_encoder_id(without_t5)


def test_doctor_refuses_a_left_out_part_that_trains():
    cfg = TrainConfig.model_validate({"model_type": "FLUX_DEV_1", "training_method": "LORA",
                                      "text_encoder_2": {"include": False, "train": True}})
    assert any(e.startswith("text_encoder_2.include:") and "text_encoder_2.train" in e for e in errors(cfg))
    cfg.text_encoder_2.train = False
    assert not [e for e in errors(cfg) if ".include" in e]


def test_include_off_where_the_model_type_has_no_such_switch_is_not_applicable():
    cfg = TrainConfig.model_validate({"model_type": "STABLE_DIFFUSION_XL_10_BASE", "training_method": "LORA",
                                      "text_encoder_2": {"include": False}})
    said = [w for w in check(cfg) if "text_encoder_2.include" in w]
    assert len(said) == 1 and "not applicable" in said[0] and "ignored" in said[0]
    assert not [e for e in errors(cfg) if ".include" in e]
    flux = TrainConfig.model_validate({"model_type": "FLUX_DEV_1", "vae": {"include": False}})
    assert any("vae.include" in w and "not applicable" in w for w in check(flux))


def test_a_fine_tune_with_a_part_left_out_says_its_saved_model_lacks_it():
    cfg = TrainConfig.model_validate({"model_type": "STABLE_DIFFUSION_3", "training_method": "FINE_TUNE",
                                      "text_encoder_3": {"include": False, "train": False}})
    assert [w for w in check(cfg) if w.startswith("text_encoder_3 left out (Include off): the fine-tuned model is saved without it")]
    cfg.training_method = "LORA"
    assert not [w for w in check(cfg) if "left out" in w]


def test_a_left_out_parts_settings_are_said_to_be_ignored_not_refused():
    """OneTrainer's SD 3 preset keeps T5 at FLOAT_16; with T5 left out that type does nothing: said
    once before the run (command line, the page's Start), and the config still loads and starts."""
    raw = {"model_type": "STABLE_DIFFUSION_3", "training_method": "LORA",
           "text_encoder_3": {"include": False, "train": False, "weight_dtype": "FLOAT_16", "model_name": "t5xxl_fp16.safetensors"}}
    loaded = load_config(raw)
    cfg = loaded.config
    assert cfg.text_encoder_3.weight_dtype == "FLOAT_16" and not [e for e in errors(cfg) if "text_encoder_3" in e]
    said = [w for w in check(cfg) if "text_encoder_3.weight_dtype" in w]
    assert len(said) == 1 and "FLOAT_16" in said[0] and "text_encoder_3.model_name t5xxl_fp16.safetensors" in said[0]
    assert "ignored" in said[0] and "left out" in said[0]
    cfg.text_encoder_3.include = True
    assert not [w for w in check(cfg) if "text_encoder_3.weight_dtype" in w]
    cfg = load_config({"model_type": "STABLE_DIFFUSION_3", "training_method": "LORA", "text_encoder_3": {"include": False, "train": False}}).config
    assert not [w for w in check(cfg) if "ignored" in w]  # nothing set: nothing to say
    ideogram = load_config({"model_type": "IDEOGRAM_4", "training_method": "LORA",
                            "unconditional_transformer": {"include": False, "weight_dtype": "NFLOAT_4"}}).config
    assert [w for w in check(ideogram) if w.startswith("unconditional_transformer.weight_dtype NFLOAT_4: ignored")]
