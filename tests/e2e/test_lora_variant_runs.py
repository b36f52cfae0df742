"""SD 1.5 x LORA with DoRA, LoHa, LoKr and OFT v2: the real worker trains a few steps, and the file it
writes rebuilds the sampled model in diffusers (DoRA with PEFT keys), through the merge
formulas A1111/ComfyUI apply to kohya files (tests/lora_reference.py); OFT v2's merge and sampling
are checked in tests/tools (test_convert_merge_variants.py, test_sample.py). In-process runs show a
stopped run resumes from its backup to the same weights, and a run continues from the file."""

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from ot_gradio.config.io import load_config
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer, TrainingError
from tests.e2e.runs import run_until_done
from tests.lora_reference import merge_kohya_reference

pytestmark = pytest.mark.slow

SAMPLE = {"prompt": "a red circle", "height": 64, "width": 64, "diffusion_steps": 2, "seed": 3}


def _pipe(folder):
    from diffusers import DDIMScheduler, StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(str(folder), safety_checker=None)
    # the sampler our samples use (models/sd15.py SAMPLERS[DDIM])
    pipe.scheduler = DDIMScheduler.from_config(dict(pipe.scheduler.config), clip_sample=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _image(pipe, prompt="a red circle", seed=3):
    g = torch.Generator("cpu").manual_seed(seed)
    out = pipe(prompt, height=64, width=64, num_inference_steps=2, guidance_scale=7.0, generator=g, output_type="pil")
    return np.asarray(out.images[0]).astype(int)


def _last_sample(run, events):
    path = [e for e in events if e["type"] == "sample"][-1]["path"]
    return np.asarray(Image.open(run.samples / path.split("/")[-1])).astype(int)


def _variant_run(lora_config, tmp_path, **options):
    out = tmp_path / "out" / "lora.safetensors"
    config = lora_config(epochs=1, output_model_destination=str(out), samples=[SAMPLE], sample_image_format="PNG", **options)
    run, events = run_until_done(config, tmp_path)
    return out, _last_sample(run, events)


def test_dora_with_peft_keys_loads_in_diffusers(lora_config, tiny_model, tmp_path):
    out, sample = _variant_run(
        lora_config, tmp_path, lora_decompose=True, lora_decompose_output_axis=True, output_model_format="DIFFUSERS_LORA"
    )
    tensors = load_file(str(out))
    magnitudes = {k: v for k, v in tensors.items() if k.endswith(".lora_magnitude_vector.weight")}
    assert magnitudes and all(k.startswith(("unet.", "text_encoder.")) for k in tensors)
    assert magnitudes["unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora_magnitude_vector.weight"].shape == (16,)

    pipe = _pipe(tiny_model.diffusers_dir)
    plain = _image(pipe)
    pipe.load_lora_weights(str(out))
    theirs = _image(pipe)
    assert np.abs(theirs - sample).max() <= 1, "diffusers with our DoRA file draws another image than our sample"
    assert np.abs(theirs - plain).max() > 0


@pytest.mark.parametrize(
    ("options", "expect"),
    [
        # OneTrainer's DoRA defaults: input axis, epsilon on
        ({"lora_decompose": True}, {"lora_unet_down_blocks_0_resnets_0_conv1.dora_scale": (1, 16, 1, 1)}),
        ({"peft_type": "LOHA", "lora_rank": 2}, {"lora_unet_down_blocks_0_resnets_0_conv1.hada_w1_b": (2, 144)}),
        # LoKr's rank is lokr_dim (not lora_rank); factor 8 splits 32 into 8 x 4, both factors decomposed,
        # the 3x3 convs with a Tucker core
        (
            {"peft_type": "LOKR", "lokr_dim": 1, "lokr_decompose_both": True, "lokr_decompose_factor": 8, "lokr_use_tucker": True},
            {"lora_unet_up_blocks_0_resnets_0_conv1.lokr_t2": (1, 1, 3, 3), "lora_unet_up_blocks_0_resnets_0_conv1.lokr_w1_a": (8, 1),
             "lora_unet_up_blocks_0_resnets_0_conv1.lokr_w2_a": (1, 4)},
        ),
        # OneTrainer's LoKr switches: DoRA on LoKr (output axis, its default: LyCORIS's formula), w2 whole at dim 1
        (
            {"peft_type": "LOKR", "lokr_dim": 1, "lokr_weight_decompose": True, "lokr_full_matrix": True},
            {"lora_unet_up_blocks_0_resnets_0_conv1.dora_scale": (32, 1, 1, 1), "lora_unet_up_blocks_0_resnets_0_conv1.lokr_w2": (8, 8, 3, 3)},
        ),
    ],
    ids=["DoRA", "LoHa", "LoKr", "LoKr-switches"],
)
def test_kohya_file_rebuilds_the_sampled_model(lora_config, tiny_model, tmp_path, options, expect):
    out, sample = _variant_run(lora_config, tmp_path, output_model_format="KOHYA_LORA", **options)
    tensors = load_file(str(out))
    assert {k: tuple(tensors[k].shape) for k in expect if k in tensors} == expect

    pipe = _pipe(tiny_model.diffusers_dir)
    plain = _image(pipe)
    assert merge_kohya_reference(pipe, tensors) > 0
    theirs = _image(pipe)
    assert np.abs(theirs - sample).max() <= 1, "the loaders' formula on our file draws another image than our sample"
    assert np.abs(theirs - plain).max() > 0


class StopAt(Reporter):
    def __init__(self, step=None):
        self.step, self.global_step, self.statuses = step, 0, []

    def metrics(self, **fields):
        self.global_step = fields["global_step"]

    def status(self, status, message=""):
        self.statuses.append((status, message))

    def requests(self):
        return {"stop"} if self.step is not None and self.global_step >= self.step else set()


def _trainer(config, run, reporter, others=()):
    trainer = Trainer(config, RunPaths(run / "samples", run / "backup", run / "save", None, [run, *others]), reporter)
    trainer.setup()
    return trainer


@pytest.mark.parametrize(
    "options",
    [{"lora_decompose": True}, {"peft_type": "LOHA"}, {"peft_type": "LOKR", "lokr_dim": 2},
     {"peft_type": "LOKR", "lokr_dim": 2, "lokr_weight_decompose": True, "lokr_dora_on_output": False, "lokr_full_matrix": True},
     {"peft_type": "OFT_2", "oft_block_size": 8, "oft_scaled": True}],
    ids=["DoRA", "LoHa", "LoKr", "LoKr-switches", "OFT"],
)
def test_resume_from_backup_and_continue_from_the_file(lora_config, tmp_path, options):
    out = tmp_path / "out" / "lora.safetensors"
    data = lora_config(samples=[], epochs=1, backup_before_save=False, output_model_destination=str(out), **options)
    config = load_config(data).config

    straight = _trainer(config, tmp_path / "straight", StopAt())
    assert straight.train() == "done"
    first = _trainer(config, tmp_path / "a", StopAt(step=2))
    assert first.train() == "stopped" and first.counters.global_step == 2
    report = StopAt()
    second = _trainer(load_config({**data, "continue_last_backup": True}).config, tmp_path / "b", report, others=[tmp_path / "a"])
    assert second.train() == "done" and any("continuing from backup" in m for _, m in report.statuses)

    a, b = straight.method.trainable_state(straight.model), second.method.trainable_state(second.model)
    assert a.keys() == b.keys() and len(a) > 0
    if options.get("peft_type") == "OFT_2":  # rotations start at zero (no change); training turned them
        moved = [bool(v.abs().max() > 0) for k, v in a.items() if k.endswith(".oft_R.weight")]
        assert sum(moved) > 0.9 * len(moved) > 0, f"{moved.count(False)} of {len(moved)} OFT layers did not move"
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"resumed run differs from the uninterrupted one in {different[:3]}"

    # the straight run's output (written last) as the LoRA to continue from
    cont = _trainer(load_config({**data, "lora_model_name": str(out)}).config, tmp_path / "c", StopAt())
    c = cont.method.trainable_state(cont.model)
    assert c.keys() == a.keys()
    torch.testing.assert_close(c, a, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"lora_decompose": True, "output_model_format": "DIFFUSERS_LORA"}, "output_model_format"),
        ({"peft_type": "LOHA", "dropout_probability": 0.1}, "dropout_probability"),
        ({"peft_type": "OFT_2", "lora_decompose": True}, "lora_decompose"),
    ],
    ids=["input-axis DoRA as PEFT keys", "LoHa dropout", "OFT"],
)
def test_settings_peft_cannot_train_fail_before_training(lora_config, tmp_path, options, field):
    config = load_config(lora_config(samples=[], **options)).config
    with pytest.raises(TrainingError, match=f"^{field}: "):
        _trainer(config, tmp_path / "run", StopAt())
