"""ai-toolkit's job files (its config/examples YAML and the job its web UI saves): each setting
with a counterpart carried over as ai-toolkit trains it, every other one named, and the jobs this
trainer cannot run refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ot_gradio.config.io import config_to_dict, load_config
from ot_gradio.config.validation import ConfigError

# ai-toolkit's config/examples/train_lora_flux_24gb.yaml, its comments left out, with a trigger word
FLUX = """---
job: extension
config:
  name: "my_first_flux_lora_v1"
  process:
    - type: 'sd_trainer'
      training_folder: "output"
      device: cuda:0
      trigger_word: "p3r5on"
      network:
        type: "lora"
        linear: 16
        linear_alpha: 16
      save:
        dtype: float16
        save_every: 250
        max_step_saves_to_keep: 4
        push_to_hub: false
      datasets:
        - folder_path: "{folder}"
          caption_ext: "txt"
          caption_dropout_rate: 0.05
          shuffle_tokens: false
          cache_latents_to_disk: true
          resolution: [ 512, 768, 1024 ]
      train:
        batch_size: 1
        steps: 2000
        gradient_accumulation_steps: 1
        train_unet: true
        train_text_encoder: false
        gradient_checkpointing: true
        noise_scheduler: "flowmatch"
        optimizer: "adamw8bit"
        lr: 1e-4
        ema_config:
          use_ema: true
          ema_decay: 0.99
        dtype: bf16
      model:
        name_or_path: "black-forest-labs/FLUX.1-dev"
        is_flux: true
        quantize: true
      sample:
        sampler: "flowmatch"
        sample_every: 250
        width: 1024
        height: 1024
        prompts:
          - "[trigger] holding a sign that says 'I LOVE PROMPTS!'"
          - "a bear building a log cabin in the snow covered mountains"
        neg: ""
        seed: 42
        walk_seed: true
        guidance_scale: 4
        sample_steps: 20
meta:
  name: "[name]"
  version: '1.0'
"""


def _images(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"{i}.png").write_bytes(b"x")
    return folder


def test_the_flux_example_imports_as_ai_toolkit_trains_it(tmp_path):
    folder = _images(tmp_path / "img", 5)
    (tmp_path / "flux.yaml").write_text(FLUX.replace("{folder}", str(folder)))
    result = load_config(tmp_path / "flux.yaml")
    c = config_to_dict(result.config)
    assert (c["model_type"], c["base_model_name"], c["training_method"]) == ("FLUX_DEV_1", "black-forest-labs/FLUX.1-dev", "LORA")
    assert (c["peft_type"], c["lora_rank"], c["lora_alpha"]) == ("LORA", 16, 16.0)
    assert c["learning_rate"] == pytest.approx(1e-4) and c["transformer"]["learning_rate"] == pytest.approx(1e-4)  # YAML's "1e-4" text
    assert (c["optimizer"]["optimizer"], c["optimizer"]["eps"]) == ("ADAMW_8BIT", 1e-6)  # ai-toolkit's eps for its Adams
    assert (c["ema"], c["ema_decay"], c["ema_update_step_interval"]) == ("GPU", 0.99, 1)  # updated every step
    assert c["layer_filter_preset"] == "blocks"  # transformer_only, its default: the transformer blocks
    assert (c["train_dtype"], c["output_dtype"], c["clip_grad_norm"]) == ("BFLOAT_16", "FLOAT_16", 1.0)
    # quantize: the transformer and (quantize_te follows it) T5, as ai-toolkit's Flux does; text encoders not trained
    assert [c[p]["weight_dtype"] for p in ("transformer", "text_encoder", "text_encoder_2")] == ["FLOAT_8", "FLOAT_32", "FLOAT_8"]
    assert not c["text_encoder"]["train"] and not c["text_encoder_2"]["train"] and c["transformer"]["train"]
    assert c["caption_dropout_probability"] == 0.05 and c["text_encoder_2"]["dropout_probability"] == 0  # the whole caption
    assert c["resolution"] == "512,768,1024" and c["timestep_distribution"] == "LOGIT_NORMAL"  # its sigmoid timesteps
    # 2000 steps of 5 images at batch 1: 400 epochs
    assert c["epochs"] == 400 and "train.steps 2000: 400 epochs" in result.warnings[0]
    assert (c["save_every"], c["save_every_unit"], c["save_keep_last"]) == (250, "STEP", 4)
    assert c["output_model_destination"] == str(Path("output") / "my_first_flux_lora_v1" / "my_first_flux_lora_v1.safetensors")
    concept = c["concepts"][0]
    assert (concept["path"], concept["text"]["trigger_word"]) == (str(folder), "p3r5on")
    assert concept["text"]["caption_lines"] == "WHOLE"  # ai-toolkit reads a caption file whole
    assert concept["include_subdirectories"] is True  # ai-toolkit walks the folder's subfolders
    assert "_controls" not in result.warnings[0]
    (folder / "sub" / "_controls").mkdir(parents=True)  # its generated control images: not trained there, said here
    assert "holds a _controls folder" in load_config(tmp_path / "flux.yaml").warnings[0]
    first, second = c["samples"]
    assert first["prompt"] == "p3r5on holding a sign that says 'I LOVE PROMPTS!'"
    assert (first["seed"], second["seed"], first["cfg_scale"], first["diffusion_steps"], first["width"]) == (42, 43, 4.0, 20, 1024)
    assert (c["sample_after"], c["sample_after_unit"]) == (250, "STEP")
    assert "read as ai-toolkit's job 'my_first_flux_lora_v1'" in result.warnings[0]
    assert "not carried over" not in result.warnings[0]  # every value of this example is read


def test_the_job_ai_toolkits_page_saves(tmp_path):
    """Its web UI's job (JSON, its defaults: Flex.1 with the page's settings for every model) and a
    Wan 2.2 A14B job of two experts, a quantized text encoder and layer offloading."""
    folder = _images(tmp_path / "img", 4)
    dataset = {"folder_path": str(folder), "mask_path": None, "mask_min_value": 0.1, "default_caption": "a photo", "caption_ext": "txt",
               "caption_dropout_rate": 0.05, "cache_latents_to_disk": False, "is_reg": False, "network_weight": 1,
               "resolution": [512, 768], "controls": [], "shrink_video_to_frames": True, "num_frames": 1, "flip_x": True,
               "flip_y": False, "num_repeats": 2}
    process = {
        "type": "diffusion_trainer", "training_folder": "output", "sqlite_db_path": "./aitk_db.db", "device": "cuda", "trigger_word": None,
        "performance_log_every": 10,
        "network": {"type": "lora", "linear": 32, "linear_alpha": 32, "conv": 16, "conv_alpha": 16, "lokr_full_rank": True, "lokr_factor": -1,
                    "network_kwargs": {"ignore_if_contains": []}},
        "save": {"dtype": "bf16", "save_every": 250, "max_step_saves_to_keep": 4, "save_format": "diffusers", "push_to_hub": False},
        "datasets": [dataset],
        "train": {"batch_size": 2, "bypass_guidance_embedding": True, "steps": 3000, "gradient_accumulation": 1, "train_unet": True,
                  "train_text_encoder": False, "gradient_checkpointing": True, "noise_scheduler": "flowmatch", "optimizer": "adamw8bit",
                  "timestep_type": "sigmoid", "content_or_style": "balanced", "optimizer_params": {"weight_decay": 1e-4},
                  "unload_text_encoder": False, "cache_text_embeddings": False, "lr": 0.0001, "ema_config": {"use_ema": False, "ema_decay": 0.99},
                  "skip_first_sample": False, "force_first_sample": False, "disable_sampling": False, "dtype": "bf16",
                  "diff_output_preservation": False, "diff_output_preservation_multiplier": 1.0, "diff_output_preservation_class": "person",
                  "switch_boundary_every": 1, "loss_type": "mse"},
        "logging": {"log_every": 1, "use_ui_logger": True},
        "model": {"name_or_path": "ostris/Flex.1-alpha", "quantize": True, "qtype": "qfloat8", "quantize_te": True, "qtype_te": "qfloat8",
                  "arch": "flex1", "low_vram": False, "model_kwargs": {}, "compile": False},
        "sample": {"sampler": "flowmatch", "sample_every": 250, "sample_start_step": 0, "width": 1024, "height": 1024,
                   "samples": [{"prompt": "a bear"}, {"prompt": "a cat", "width": 768, "seed": 7}], "neg": "", "seed": 42, "walk_seed": True,
                   "guidance_scale": 4, "sample_steps": 30, "num_frames": 1, "fps": 1},
    }
    job = {"job": "extension", "config": {"name": "my_first_lora_v1", "process": [process]}, "meta": {"name": "[name]", "version": "1.0"}}
    result = load_config(json.loads(json.dumps(job)))
    c = config_to_dict(result.config)
    assert (c["model_type"], c["lora_rank"], c["batch_size"], c["optimizer"]["weight_decay"]) == ("FLUX_DEV_1", 32, 2, 1e-4)
    concept = c["concepts"][0]
    # flip_x adds a flipped copy of each image there: twice the repeats, each image flipped at random
    assert (concept["balancing"], concept["image"]["enable_random_flip"], concept["text"]["default_caption"]) == (4.0, True, "a photo")
    assert c["epochs"] == 375  # 3000 steps of 4 images x 2 repeats x 2 (flipped) at batch 2
    assert c["samples"][1]["width"] == 768 and c["samples"][1]["seed"] == 7 and c["samples"][0]["seed"] == 42
    assert "Flex.1 is trained as Flux.1" in result.warnings[0]
    # the page's values that change nothing are not listed; bypass_guidance_embedding (Flux's guidance) is
    assert result.warnings[0].endswith("not carried over (left at this trainer's defaults): train.bypass_guidance_embedding.")

    process["model"] = {"name_or_path": "ai-toolkit/Wan2.2-T2V-A14B-Diffusers-bf16", "arch": "wan22_14b", "quantize": True,
                        "qtype": "uint4|ostris/accuracy_recovery_adapters/wan22_14b_t2i_torchao_uint4.safetensors", "quantize_te": True,
                        "qtype_te": "qfloat8", "layer_offloading": True, "layer_offloading_transformer_percent": 0.5,
                        "model_kwargs": {"train_high_noise": False, "train_low_noise": True}}
    process["train"]["timestep_type"] = "linear"
    process["datasets"][0]["num_frames"] = 33
    result = load_config(json.loads(json.dumps(job)))
    c = config_to_dict(result.config)
    assert (c["model_type"], c["trained_expert"], c["frames"], c["timestep_distribution"]) == ("WAN_2_2_T2V_A14B", "LOW_NOISE", "33", "UNIFORM")
    assert (c["transformer"]["weight_dtype"], c["transformer"]["offload_fraction"], c["text_encoder"]["weight_dtype"]) == ("NFLOAT_4", 0.5, "FLOAT_8")
    assert "accuracy recovery adapter is ai-toolkit's own" in result.warnings[0]
    assert c["concepts"][0]["image"]["clip_spread"] is True  # shrink_video_to_frames, its default: num_frames over each clip
    assert c["concepts"][0]["image"]["media"] == "ALL"  # a video dataset reads clips and images there
    process["datasets"][0]["num_frames"] = 1  # a video model's image dataset: its images alone, as there
    assert config_to_dict(load_config(json.loads(json.dumps(job))).config)["concepts"][0]["image"]["media"] == "IMAGES"
    process["datasets"][0]["auto_frame_count"] = True  # a video dataset there too, whatever num_frames says
    assert config_to_dict(load_config(json.loads(json.dumps(job))).config)["concepts"][0]["image"]["media"] == "ALL"
    del process["datasets"][0]["auto_frame_count"]
    process["datasets"][0]["num_frames"] = 33
    process["datasets"][0].update(shrink_video_to_frames=False, fps=16)  # its random window at 16 fps: the same here
    result = load_config(json.loads(json.dumps(job)))
    c = config_to_dict(result.config)
    assert (c["random_clip_window"], c["frame_rate"], c["concepts"][0]["image"]["clip_spread"]) == (True, 16.0, False)


def _job(**process) -> dict:
    return {"job": "extension", "config": {"name": "x", "process": [{"type": "sd_trainer", "model": {"arch": "sdxl", "name_or_path": "m"},
                                                                     "train": {"steps": 10}, **process}]}}


def test_how_ai_toolkit_runs_what_it_is_told(tmp_path):
    """Its own readings of a job: the older gradient_accumulation_steps counts batches as steps;
    Prodigy runs at lr 1 when given one under 0.1; `linear` is torch's LinearLR up from a third of
    the rate; constant_with_warmup warms up 1,000 steps; Adafactor is not clipped; [name] is the
    job's name; the page's SD 1.5 arch; unload_text_encoder and a dataset's LoRA strength are said."""
    folder = _images(tmp_path / "img", 4)
    dataset = [{"folder_path": str(folder), "network_weight": 0.5}]
    train = {"steps": 400, "gradient_accumulation_steps": 4, "optimizer": "prodigy", "lr": 1e-4, "lr_scheduler": "linear",
             "unload_text_encoder": True}
    c_result = load_config(_job(model={"arch": "sd15", "name_or_path": "[name]/model"}, network={"linear": 8}, datasets=dataset, train=train,
                                save={"save_every": 200}))
    c = config_to_dict(c_result.config)
    assert (c["model_type"], c["base_model_name"]) == ("STABLE_DIFFUSION_15", "x/model")
    assert (c["gradient_accumulation_steps"], c["epochs"], c["save_every"]) == (4, 100, 50)  # 100 optimizer steps of 4 batches
    assert (c["optimizer"]["optimizer"], c["learning_rate"]) == ("PRODIGY", 1.0)
    assert (c["learning_rate_scheduler"], c["custom_learning_rate_scheduler"]) == ("CUSTOM", "torch.optim.lr_scheduler.LinearLR")
    assert {p["key"]: p["value"] for p in c["scheduler_params"]} == {"start_factor": repr(1 / 3), "end_factor": "1.0", "total_iters": "100"}
    assert c["layer_filter_preset"] == "attn-mlp"  # a UNet's transformer blocks
    warning = c_result.warnings[0]
    assert "unload_text_encoder: ai-toolkit then trains every image on its trigger word alone" in warning
    assert warning.endswith("not carried over (left at this trainer's defaults): datasets[0].network_weight.")
    c = config_to_dict(load_config(_job(train={"optimizer": "adafactor", "lr_scheduler": "constant_with_warmup"})).config)
    assert (c["clip_grad_norm"], c["learning_rate_warmup_steps"], c["optimizer"]["relative_step"]) == (None, 1000.0, False)


def test_a_dataset_given_as_a_json_file_of_images_and_captions(tmp_path):
    """ai-toolkit's dataset_path as a JSON file ({"<image path>": {"caption": ...}}): a concept in its
    images' folder, the file its Captions file, so the images it names train with its captions."""
    import json

    from PIL import Image

    from ot_gradio.data import scan_concept

    (tmp_path / "img" / "sub").mkdir(parents=True)
    for name in ("a.png", "sub/b.png", "unlisted.png"):
        Image.new("RGB", (16, 16)).save(tmp_path / "img" / name)
    listed = tmp_path / "captions.json"
    listed.write_text(json.dumps({str(tmp_path / "img" / "a.png"): {"caption": "a red fox"},
                                  str(tmp_path / "img" / "sub" / "b.png"): {"caption": "a blue jay", "caption_short": "jay"}}))
    result = load_config(_job(datasets=[{"dataset_path": str(listed), "trigger_word": "ohwx"}, {"dataset_path": "relative.json"}]))
    (concept,) = result.config.concepts
    assert (concept.path, concept.text.captions_file, concept.include_subdirectories) == (str(tmp_path / "img"), str(listed), True)
    assert {i.relpath: i.captions for i in scan_concept(concept).items} == {"a.png": ("a red fox",), "sub/b.png": ("a blue jay",)}
    assert "datasets[1]: relative.json could not be read here for its images' folder" in result.warnings[0]


def test_a_datasets_alpha_mask_is_its_masked_loss(tmp_path):
    """alpha_mask: the image's alpha channel as the loss's mask, transparent areas at mask_min_value,
    the mask scaled to a mean of 1 (Normalize masked area loss); a dataset without it trains whole."""
    masked, plain = _images(tmp_path / "cutouts", 2), _images(tmp_path / "photos", 2)
    job = _job(datasets=[{"folder_path": str(masked), "alpha_mask": True, "mask_min_value": 0.05}, {"folder_path": str(plain)}])
    result = load_config(job)
    c = config_to_dict(result.config)
    assert [x["image"]["alpha_mask"] for x in c["concepts"]] == [True, False]
    assert (c["masked_training"], c["unmasked_probability"], c["unmasked_weight"], c["normalize_masked_area_loss"]) == (
        True, 0.0, 0.05, True)
    assert "alpha_mask" not in result.warnings[0] and "mask_min_value" not in result.warnings[0]


@pytest.mark.parametrize("change, message", [
    ({"model": {"arch": "lumina2", "name_or_path": "x"}}, r"model.arch: 'lumina2' has no model type here"),
    ({"model": {"arch": "krea2", "name_or_path": "x", "model_kwargs": {"edit": True}}}, r"model.arch .krea2.: this job trains Krea 2 to edit"),
    ({"train": {"batch_size": 0}}, r"train.batch_size: 0 is not a batch size"),
    ({"train": {"steps": "1e400"}}, r"train.steps: '1e400' is not a number"),
    ({"train": {"ema_config": {"use_ema": True, "ema_decay": "slow"}}}, r"ema_decay: 'slow' is not a number"),
    ({"datasets": [{"folder_path": "/d", "resolution": [[512, 768]]}]}, r"datasets\[0\].resolution: \[512, 768\] is not a size"),
    ({"sample": {"samples": [{"prompt": "a", "seed": "x"}]}}, r"sample.samples\[0\].seed: 'x' is not a number"),
    ({"slider": {"targets": []}}, r"config.process\[0\].slider: this ai-toolkit job trains a slider"),
    ({"train": {"lr": "fast"}}, r"train.lr: 'fast' is not a number"),
])
def test_jobs_this_trainer_cannot_run_are_refused_by_name(change, message):
    with pytest.raises(ConfigError, match=message):
        load_config(_job(**change))


def test_odd_but_valid_values_import():
    """A sample's `neg: false` (ai-toolkit's default), a scalar resolution, a sample seed of null."""
    c = config_to_dict(load_config(_job(datasets=[{"folder_path": "/d", "resolution": 768}],
                                        sample={"neg": False, "samples": [{"prompt": "a", "neg": False, "seed": None}]})).config)
    assert (c["resolution"], c["samples"][0]["negative_prompt"], c["samples"][0]["seed"]) == ("768", "", 0)


def test_a_yaml_file_is_read_safely(tmp_path):
    """Aliases are refused (nested ones expand a few bytes to billions of values), as are tags that
    build objects and files larger than a job; a YAML error names its line."""
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    (tmp_path / "bomb.yaml").write_text(bomb)
    with pytest.raises(ConfigError, match=r"bomb.yaml: uses a YAML alias \(\*name, line 2\)"):
        load_config(tmp_path / "bomb.yaml")
    (tmp_path / "object.yml").write_text("config: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(ConfigError, match=r"object.yml: not valid YAML .*line 1"):
        load_config(tmp_path / "object.yml")
    (tmp_path / "big.yaml").write_text("a: [" + ",".join(["1"] * 200_000) + "]\n")
    with pytest.raises(ConfigError, match=r"big.yaml: .* is larger than the 256.0 KB a YAML config may have"):
        load_config(tmp_path / "big.yaml")
    (tmp_path / "broken.yaml").write_text("config:\n  name: x\n   bad: [\n")
    with pytest.raises(ConfigError, match=r"broken.yaml: not valid YAML \(.* at line \d+, column \d+\)"):
        load_config(tmp_path / "broken.yaml")


def test_a_samples_control_image_and_krea2s_edit_training():
    """ai-toolkit's `ctrl_img` is the image a Qwen-Image-Edit sample edits; Krea 2's edit training
    (its page's `krea2:o_edit`) has no counterpart and is refused by name."""
    sample = {"samples": [{"prompt": "make it red", "ctrl_img": "/in/cat.png", "ctrl_img_2": "/in/dog.png"}]}
    datasets = [{"folder_path": "/data/edited", "control_path": "/data/sources"}]
    result = load_config(_job(model={"arch": "qwen_image_edit_plus", "name_or_path": "Qwen/Qwen-Image-Edit-2509"}, sample=sample,
                              datasets=datasets))
    assert result.config.samples[0].control_image == "/in/cat.png"
    assert result.config.concepts[0].image.control_folder == "/data/sources"  # its source images, named as the edited ones
    assert result.warnings[0].endswith("not carried over (left at this trainer's defaults): sample.samples[0].ctrl_img_2.")
    with pytest.raises(ConfigError, match=r"model.arch 'krea2:o_edit': this job trains Krea 2 to edit images"):
        load_config(_job(model={"arch": "krea2:o_edit", "name_or_path": "krea/Krea-2-Raw"}))
