"""Output format names as OneTrainer's configs write them map to the files the trainer writes."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from ot_gradio.config.enums import ModelFormat
from ot_gradio.training.finetune_method import check_finetune_format
from ot_gradio.training.lora_format import DIFFUSERS, KOHYA
from ot_gradio.training.lora_method import lora_file_format


@pytest.mark.parametrize(("model_type", "fmt", "layout"), [
    ("FLUX_DEV_1", "KOHYA_LORA", KOHYA), ("FLUX_DEV_1", "COMFY_LORA", KOHYA), ("FLUX_DEV_1", "DIFFUSERS_LORA", DIFFUSERS),
    # SAFETENSORS is the family's usual layout: kohya keys where A1111 and Forge read nothing else, as
    # OneTrainer's SAFETENSORS LoRA of SD 1.x/2.x/SDXL; diffusers keys for the rest
    ("FLUX_DEV_1", "SAFETENSORS", DIFFUSERS), ("STABLE_DIFFUSION_15", "SAFETENSORS", KOHYA),
    ("STABLE_DIFFUSION_21", "SAFETENSORS", KOHYA), ("STABLE_DIFFUSION_XL_10_BASE", "SAFETENSORS", KOHYA),
    ("STABLE_DIFFUSION_XL_10_BASE_INPAINTING", "SAFETENSORS", KOHYA), ("STABLE_DIFFUSION_15", "DIFFUSERS_LORA", DIFFUSERS),
    # OneTrainer's LEGACY_SAFETENSORS LoRA: kohya-style names for every family
    ("STABLE_DIFFUSION_15", "LEGACY_SAFETENSORS", KOHYA), ("FLUX_DEV_1", "LEGACY_SAFETENSORS", KOHYA),
    # newer OneTrainer's: LEGACY_LORA, its rename of a SAFETENSORS LoRA; ORIGINAL_LORA, read where kohya names are
    ("STABLE_DIFFUSION_15", "LEGACY_LORA", KOHYA), ("FLUX_DEV_1", "LEGACY_LORA", DIFFUSERS), ("FLUX_DEV_1", "ORIGINAL_LORA", KOHYA),
])
def test_lora_formats(model_type, fmt, layout):
    assert lora_file_format(SimpleNamespace(model_type=model_type, output_model_format=ModelFormat(fmt))) == layout


def test_lora_formats_not_written_are_refused_by_name():
    with pytest.raises(ValueError, match="output_model_format: .*ORIGINAL_SINGLE_FILE.* KOHYA_LORA or COMFY_LORA"):
        lora_file_format(SimpleNamespace(model_type="STABLE_DIFFUSION_15", output_model_format=ModelFormat.ORIGINAL_SINGLE_FILE))


def test_original_lora_is_said_to_be_written_with_kohya_names():
    from ot_gradio.config.doctor import check, errors
    from ot_gradio.config.io import load_config

    config = load_config({"model_type": "FLUX_DEV_1", "training_method": "LORA", "output_model_format": "ORIGINAL_LORA"}).config
    assert not [e for e in errors(config) if e.startswith("output_model_format")]
    assert any(w.startswith("Model → Output format ORIGINAL_LORA") and "as KOHYA_LORA" in w for w in check(config))


def test_transformer_only_files_need_a_family_that_writes_them():
    from ot_gradio.models.pixart import PixArtAlpha
    from ot_gradio.models.sd15 import StableDiffusion15

    pixart, sd15 = object.__new__(PixArtAlpha), object.__new__(StableDiffusion15)
    for fmt in (ModelFormat.ORIGINAL_TRANSFORMER, ModelFormat.COMFY_TRANSFORMER):
        check_finetune_format(fmt, pixart)
        with pytest.raises(ValueError, match=f"output_model_format: {fmt.value} is the transformer alone"):
            check_finetune_format(fmt, sd15)
    with pytest.raises(ValueError, match="not a whole-model format"):
        check_finetune_format(ModelFormat.KOHYA_LORA, pixart)


@pytest.mark.parametrize(("model_type", "tiny", "prefixes"), [
    ("STABLE_DIFFUSION_15", "tiny:sd15", ("lora_unet_", "lora_te_")),
    ("STABLE_DIFFUSION_XL_10_BASE", "tiny:sdxl", ("lora_unet_", "lora_te1_", "lora_te2_")),
])
def test_an_sd_lora_saved_as_safetensors_is_the_kohya_file(model_type, tiny, prefixes, tmp_path):
    """A OneTrainer config's SAFETENSORS (its default) on SD 1.5 / SDXL writes what OneTrainer's
    does: kohya names, the file A1111 and Forge load (they read no diffusers names); the same bytes
    as KOHYA_LORA, and not DIFFUSERS_LORA's keys."""
    import torch
    from safetensors.torch import load_file

    from ot_gradio.models.tiny import resolve_tiny
    from tests.tools.lora_files import random_lora_files

    files = random_lora_files(model_type, resolve_tiny(tiny).diffusers_dir, ("SAFETENSORS", "KOHYA_LORA", "DIFFUSERS_LORA"), tmp_path,
                              text_encoder={"train": True}, text_encoder_2={"train": True})
    ours, kohya, peft = (load_file(str(files[fmt])) for fmt in ("SAFETENSORS", "KOHYA_LORA", "DIFFUSERS_LORA"))
    assert ours.keys() == kohya.keys() and all(torch.equal(ours[k], kohya[k]) for k in kohya)
    assert {p for p in prefixes if any(k.startswith(p) for k in ours)} == set(prefixes)
    assert all(k.startswith(prefixes) for k in ours) and not ours.keys() & peft.keys()


def test_keep_last_saves_deletes_only_this_runs_older_scheduled_saves(tmp_path, monkeypatch):
    from ot_gradio.training.save_retention import SaveRetention

    retention = SaveRetention(keep=2)
    saves = []
    for step in (10, 20, 30):  # a file save with its embeddings' folder, and a DIFFUSERS folder save
        (tmp_path / f"lora-step{step}.safetensors").write_bytes(b"x")
        (tmp_path / f"lora-step{step}_embeddings").mkdir()
        saves.append(tmp_path / f"lora-step{step}.safetensors")
    (tmp_path / "model-step40").mkdir()
    lookalikes = ("lora-step5.safetensors", "lora.safetensors", "lora-step\u00b2.safetensors", "notes.txt")
    for name in lookalikes:  # an earlier run's, a Save now, the final model: never this run's scheduled saves
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "lora-step10.yaml").write_text("model:\n  target: ldm.models.diffusion.ddpm.LatentDiffusion\n")  # an SD checkpoint's
    (tmp_path / "lora-step20.yaml").write_text("notes: mine\n")  # a yaml of the user's beside a save: kept
    assert retention.saved(saves[0]) == ([], []) and retention.saved(saves[1]) == ([], [])
    deleted, problems = retention.saved(saves[2])
    assert sorted(p.name for p in deleted) == ["lora-step10.safetensors", "lora-step10.yaml", "lora-step10_embeddings"] and problems == []
    deleted, _ = retention.saved(tmp_path / "model-step40")
    assert [p.name for p in deleted] == ["lora-step20.safetensors", "lora-step20_embeddings"]
    assert all((tmp_path / name).exists() for name in (*lookalikes, "lora-step30.safetensors", "model-step40", "lora-step20.yaml"))
    assert SaveRetention(keep=0).saved(saves[2]) == ([], [])  # 0 keeps all
    # a delete that fails (a file another program holds open) is said, and the run goes on
    stuck = SaveRetention(keep=1)
    stuck.saved(tmp_path / "lora-step30.safetensors")

    def refuse(self, missing_ok=False):
        raise PermissionError(13, "in use")

    monkeypatch.setattr(Path, "unlink", refuse)
    deleted, problems = stuck.saved(tmp_path / "model-step40")
    assert deleted == [tmp_path / "lora-step30_embeddings"] and problems == [f"Keep last saves: could not delete the older save {tmp_path / 'lora-step30.safetensors'} "
                                          "([Errno 13] in use); it stays"]
