"""Every preset OneTrainer ships (its `training_presets/` folder, stored unchanged in
data/onetrainer-training-presets) imports as OneTrainer loads it: those of the model types we train
pass every check `validate` and `train` run before the first step, with nothing dropped; those of
the model types we do not train are refused with one line naming the model type. The runs of one
step on tiny models are in tests/e2e/test_onetrainer_shipped_presets_train.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ot_gradio.config.doctor import check, errors
from ot_gradio.config.io import ConfigError, config_to_dict, load_config
from ot_gradio.runner.startcheck import start_problems

PRESETS = Path(__file__).parent / "data" / "onetrainer-training-presets"
ALL = sorted(PRESETS.glob("*/*.json"))
TRAINED = ALL  # every model type OneTrainer ships a preset for, each preset's output format written as OneTrainer writes it


# model type -> its tiny model (`tiny:<name>`; models/tiny/)
TINY = {
    "STABLE_DIFFUSION_15": "sd15", "STABLE_DIFFUSION_15_INPAINTING": "sd15-inpainting",
    "STABLE_DIFFUSION_20_INPAINTING": "sd2-inpainting", "STABLE_DIFFUSION_21": "sd2", "STABLE_DIFFUSION_XL_10_BASE": "sdxl",
    "STABLE_DIFFUSION_XL_10_BASE_INPAINTING": "sdxl-inpainting", "WUERSTCHEN_2": "wuerstchen2", "STABLE_CASCADE_1": "cascade",
    "PIXART_ALPHA": "pixart", "PIXART_SIGMA": "pixart-sigma", "STABLE_DIFFUSION_3": "sd3", "FLUX_DEV_1": "flux",
    "CHROMA_1": "chroma", "FLUX_2": "flux2-klein", "QWEN": "qwen-image", "KREA_2": "krea2", "Z_IMAGE": "z-image", "SANA": "sana",
    "HUNYUAN_VIDEO": "hunyuan_video", "HI_DREAM_FULL": "hidream", "ERNIE": "ernie", "ANIMA": "anima",
    "IDEOGRAM_4": "ideogram4",
    # the other model types of our own presets
    "STABLE_DIFFUSION_20": "sd2", "STABLE_DIFFUSION_20_BASE": "sd2-base", "STABLE_DIFFUSION_21_BASE": "sd2-base",
    "STABLE_DIFFUSION_20_DEPTH": "sd2-depth", "STABLE_DIFFUSION_35": "sd35", "FLUX_FILL_DEV_1": "flux-fill",
    "QWEN_IMAGE_EDIT": "qwen-image-edit", "WAN_2_1": "wan", "WAN_2_2_TI2V_5B": "wan22-5b", "WAN_2_2_T2V_A14B": "wan22-a14b", "WAN_2_2_I2V_A14B": "wan22-i2v-a14b", "WAN_2_1_I2V": "wan21-i2v",
    "LTX_2": "ltx2",
}


def preset_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem.lstrip('#')}"


def pointed_at(path: Path, tmp_path: Path) -> dict:
    """The preset imported unchanged, with only the base model, the dataset and the output set,
    as a user sets them before Start (the family's tiny model name: the checks do not load it)."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "a.png").write_bytes(b"")  # the checks look for image files, not into them
    config = config_to_dict(load_config(path).config)
    (data / "a.txt").write_text(f"a photo of {config['embedding']['placeholder']}\n")  # (an embedding trains where it is)
    config.update(base_model_name=f"tiny:{TINY[config['model_type']]}", concepts=[{"name": "c", "path": str(data)}], train_device="cpu",
                  output_model_destination=str(tmp_path / "out" / "model.safetensors"), workspace_dir=str(tmp_path / "ws"),
                  cache_dir=str(tmp_path / "cache"))
    return config


def test_the_fixtures_are_every_preset_onetrainer_ships():
    assert len(ALL) == 60 and len({p.parent for p in ALL}) == 21


@pytest.mark.parametrize("path", TRAINED, ids=preset_id)
def test_a_shipped_preset_of_a_model_type_we_train_passes_every_check_before_the_run(path, tmp_path):
    loaded = load_config(path)
    ignored = [w for w in loaded.warnings if "(kept, but ignored)" in w]
    assert ignored == []  # every setting applied (Ideogram 4's unconditional transformer: its weight type, waiting in RAM)
    warnings = [w for w in loaded.warnings if w not in ignored]
    assert not [w for w in warnings if "dropped" in w or "weight_dtype" in w], loaded.warnings  # INT_W8A8 too: imported as it is
    data = pointed_at(path, tmp_path)
    config = load_config(data).config
    assert errors(config) == []
    assert start_problems(config, data) == []
    offload = [w for w in check(config) if "offload" in w and "will be ignored" not in w]
    assert [w for w in check(config) if "will be ignored" in w] == []  # nor before the run
    # the fine-tune presets' offload fraction applies: they step with the fused back pass, which
    # lets trained weights go to RAM (offload.py)
    assert offload == []
    if config.training_method.value == "FINE_TUNE" and config.transformer.offload_fraction > 0:
        assert config.optimizer.fused_back_pass


def test_the_presets_pairing_compile_with_offloading_are_among_them():
    """OneTrainer's 8 GB presets: compile with offload_fraction on the transformer and the text
    encoder (refused before the run until the trainer compiled block by block)."""
    both = {preset_id(p) for p in TRAINED
            if (c := load_config(p).config).compile and (c.transformer.offload_fraction > 0 or c.text_encoder.offload_fraction > 0)}
    assert {"Z-Image/z-image LoRA 8GB", "Flux 2/flux2 LoRA 8GB", "Flux 2/flux2 Finetune 16GB"} <= both
    flux2 = load_config(PRESETS / "Flux 2" / "#flux2 LoRA 8GB.json").config
    assert flux2.text_encoder.offload_fraction == 0.7


def test_the_top_level_weight_dtype_is_ignored_as_onetrainer_ignores_it():
    """OneTrainer's presets carry the global `weight_dtype` of its configs before version 10. Its
    loader reads the parts' own types (FLOAT_32 where a preset sets none) and uses the global one
    only for a part set to NONE (its migration 9): the same here, with no warning."""
    loaded = load_config(PRESETS / "Chroma" / "#chroma LoRA 8GB.json")
    raw = json.loads((PRESETS / "Chroma" / "#chroma LoRA 8GB.json").read_text())
    assert raw["weight_dtype"] == "BFLOAT_16" and loaded.warnings == []
    c = loaded.config
    assert (c.transformer.weight_dtype, c.text_encoder.weight_dtype, c.vae.weight_dtype) == ("FLOAT_8", "FLOAT_8", "FLOAT_32")
    assert c.model_fields_set.isdisjoint({"weight_dtype"})
    none_part = load_config({**raw, "text_encoder": {"train": False, "weight_dtype": "NONE"}}).config
    assert none_part.text_encoder.weight_dtype == "BFLOAT_16"


def test_the_presets_with_8_bit_matmuls_keep_their_weight_types():
    """OneTrainer's INT_W8A8 parts (Flux 2, Z-Image, Krea 2, ERNIE, Ideogram 4, Anima LoRA presets)
    import as INT_W8A8: the same 8-bit weights and 8-bit matmuls here (training/quantize.py)."""
    kept = []
    for path in ALL:
        raw = json.loads(path.read_text())
        config = load_config(path).config
        for part, section in raw.items():
            if isinstance(section, dict) and section.get("weight_dtype") == "INT_W8A8":
                assert getattr(config, part).weight_dtype == "INT_W8A8", (preset_id(path), part)
                kept.append(preset_id(path))
    assert len(kept) == 11 and "Flux 2/flux2 LoRA 16GB" in kept


def test_the_remembered_optimizer_settings_fill_the_optimizer_as_onetrainer_loads_them():
    """The fine-tune presets name only ADAFACTOR and keep its settings (fused back pass on) in
    `optimizer_defaults`, which OneTrainer's page copies into the optimizer when it loads them."""
    config = load_config(PRESETS / "Flux 2" / "#flux2 Finetune 16GB.json").config
    opt = config.optimizer
    assert (opt.optimizer, opt.fused_back_pass, opt.eps, opt.eps2, opt.decay_rate) == ("ADAFACTOR", True, 1e-30, 1e-3, -0.8)
    own = load_config({"model_type": "FLUX_2", "optimizer": {"optimizer": "ADAFACTOR", "fused_back_pass": False},
                       "optimizer_defaults": {"ADAFACTOR": {"optimizer": "ADAFACTOR", "fused_back_pass": True}}}).config
    assert own.optimizer.fused_back_pass is False  # a setting written in the optimizer itself wins
    with pytest.raises(ConfigError, match="optimizer.optimizer"):  # a name that is no string: refused by name
        load_config({"model_type": "FLUX_2", "optimizer": {"optimizer": []}, "optimizer_defaults": {}})


def test_validate_refuses_an_unknown_model_type_with_one_line_and_no_traceback(capsys, tmp_path):
    """OneTrainer's SD 2.0 preset naming a model type that does not exist (every OneTrainer one trains)."""
    from ot_gradio.cli import main

    preset = next((PRESETS / "SD2.0").glob("*.json"))
    raw = json.loads(preset.read_text())
    path = tmp_path / "unknown.json"
    path.write_text(json.dumps({**raw, "model_type": "NOT_A_MODEL"}))
    assert main(["validate", "--config", str(path)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert out.err.startswith("error: model_type: must be one of STABLE_DIFFUSION_15, ") and "NOT_A_MODEL" in out.err
