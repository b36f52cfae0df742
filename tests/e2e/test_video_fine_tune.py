"""FINE_TUNE of the video families (Wan 2.1, Wan 2.2 TI2V 5B and T2V A14B, LTX-2, which OneTrainer
lacks, and HunyuanVideo, as OneTrainer fine-tunes it) on their tiny models: our preset switched to
FINE_TUNE, trained in a worker process on three clips and an image; the saved diffusers folder loads in the family's own pipeline, its trained
transformer changed (for A14B the trained expert only) and every other part as it was; Wan 2.1 and HunyuanVideo
also save the transformer alone in its original layout, read back over the base model."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import imported, local_pipeline, run_until_done
from tests.video_clips import write_clips_and_an_image

pytestmark = pytest.mark.slow
PROMPT = "a yellow square moving"

# model type: (tiny model, our preset, frames, extra changes, transformer trained, transformer kept)
CASES = {
    "WAN_2_1": ("wan", "wan21-lora.json", "5", {}, "transformer", None),
    "WAN_2_2_TI2V_5B": ("wan22-5b", "wan22-ti2v-5b-lora.json", "5", {}, "transformer", None),
    "WAN_2_2_T2V_A14B": ("wan22-a14b", "wan22-t2v-a14b-lora.json", "5", {"trained_expert": "LOW_NOISE"}, "transformer_2", "transformer"),
    "LTX_2": ("ltx2", "ltx2-lora.json", "9", {"text_encoder_sequence_length": 64}, "transformer", None),
    "HUNYUAN_VIDEO": ("hunyuan_video", "hunyuan-video-lora.json", "5", {}, "transformer", None),  # OneTrainer's FINE_TUNE
}


def _weights(folder, subfolder: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted((folder / subfolder).glob("*.safetensors"))
    assert files, f"{folder / subfolder} holds no weights"
    return {k: v for f in files for k, v in load_file(str(f)).items()}


@pytest.mark.parametrize("model_type", list(CASES))
def test_a_video_fine_tune_saves_a_folder_its_pipeline_loads(model_type, tmp_path_factory, tmp_path):
    from ot_gradio.models.tiny import all_tiny_models

    tiny_name, preset, frames, changes, trained, kept = CASES[model_type]
    tiny = all_tiny_models()[f"tiny:{tiny_name}"][1](tmp_path_factory.mktemp(tiny_name))
    data = write_clips_and_an_image(tmp_path / "clips", PROMPT)
    config = imported(PRESETS_DIR / preset, tiny.diffusers_dir, data, tmp_path, "model", resolution="64", frames=frames, epochs=1,
                      learning_rate=1e-3, training_method="FINE_TUNE", output_model_format="DIFFUSERS", output_dtype="FLOAT_32",
                      train_dtype="FLOAT_32", optimizer={"optimizer": "ADAMW"}, samples=[], latent_caching=True, **changes)
    config["transformer"] = {**config["transformer"], "train": True, "weight_dtype": "FLOAT_32"}
    assert config["model_type"] == model_type
    _, events = run_until_done(config, tmp_path)
    assert len([e for e in events if e["type"] == "metrics" and "loss" in e]) == 4
    out = tmp_path / "out" / "model"
    tuned, base = _weights(out, trained), _weights(tiny.diffusers_dir, trained)
    assert tuned.keys() == base.keys()
    assert [k for k in tuned if not torch.equal(tuned[k].float(), base[k].float())], "the trained transformer did not change"
    for part in [p for p in (kept, "vae") if p]:  # frozen parts saved as they were
        saved, original = _weights(out, part), _weights(tiny.diffusers_dir, part)
        assert saved.keys() == original.keys() and all(torch.equal(saved[k].float(), original[k].float()) for k in saved), part
    pipe = local_pipeline(out)
    assert type(pipe).__name__ == type(local_pipeline(tiny.diffusers_dir)).__name__


@pytest.mark.parametrize("model_type", ["WAN_2_1", "HUNYUAN_VIDEO"])
def test_a_video_fine_tune_saves_the_transformer_file_comfyui_loads(model_type, tmp_path):
    """ORIGINAL_TRANSFORMER: the fine-tuned transformer alone in the original names (Wan-AI's,
    Tencent's), read back as `transformer.model_name` over the base model."""
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import all_tiny_models

    tiny_name, preset, frames, changes, _, _ = CASES[model_type]
    tiny = all_tiny_models()[f"tiny:{tiny_name}"][1](tmp_path / "tiny")
    data = write_clips_and_an_image(tmp_path / "clips", PROMPT)
    config = imported(PRESETS_DIR / preset, tiny.diffusers_dir, data, tmp_path, "model.safetensors", resolution="64", frames=frames,
                      epochs=1, learning_rate=1e-3, training_method="FINE_TUNE", output_model_format="ORIGINAL_TRANSFORMER",
                      output_dtype="FLOAT_32", train_dtype="FLOAT_32", optimizer={"optimizer": "ADAMW"}, samples=[], latent_caching=True,
                      **changes)
    config["transformer"] = {**config["transformer"], "train": True, "weight_dtype": "FLOAT_32"}
    run_until_done(config, tmp_path)
    out = tmp_path / "out" / "model.safetensors"
    tuned = get_family(model_type).load(str(tiny.diffusers_dir), part_models={"transformer": str(out)}).transformer.state_dict()
    base = _weights(tiny.diffusers_dir, "transformer")
    assert tuned.keys() == base.keys() and [k for k in tuned if not torch.equal(tuned[k], base[k])]
