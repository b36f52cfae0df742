"""SimpleTuner configs (config/simpletuner_import.py, simpletuner_data.py): its config.json (keys
with `--`, its string booleans) and its multidatabackend.json in a SimpleTuner checkout's layout
(config/, paths relative to the checkout's root), read as SimpleTuner trains them."""

from __future__ import annotations

import json

import pytest

from ot_gradio.config.io import config_to_dict, load_config
from ot_gradio.config.validation import ConfigError

# SimpleTuner's config/config.json.example (a LyCORIS Flux LoRA), its keys with `--` and string booleans
EXAMPLE = {
    "--resume_from_checkpoint": "latest", "--data_backend_config": "config/multidatabackend.json", "--aspect_bucket_rounding": 2,
    "--seed": 42, "--minimum_image_size": 0, "--output_dir": "output/models", "--lora_type": "lycoris",
    "--lycoris_config": "config/lycoris_config.json", "--max_train_steps": 10, "--num_train_epochs": 0,
    "--checkpoint_step_interval": 500, "--checkpoints_total_limit": 5, "--hub_model_id": "simpletuner-lora", "--push_to_hub": "true",
    "--report_to": "wandb", "--model_type": "lora", "--pretrained_model_name_or_path": "black-forest-labs/FLUX.1-dev",
    "--model_family": "flux", "--train_batch_size": 1, "--gradient_checkpointing": "true", "--caption_dropout_probability": 0.1,
    "--resolution_type": "pixel_area", "--resolution": 1024, "--validation_seed": 42, "--validation_step_interval": 500,
    "--validation_resolution": "1024x1024", "--validation_guidance": 3.0, "--validation_num_inference_steps": "20",
    "--validation_prompt": "A photo-realistic image of a cat", "--mixed_precision": "bf16", "--optimizer": "adamw_bf16",
    "--learning_rate": "1e-4", "--lr_scheduler": "polynomial", "--lr_warmup_steps": 100, "--disable_benchmark": "false",
}
# its config/lycoris_config.json.example
LYCORIS = {"algo": "lokr", "multiplier": 1.0, "full_matrix": True, "linear_alpha": 1, "factor": 16,
           "apply_preset": {"target_module": ["Attention", "FeedForward"],
                            "module_algo_map": {"Attention": {"factor": 16}, "FeedForward": {"factor": 8}}}}


@pytest.fixture
def checkout(tmp_path):
    """A SimpleTuner checkout: config/ with the data backend and LyCORIS files, images in datasets/."""
    (tmp_path / "config").mkdir()
    (tmp_path / "datasets" / "cats").mkdir(parents=True)
    for stem in ("a", "b", "c", "d"):
        (tmp_path / "datasets" / "cats" / f"{stem}.png").write_bytes(b"")
        (tmp_path / "datasets" / "cats" / f"{stem}.txt").write_text("a cat")
    backend = [{"id": "cats", "type": "local", "instance_data_dir": "datasets/cats", "caption_strategy": "textfile", "repeats": 2,
                "resolution": 512, "resolution_type": "pixel_area", "crop": False, "cache_dir_vae": "cache/vae"},
               {"id": "text-embeds", "dataset_type": "text_embeds", "default": True, "type": "local", "cache_dir": "cache/text"}]
    (tmp_path / "config" / "multidatabackend.json").write_text(json.dumps(backend))
    (tmp_path / "config" / "lycoris_config.json").write_text(json.dumps(LYCORIS))
    return tmp_path


def load(checkout, data: dict):
    path = checkout / "config" / "config.json"
    path.write_text(json.dumps(data))
    result = load_config(path)
    return config_to_dict(result.config), result.warnings[0]


def test_simpletuners_example_config_reads_as_it_trains(checkout):
    c, warning = load(checkout, EXAMPLE)
    assert (c["model_type"], c["base_model_name"], c["training_method"]) == ("FLUX_DEV_1", "black-forest-labs/FLUX.1-dev", "LORA")
    # its LyCORIS file: LoKr of factor 16, full matrix, alpha 1, on the attention and feed-forward layers
    assert (c["peft_type"], c["lokr_decompose_factor"], c["lokr_full_matrix"], c["lora_alpha"]) == ("LOKR", 16, True, 1.0)
    assert c["layer_filter_preset"] == "attn-mlp"
    # the dataset: repeats 2 = 3 passes, pixel_area 512, captions beside the images, no random crops
    (cats,) = c["concepts"]
    assert (cats["path"], cats["balancing"], cats["image"]["enable_crop_jitter"]) == (str(checkout / "datasets" / "cats"), 3.0, False)
    assert cats["text"]["caption_lines"] == "EACH"  # a caption file's lines are captions of their own, drawn one at a time
    assert c["resolution"] == "512"
    # 10 steps of 12 images at batch 1: one epoch; lr as a string; adamw_bf16's eps 1e-6; value clipping is not norm clipping
    assert c["epochs"] == 1 and c["learning_rate"] == 1e-4 and c["optimizer"]["eps"] == 1e-6 and c["clip_grad_norm"] is None
    assert c["learning_rate_scheduler"] == "LINEAR" and c["learning_rate_warmup_steps"] == 100
    assert c["timestep_distribution"] == "LOGIT_NORMAL" and c["timestep_shift"] == 3.0 and c["transformer"]["guidance_scale"] == 1.0
    assert c["caption_dropout_probability"] == 0.1 and not c["text_encoder"]["train"] and not c["text_encoder_2"]["train"]
    assert c["transformer"]["gradient_checkpointing"] == "ON" and c["train_dtype"] == "BFLOAT_16" and c["seed"] == 42
    assert (c["save_every"], c["save_every_unit"], c["save_keep_last"]) == (500, "STEP", 5)
    assert c["output_model_destination"] == "output/models/pytorch_lora_weights.safetensors" and c["output_model_format"] == "DIFFUSERS_LORA"
    (sample,) = c["samples"]
    assert (sample["prompt"], sample["width"], sample["cfg_scale"], sample["diffusion_steps"], sample["seed"]) == (
        "A photo-realistic image of a cat", 1024, 3.0, 20, 42)
    assert (c["sample_after"], c["sample_after_unit"]) == (500, "STEP")
    assert "read as SimpleTuner trains it" in warning and "max_train_steps 10: 1 epochs" in warning
    assert "clamps each gradient value" in warning and "polynomial" in warning
    assert "not carried over (left" not in warning  # every other key is how SimpleTuner runs (hub, wandb, caches)


def test_a_standard_lora_its_defaults_and_the_families(checkout):
    """Without lora_alpha: alpha = rank; dropout 0.1; the attention projections; a family's default
    flavour where none is named (Flux: FLUX.1 Krea dev); string "false" = the default."""
    c, warning = load(checkout, {"model_family": "flux", "model_type": "lora", "lora_rank": 8, "num_train_epochs": 3,
                                 "gradient_checkpointing": "false"})
    assert (c["base_model_name"], c["lora_rank"], c["lora_alpha"], c["dropout_probability"]) == ("black-forest-labs/FLUX.1-Krea-dev", 8, 8.0, 0.1)
    assert c["layer_filter_preset"] == "custom" and c["layer_filter_regex"] and "to_add_out" in c["layer_filter"]
    assert c["transformer"]["gradient_checkpointing"] == "ON"  # "false" as a string: SimpleTuner's default
    assert c["epochs"] == 3 and c["learning_rate"] == 4e-7 and c["batch_size"] == 4 and "SimpleTuner's default for flux, krea" in warning
    wan, _ = load(checkout, {"--model_family": "wan", "--model_flavour": "i2v-14b-2.2-low", "--model_type": "lora"})
    assert (wan["model_type"], wan["trained_expert"], wan["timestep_shift"]) == ("WAN_2_2_I2V_A14B", "LOW_NOISE", 5.0)
    full, warning = load(checkout, {"model_family": "sdxl", "train_text_encoder": True})
    assert full["training_method"] == "FINE_TUNE" and "full fine-tune, SimpleTuner's default" in warning
    assert not full["text_encoder"]["train"] and full["vae"]["model_name"] == "madebyollin/sdxl-vae-fp16-fix"
    assert "train_text_encoder: SimpleTuner's code freezes the text encoders" in warning
    qwen, _ = load(checkout, {"config": {"model_family": "qwen_image", "model_flavour": "edit-v3", "model_type": "lora"}, "_metadata": {}})
    assert (qwen["model_type"], qwen["base_model_name"]) == ("QWEN_IMAGE_EDIT", "Qwen/Qwen-Image-Edit-2511")  # its web page's file


def test_what_simpletuner_trains_that_has_no_model_type_here_is_refused(checkout):
    for data, message in (({"model_family": "hunyuanvideo"}, "trains HunyuanVideo 1.5"),
                          ({"model_family": "flux", "model_flavour": "kontext"}, "trains Flux Kontext"),
                          ({"model_family": "flux", "controlnet": True}, "trains a ControlNet"),
                          ({"model_family": "mageflow"}, "'mageflow' has no model type here"),
                          ({"model_family": "flux", "model_flavour": "turbo"}, "'turbo' is no flux flavour"),
                          ({"model_family": "flux", "max_train_steps": 10, "num_train_epochs": 2}, "SimpleTuner refuses both")):
        with pytest.raises(ConfigError, match=message):
            load(checkout, data)


def test_the_lora_targets_select_layers_of_each_family():
    """The regex layer filters the import writes match layers of each family's denoiser (a filter
    that matched none would stop the run at its start)."""
    from ot_gradio.config.families import family_info
    from ot_gradio.config.simpletuner_import import ATTENTION, FLUX_TARGETS, OWN_TARGETS
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny
    from ot_gradio.training.lora import select_lora_targets

    cases = [("FLUX_DEV_1", "flux", FLUX_TARGETS["all"]), ("FLUX_DEV_1", "flux", FLUX_TARGETS["all+ffs"]),
             ("FLUX_2", "flux2-dev", OWN_TARGETS["FLUX_2"]), ("WAN_2_1", "wan", ATTENTION), ("Z_IMAGE", "z-image", ATTENTION),
             ("QWEN", "qwen-image", ATTENTION), ("STABLE_DIFFUSION_XL_10_BASE", "sdxl", ATTENTION),
             ("IDEOGRAM_4", "ideogram4", OWN_TARGETS["IDEOGRAM_4"]), ("LTX_2", "ltx2", OWN_TARGETS["LTX_2"])]
    for model_type, tiny, target in cases:
        model = get_family(model_type).load(str(resolve_tiny(f"tiny:{tiny}").diffusers_dir), offline=True)
        denoiser = family_info(model_type).denoiser
        names = select_lora_targets(getattr(model, denoiser), kind="unet", layer_preset="custom", layer_filter=target, layer_filter_regex=True)
        assert names, (model_type, target)
        if model_type in ("IDEOGRAM_4", "LTX_2"):  # the attention projections (SimpleTuner's fused qkv / o, as diffusers names them)
            assert any(n.endswith(".to_q") for n in names), names
        if model_type == "LTX_2":  # not the audio attention, which SimpleTuner leaves out without audio data
            assert not any("video_to_audio_attn" in n for n in names)


def test_what_a_review_against_simpletuners_source_found(checkout):
    """Several square-cropped datasets; PixArt's flavour as written; the LyCORIS file of a packaged
    example (config/examples/...) read, a missing one refused; alpha 0 = the dimension; an FF-only
    preset said; Sana's and Ideogram's own timesteps; SD 2.x with zero terminal SNR;
    peft_lora_target_modules as the layer filter; regularisation data ordinary in a full fine-tune."""
    backend = [{"id": n, "instance_data_dir": "datasets/cats", "crop": True, "is_regularisation_data": n == "reg"} for n in ("a", "reg")]
    (checkout / "config" / "two.json").write_text(json.dumps(backend))
    c, warning = load(checkout, {"model_family": "pixart_sigma", "model_flavour": "900M-1024-v0.6", "model_type": "lora",
                                 "data_backend_config": "config/two.json"})
    assert c["base_model_name"] == "terminusresearch/pixart-900m-1024-ft-v0.6" and c["aspect_ratio_bucketing"] is False
    assert [x["type"] for x in c["concepts"]] == ["STANDARD", "PRIOR_PREDICTION"]
    full, _ = load(checkout, {"model_family": "sd2x", "model_flavour": "2.1", "data_backend_config": "config/two.json"})
    assert [x["type"] for x in full["concepts"]] == ["STANDARD", "STANDARD"] and full["rescale_noise_scheduler_to_zero_terminal_snr"]
    assert not (full["force_epsilon_prediction"] or full["force_v_prediction"])  # SD 2.x: v-prediction, as the model
    # SD 1.x / SDXL: SimpleTuner keeps epsilon with rescale_betas_zero_snr (zero SNR alone trains v here), and
    # reads prediction_type
    sdxl, _ = load(checkout, {"model_family": "sdxl", "rescale_betas_zero_snr": True, "data_backend_config": "config/two.json"})
    assert sdxl["rescale_noise_scheduler_to_zero_terminal_snr"] and sdxl["force_epsilon_prediction"]
    v, _ = load(checkout, {"model_family": "sdxl", "rescale_betas_zero_snr": True, "prediction_type": "v_prediction",
                           "data_backend_config": "config/two.json"})
    assert v["force_v_prediction"] and not v["force_epsilon_prediction"]

    packaged = checkout / "simpletuner" / "examples" / "sdxl.lycoris-lokr"
    packaged.mkdir(parents=True)
    (packaged / "lycoris_config.json").write_text(json.dumps({"algo": "lokr", "linear_dim": 8, "linear_alpha": 0, "factor": 12,
                                                              "apply_preset": {"target_module": ["FeedForward"]}}))
    c, warning = load(checkout, {"model_family": "sdxl", "model_type": "lora", "lora_type": "lycoris",
                                 "lycoris_config": "config/examples/sdxl.lycoris-lokr/lycoris_config.json"})
    assert (c["lokr_dim"], c["lokr_decompose_factor"], c["lora_alpha"], c["layer_filter_preset"]) == (8, 12, 8.0, "attn-mlp")
    assert "target_module ['FeedForward']: here the attention and feed-forward layers" in warning
    with pytest.raises(ConfigError, match="lycoris_config config/gone.json: not found"):
        load(checkout, {"model_family": "sdxl", "model_type": "lora", "lora_type": "lycoris", "lycoris_config": "config/gone.json"})

    sana, _ = load(checkout, {"model_family": "sana", "model_type": "lora", "flow_sigmoid_scale": 2.0})
    assert (sana["timestep_distribution"], sana["timestep_shift"]) == ("UNIFORM", 1.0)
    ideogram, _ = load(checkout, {"model_family": "ideogram", "model_type": "lora"})
    assert (ideogram["noising_weight"], ideogram["timestep_shift"], ideogram["dynamic_timestep_shifting"]) == (0.5, 1.0, True)
    custom, _ = load(checkout, {"model_family": "flux", "model_type": "lora", "peft_lora_target_modules": '["to_q", "proj_mlp"]'})
    assert custom["layer_filter"] == r"(^|\.)(to_q|proj_mlp)$"


def test_disable_multiline_split_reads_a_caption_file_whole(checkout):
    backend = json.loads((checkout / "config" / "multidatabackend.json").read_text())
    backend[0]["disable_multiline_split"] = True
    (checkout / "config" / "multidatabackend.json").write_text(json.dumps(backend))
    c, warning = load(checkout, EXAMPLE)
    assert c["concepts"][0]["text"]["caption_lines"] == "WHOLE"
    assert "disable_multiline_split" not in warning.split("config.json", 1)[1]  # (the test's folder is named after it)


def test_filename_captions_read_underscores_as_spaces(checkout):
    """caption_strategy filename (SimpleTuner's default): the file name, its underscores as spaces."""
    backend = json.loads((checkout / "config" / "multidatabackend.json").read_text())
    del backend[0]["caption_strategy"]
    (checkout / "config" / "multidatabackend.json").write_text(json.dumps(backend))
    c, _ = load(checkout, EXAMPLE)
    assert (c["concepts"][0]["text"]["prompt_source"], c["concepts"][0]["text"]["filename_spaces"]) == ("filename", True)


def test_its_config_env_reads_as_its_arguments(checkout):
    """config.env: its fixed names (MODEL_FAMILY, MAX_NUM_STEPS ...) and TRAINER_EXTRA_ARGS, as text:
    nothing runs, nothing expands."""
    (checkout / "config" / "config.env").write_text(
        "# SimpleTuner\nexport MODEL_TYPE='lora'\nexport MODEL_FAMILY=sd1x\nexport MODEL_FLAVOUR=1.5\nexport MAX_NUM_STEPS=10\n"
        "export NUM_EPOCHS=0\nexport LEARNING_RATE=2e-4\nexport OUTPUT_DIR=$(rm -rf /)\nexport TRAIN_BATCH_SIZE=2\n"
        'export TRAINER_EXTRA_ARGS="--lora_rank=8 --lora_alpha 4"\nexport TRAINER_EXTRA_ARGS+="--seed=7"\n')
    result = load_config(checkout / "config" / "config.env")
    c = config_to_dict(result.config)
    assert (c["model_type"], c["base_model_name"], c["lora_rank"], c["lora_alpha"], c["seed"]) == (
        "STABLE_DIFFUSION_15", "stable-diffusion-v1-5/stable-diffusion-v1-5", 8, 4.0, 7)
    assert c["learning_rate"] == 2e-4 and c["batch_size"] == 2 and c["concepts"][0]["path"] == str(checkout / "datasets" / "cats")
    assert c["output_model_destination"] == "$(rm -rf /)/pytorch_lora_weights.safetensors"  # text, as written
    (checkout / "config" / "bad.env").write_text("export MODEL_TYPE=lora\n")
    with pytest.raises(ConfigError, match="no MODEL_FAMILY"):
        load_config(checkout / "config" / "bad.env")
