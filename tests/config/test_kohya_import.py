"""A kohya_ss / sd-scripts config JSON becomes ours: each setting with a counterpart here carried
over, the dataset's `<repeats>_<name>` folders as concepts, and one warning naming the rest."""

import json

import pytest

from ot_gradio.config.io import load_config
from ot_gradio.config.kohya_import import is_kohya_config, sample_from_kohya

GUI = {  # as kohya_ss's LoRA page saves it (the keys that matter; it writes ~200)
    "LoRA_type": "Standard", "pretrained_model_name_or_path": "stabilityai/stable-diffusion-xl-base-1.0", "sdxl": True,
    "v2": False, "v_parameterization": False, "prior_loss_weight": 0.5, "output_name": "ohwx_v1", "save_model_as": "safetensors",
    "network_dim": 32, "network_alpha": 16, "learning_rate": 1e-4, "unet_lr": 1e-4, "text_encoder_lr": 5e-5, "train_batch_size": 2,
    "epoch": 10, "max_resolution": "1024,1024", "enable_bucket": True, "optimizer": "AdamW8bit",
    "optimizer_args": "weight_decay=0.1 betas=0.9,0.99", "lr_scheduler": "cosine", "lr_warmup": 10, "noise_offset": 0.0357,
    "min_snr_gamma": 5, "seed": 1234, "mixed_precision": "bf16", "save_precision": "fp16", "gradient_checkpointing": True,
    "clip_skip": 2, "shuffle_caption": True, "keep_tokens": 1, "caption_dropout_rate": 0.05, "save_every_n_epochs": 2,
    "sample_every_n_epochs": 1, "sample_prompts": "ohwx woman, smiling --n blurry, lowres --w 832 --h 1216 --d 7 --l 6.5 --s 28\n"
                                                  "# a comment\nohwx woman in a park",
    "xformers": "sdpa", "scale_weight_norms": 1, "max_data_loader_n_workers": 2, "dynamo_backend": "tensorrt", "max_timestep": 1000,
    "debiased_estimation_loss": True, "flip_aug": True, "sample_sampler": "euler_a", "sdxl_no_half_vae": True,
    "vae": "madebyollin/sdxl-vae-fp16-fix", "network_weights": "/loras/previous.safetensors",
}


@pytest.fixture
def kohya(tmp_path):
    for folder in ("img/40_ohwx woman", "img/10_style", "reg/1_woman", "img/notes", "reg/zz_backup"):
        (tmp_path / folder).mkdir(parents=True)
    for image in ("img/40_ohwx woman/a.png", "img/40_ohwx woman/b.jpg", "img/10_style/c.png", "img/10_style/a.txt"):
        (tmp_path / image).write_bytes(b"")  # counted by name: 2 x 40 + 1 x 10 = 90 training images an epoch
    return {**GUI, "train_data_dir": str(tmp_path / "img"), "reg_data_dir": str(tmp_path / "reg"), "output_dir": str(tmp_path / "out")}


def test_a_kohya_ss_lora_config_is_carried_over(kohya, tmp_path):
    result = load_config(kohya)
    c = result.config
    assert (c.model_type.value, c.training_method.value, c.base_model_name) == (
        "STABLE_DIFFUSION_XL_10_BASE", "LORA", "stabilityai/stable-diffusion-xl-base-1.0")
    assert (c.lora_rank, c.lora_alpha, c.peft_type.value, c.layer_filter_preset) == (32, 16.0, "LORA", "attn-mlp")
    assert (c.learning_rate, c.unet.learning_rate, c.text_encoder.learning_rate, c.text_encoder_2.learning_rate) == (1e-4, 1e-4, 5e-5, 5e-5)
    assert c.text_encoder.train and c.text_encoder_2.train and c.caption_dropout_probability == 0.05
    assert (c.batch_size, c.epochs, c.resolution, c.aspect_ratio_bucketing, c.seed) == (2, 10, "1024", True, 1234)
    assert (c.optimizer.optimizer.value, c.optimizer.weight_decay, c.optimizer.beta1, c.optimizer.beta2) == ("ADAMW_8BIT", 0.1, 0.9, 0.99)
    assert (c.learning_rate_scheduler.value, c.learning_rate_warmup_steps) == ("COSINE", 0.1)  # kohya_ss's 10 %
    assert (c.offset_noise_weight, c.loss_weight_fn.value, c.loss_weight_strength) == (0.0357, "MIN_SNR_GAMMA", 5.0)
    assert (c.train_dtype.value, c.output_dtype.value, c.unet.gradient_checkpointing.value, c.text_encoder_layer_skip) == (
        "BFLOAT_16", "FLOAT_16", "ON", 0)  # sd-scripts ignores clip_skip for SDXL
    assert (c.vae.model_name, c.vae.weight_dtype.value, c.lora_model_name) == (
        "madebyollin/sdxl-vae-fp16-fix", "FLOAT_32", "/loras/previous.safetensors")
    assert c.output_model_destination == str(tmp_path / "out" / "ohwx_v1.safetensors") and c.output_model_format.value == "KOHYA_LORA"
    assert (c.save_every, c.save_every_unit.value, c.sample_after, c.sample_after_unit.value) == (2, "EPOCH", 1, "EPOCH")
    # kohya repeats the regularisation images up to the training images' 90 an epoch
    assert [(x.name, x.path, x.balancing, x.balancing_strategy.value, x.loss_weight) for x in c.concepts] == [
        ("style", str(tmp_path / "img" / "10_style"), 10.0, "REPEATS", 1.0),
        ("ohwx woman", str(tmp_path / "img" / "40_ohwx woman"), 40.0, "REPEATS", 1.0),
        ("reg: woman", str(tmp_path / "reg" / "1_woman"), 90.0, "SAMPLES", 0.5)]
    assert (c.text_encoder.stop_training_after_unit.value, c.learning_rate_warmup_steps) == ("NEVER", 0.1)
    assert all(x.text.enable_tag_shuffling and x.text.keep_tags_count == 1 and x.image.enable_random_flip for x in c.concepts)
    assert [x.text.default_caption for x in c.concepts] == ["style", "ohwx woman", "woman"]  # the folders' class tokens
    assert [(s.prompt, s.negative_prompt, s.width, s.height, s.seed, s.cfg_scale, s.diffusion_steps) for s in c.samples] == [
        ("ohwx woman, smiling", "blurry, lowres", 832, 1216, 7, 6.5, 28), ("ohwx woman in a park", "", 1024, 1024, 42, 7.5, 30)]
    assert {s.noise_scheduler.value for s in c.samples} == {"EULER_A"}
    (warning,) = result.warnings
    assert warning.startswith("This kohya_ss config: read as kohya_ss's")
    # how kohya_ss runs (workers, compiler, attention kernel) and its defaults are not listed; one loss
    # weighting is (min-SNR gamma here, not also debiased estimation)
    assert warning.endswith("not carried over (left at this trainer's defaults): debiased_estimation_loss.")
    assert c.lora_max_norm == 1.0  # scale_weight_norms


def test_sections_unet_only_and_other_families(tmp_path):
    sectioned = {"model_arguments": {"pretrained_model_name_or_path": "x", "v2": True, "v_parameterization": True},
                 "additional_network_arguments": {"network_dim": 8, "network_alpha": 4, "unet_lr": 5e-4, "text_encoder_lr": 0,
                                                  "network_args": ["dora_wd=True"]},
                 "optimizer_arguments": {"optimizer_type": "Prodigy", "optimizer_args": ["decouple=True", "d_coef=2", "mystery=1"],
                                         "learning_rate": 1},
                 "training_arguments": {"max_train_epochs": 3, "train_batch_size": 1, "clip_skip": 2, "debiased_estimation_loss": True}}
    assert is_kohya_config(sectioned) and not is_kohya_config({"__version": 11, "network_dim": 8, "output_dir": "x"})
    assert not is_kohya_config({"model_family": "qwen_image", "output_dir": "x", "train_batch_size": 1})  # SimpleTuner's
    result = load_config(sectioned)
    c = result.config
    assert (c.model_type.value, c.learning_rate, c.unet.learning_rate, c.epochs) == ("STABLE_DIFFUSION_21", 1.0, 5e-4, 3)
    assert not c.text_encoder.train  # kohya: a text encoder learning rate of 0 trains the UNet only
    assert c.text_encoder_layer_skip == 1 and c.loss_weight_fn.value == "DEBIASED_ESTIMATION"  # kohya's clip skip 2: one layer
    assert c.lora_decompose and (c.optimizer.optimizer.value, c.optimizer.decouple, c.optimizer.d_coef) == ("PRODIGY", True, 2.0)
    assert "optimizer argument 'mystery' is not carried over" in result.warnings[0]
    finetune = load_config({"pretrained_model_name_or_path": "x", "train_batch_size": 4, "optimizer": "Adafactor",
                            "flux1_checkbox": True, "LoRA_type": "LyCORIS/iA3", "network_dim": 4})
    assert finetune.config.model_type.value == "FLUX_DEV_1" and "LoRA_type 'LyCORIS/iA3' has no counterpart" in finetune.warnings[0]
    dreambooth = load_config({"pretrained_model_name_or_path": "x", "train_batch_size": 4, "optimizer": "Adafactor", "save_model_as": "ckpt"})
    assert dreambooth.config.training_method.value == "FINE_TUNE" and dreambooth.config.output_model_format.value == "SAFETENSORS"


def test_any_section_names_and_the_family_a_file_without_switches_names(tmp_path):
    # sd-scripts reads every table of a --config_file, whatever its name (a config seen in the wild, its paths ours)
    (tmp_path / "run.toml").write_text(
        '[model]\npretrained_model_name_or_path = "/models/flux1-dev.safetensors"\n[training]\nmax_train_epochs = 4\n'
        'train_batch_size = 2\n[optimizer]\noptimizer_type = "AdamW8bit"\nlearning_rate = 2e-4\n[network]\n'
        'network_module = "networks.lora_flux"\nnetwork_dim = 16\nnetwork_alpha = 8\n[logging]\nlog_prefix = "x"\n')
    c = load_config(tmp_path / "run.toml").config
    assert (c.model_type.value, c.epochs, c.batch_size, c.optimizer.optimizer.value, c.learning_rate, c.lora_rank) == (
        "FLUX_DEV_1", 4, 2, "ADAMW_8BIT", 2e-4, 16)
    # no family switch: sdxl_train_network.py's [sdxl_arguments] section, or the base model's name, says the family
    base = {"network_dim": 8, "output_dir": "/out"}
    sdxl = load_config({"sdxl_arguments": {"cache_text_encoder_outputs": False},
                        "model_arguments": {"pretrained_model_name_or_path": "/m/mymodel.safetensors"}, **base})
    assert sdxl.config.model_type.value == "STABLE_DIFFUSION_XL_10_BASE" and "from its [sdxl_arguments] section" in sdxl.warnings[0]
    for name, family in (("/m/lustifySDXLNSFW_v7.safetensors", "STABLE_DIFFUSION_XL_10_BASE"),
                         ("/m/illustriousXL_v01.safetensors", "STABLE_DIFFUSION_XL_10_BASE"),
                         ("/m/ponyDiffusionV6.safetensors", "STABLE_DIFFUSION_XL_10_BASE"),
                         ("/m/XLabs-flux-dev.safetensors", "FLUX_DEV_1"), ("/m/mixlora_v2.safetensors", "STABLE_DIFFUSION_15"),
                         ("/m/animagine-xl-3.1.safetensors", "STABLE_DIFFUSION_XL_10_BASE"),
                         ("/m/realvisxlV40.safetensors", "STABLE_DIFFUSION_XL_10_BASE"),
                         ("/m/zavychromaxl_v80.safetensors", "STABLE_DIFFUSION_XL_10_BASE"),  # an SDXL model, no Chroma
                         ("/m/PixArt-XL-2-1024-MS.safetensors", "STABLE_DIFFUSION_15"),  # no family sd-scripts trains here
                         ("/m/dreamshaper_8.safetensors", "STABLE_DIFFUSION_15"),
                         ("/m/sd3.5_medium.safetensors", "STABLE_DIFFUSION_35"), ("/m/chroma-unlocked-v50.safetensors", "CHROMA_1"),
                         ("/m/v1-5-pruned-emaonly.safetensors", "STABLE_DIFFUSION_15")):
        result = load_config({**base, "pretrained_model_name_or_path": name})
        assert result.config.model_type.value == family, name
        assert ("from the base model's name" in result.warnings[0]) == (family != "STABLE_DIFFUSION_15")
    # sd-scripts' plain LoRA module trains SD and SDXL only; its v2 = false is no kohya_ss page
    lora = load_config({**base, "network_module": "networks.lora", "pretrained_model_name_or_path": "/m/flux1-dev.safetensors"})
    assert lora.config.model_type.value == "STABLE_DIFFUSION_15" and "SD 1.5 is assumed" in lora.warnings[0]
    v2 = load_config({**base, "v2": False, "pretrained_model_name_or_path": "/m/illustriousXL_v01.safetensors"})
    assert v2.config.model_type.value == "STABLE_DIFFUSION_XL_10_BASE" and not v2.config.aspect_ratio_bucketing  # no enable_bucket
    # the note names the family only where the name decided it (a Flux module and T5 file say Flux)
    flux = load_config({**base, "network_module": "networks.lora_flux", "t5xxl": "/m/t5.safetensors",
                        "pretrained_model_name_or_path": "/m/ponyXL.safetensors"})
    assert flux.config.model_type.value == "FLUX_DEV_1" and "base model's name" not in flux.warnings[0]
    # kohya_ss's page always says the family: its switches win over the name
    gui = load_config({**base, "pretrained_model_name_or_path": "/m/lustifySDXLNSFW_v7.safetensors", "sdxl": False, "v2": False})
    assert gui.config.model_type.value == "STABLE_DIFFUSION_15" and "base model's name" not in gui.warnings[0]


def test_a_kohya_folder_without_repeats_folders_is_one_concept_and_a_prompt_file_is_named_not_read(tmp_path):
    """An import opens no file it names (a share link's user could otherwise read any file as prompts)."""
    (tmp_path / "prompts.txt").write_text("a cat --w 512 --h 768\n")
    result = load_config({"pretrained_model_name_or_path": "x", "train_data_dir": str(tmp_path), "network_dim": 4,
                          "sample_prompts": str(tmp_path / "prompts.txt")})
    assert [(x.path, x.balancing) for x in result.config.concepts] == [(str(tmp_path), 1.0)]
    assert "has no `<repeats>_<name>` folder here" in result.warnings[0]
    assert f"sample_prompts names a file ({tmp_path / 'prompts.txt'}): put its prompts in the Sampling tab" in result.warnings[0]
    assert result.config.samples == [] or all("a cat" not in s.prompt for s in result.config.samples)


def test_sample_lines_split_as_sd_scripts_splits_them():
    """On ` --`, any case; a bad value or an option of sd-scripts' own (`--g`, `--cn`) is skipped."""
    assert sample_from_kohya("a dog --w wide --s 12") == {"prompt": "a dog", "diffusion_steps": 12}
    assert sample_from_kohya("a cat --N blurry --W 768 --g 3.5 --ss euler_a --l 5") == {
        "prompt": "a cat", "negative_prompt": "blurry", "width": 768, "noise_scheduler": "EULER_A", "cfg_scale": 5.0}


def test_a_saved_kohya_file_loads_by_path(kohya, tmp_path):
    path = tmp_path / "kohya.json"
    path.write_text(json.dumps(kohya))
    assert load_config(path).warnings[0].startswith(f"kohya_ss config {path}: read as kohya_ss's")


def test_a_value_that_is_no_number_names_its_key():
    from ot_gradio.config.validation import ConfigError

    with pytest.raises(ConfigError, match=r"^network_dim: 'big' is not a number \(kohya_ss config\)"):
        load_config({"pretrained_model_name_or_path": "x", "network_dim": "big"})
    with pytest.raises(ConfigError, match=r"^optimizer_args: 'betas=0.9' is not a value"):
        load_config({"pretrained_model_name_or_path": "x", "network_dim": 4, "optimizer": "AdamW", "optimizer_args": "betas=0.9"})


TRAINING_TOML = """
[model_arguments]
pretrained_model_name_or_path = "stable-diffusion-v1-5/stable-diffusion-v1-5"

[additional_network_arguments]
network_module = "networks.lora"
network_dim = 16
network_alpha = 8
unet_lr = 5e-4
text_encoder_lr = 1e-4

[optimizer_arguments]
optimizer_type = "AdamW8bit"
learning_rate = 5e-4
lr_scheduler = "cosine_with_restarts"
lr_scheduler_num_cycles = 3
lr_warmup_steps = 20

[training_arguments]
max_train_epochs = 10
mixed_precision = "fp16"

[saving_arguments]
output_dir = "out"
output_name = "mychar"

[dataset_arguments]
dataset_config = "dataset_config.toml"
"""
DATASET_TOML = """
[general]
shuffle_caption = true
keep_tokens = 1

[[datasets]]
resolution = [512, 768]
batch_size = 2

  [[datasets.subsets]]
  image_dir = "/data/mychar"
  num_repeats = 10
  class_tokens = "mychar girl"

  [[datasets.subsets]]
  image_dir = "/data/reg"
  num_repeats = 1
  is_reg = true
  keep_tokens = 0
"""


def test_sd_scripts_toml_training_and_dataset_configs(tmp_path):
    """sd-scripts' sectioned training TOML (as the popular Colab trainers write it) with its
    dataset TOML beside it: subsets are concepts with their repeats, general options merged."""
    (tmp_path / "training_config.toml").write_text(TRAINING_TOML)
    (tmp_path / "dataset_config.toml").write_text(DATASET_TOML)
    result = load_config(tmp_path / "training_config.toml")
    c = result.config
    assert (c.model_type.value, c.lora_rank, c.lora_alpha, c.unet.learning_rate, c.text_encoder.learning_rate) == (
        "STABLE_DIFFUSION_15", 16, 8.0, 5e-4, 1e-4)
    assert (c.optimizer.optimizer.value, c.learning_rate_scheduler.value, c.learning_rate_cycles, c.learning_rate_warmup_steps) == (
        "ADAMW_8BIT", "COSINE_WITH_RESTARTS", 3.0, 20.0)
    assert (c.epochs, c.train_dtype.value, c.resolution, c.batch_size) == (10, "FLOAT_16", "512x768", 2)
    assert [(x.name, x.path, x.balancing, x.text.enable_tag_shuffling, x.text.keep_tags_count) for x in c.concepts] == [
        ("mychar", "/data/mychar", 10.0, True, 1), ("reg: reg", "/data/reg", 1.0, True, 0)]
    assert "network_module" not in result.warnings[0] and "class_tokens" not in result.warnings[0]
    assert [x.text.default_caption for x in c.concepts] == ["mychar girl", ""]  # kohya's caption for images without a file
    assert {x.text.caption_lines for x in c.concepts} == {"FIRST"}  # sd-scripts reads a caption file's first line
    alone = load_config(tmp_path / "dataset_config.toml")  # the dataset file by itself: its concepts
    assert [x.path for x in alone.config.concepts] == ["/data/mychar", "/data/reg"]
    (tmp_path / "bad.toml").write_text("[model_arguments\\n")
    from ot_gradio.config.validation import ConfigError

    with pytest.raises(ConfigError, match=r"bad.toml: not valid TOML"):
        load_config(tmp_path / "bad.toml")


def test_what_kohya_does_with_switches_rates_and_defaults(tmp_path):
    """From a review against sd-scripts' and kohya_ss's source: string switches, a learning rate
    of 0 as that part untrained, Flux's T5 only when asked, v-prediction without v2, warmup and
    keep_tokens at kohya's defaults, and the training config's caption options under a dataset's."""
    base = {"pretrained_model_name_or_path": "x", "network_dim": 4}
    c = load_config({**base, "sdxl": "false", "unet_lr": 0, "text_encoder_lr": [1e-4, 5e-5], "v_parameterization": "true"}).config
    assert c.model_type.value == "STABLE_DIFFUSION_15" and not c.unet.train and c.text_encoder.train
    assert c.text_encoder.learning_rate == 1e-4 and c.force_v_prediction
    assert (c.learning_rate_warmup_steps, c.text_encoder.stop_training_after_unit.value) == (0.0, "NEVER")
    c = load_config({**base, "text_encoder_lr": 0, "lr_warmup_steps": 0.05}).config
    assert not c.text_encoder.train and c.unet.train and c.learning_rate_warmup_steps == 0.05  # below 1: a fraction
    flux = load_config({**base, "network_module": "networks.lora_flux", "resolution": "512,768", "text_encoder_lr": 1e-5})
    c = flux.config
    assert (c.model_type.value, c.resolution) == ("FLUX_DEV_1", "512x768")
    assert c.text_encoder.train and not c.text_encoder_2.train  # sd-scripts trains T5 only with train_t5xxl
    assert load_config({**base, "network_module": "networks.lora_flux", "train_t5xxl": True}).config.text_encoder_2.train
    plain = load_config({**base, "train_batch_size": 1})
    assert "no model family is named" in plain.warnings[0]

    (tmp_path / "d.toml").write_text('[[datasets]]\n[[datasets.subsets]]\nimage_dir = "/a"\nnum_repeats = 3\n'
                                     '[[datasets.subsets]]\nimage_dir = "/b"\nnum_repeats = 0\n'
                                     '[[datasets.subsets]]\nimage_dir = "/r"\nis_reg = "false"\nshuffle_caption = false\n')
    result = load_config({**base, "sdxl": True, "dataset_config": str(tmp_path / "d.toml"), "shuffle_caption": True, "keep_tokens": 2})
    assert [(x.path, x.balancing, x.name.startswith("reg"), x.text.enable_tag_shuffling, x.text.keep_tags_count)
            for x in result.config.concepts] == [("/a", 3.0, False, True, 2), ("/r", 1.0, False, False, 2)]
    assert "b: num_repeats 0, which kohya skips" in result.warnings[0]
    assert load_config({**base, "train_data_dir": str(tmp_path)}).config.concepts[0].text.keep_tags_count == 0
    wild = load_config({**base, "train_data_dir": str(tmp_path), "enable_wildcard": True})  # a line drawn each time, as here
    assert wild.config.concepts[0].text.caption_lines == "EACH" and "{a|b} choices are not expanded" in wild.warnings[0]


def test_how_long_kohya_trains(tmp_path):
    """sd-scripts trains max_train_epochs, else max_train_steps (1600 when neither is set); kohya_ss's
    page turns its `epoch` into the steps only when it has none. Steps become the epochs that hold
    them: 3 images x 10 repeats at batch 2 are 15 steps an epoch."""
    folder = tmp_path / "img" / "10_ohwx"
    folder.mkdir(parents=True)
    for name in ("a.png", "b.png", "c.jpg"):
        (folder / name).write_bytes(b"")
    base = {"pretrained_model_name_or_path": "x", "network_dim": 4, "train_batch_size": 2, "train_data_dir": str(tmp_path / "img")}
    assert load_config({**base, "epoch": 7}).config.epochs == 7
    assert load_config({**base, "epoch": 7, "max_train_epochs": 3, "max_train_steps": 1000}).config.epochs == 3
    steps = load_config({**base, "epoch": 4, "max_train_steps": 100})  # kohya_ss passes the steps; its epoch is unused
    assert steps.config.epochs == 7  # ceil(100 / 15)
    assert "max_train_steps 100: 7 epochs of about 15 steps here" in steps.warnings[0]
    assert "epoch" not in steps.warnings[0].partition("not carried over")[2]
    default = load_config({**base, "gradient_accumulation_steps": 3})  # 1600 steps of 5 an epoch
    assert default.config.epochs == 320 and "sd-scripts trains 1600 steps then" in default.warnings[0]
    unread = load_config({**base, "max_train_steps": 100}, readable=[tmp_path / "elsewhere"])
    assert unread.config.epochs == 100 and "the images were not counted: set Epochs to 100 x batch size" in unread.warnings[0]
    saves = load_config({**base, "save_every_n_steps": 50, "max_train_epochs": 2})
    assert (saves.config.save_every, saves.config.save_every_unit.value) == (50, "STEP")


def test_sd_scripts_fine_tuning_metadata_is_the_concepts_captions_file(tmp_path):
    """sd-scripts' fine-tuning method: `in_json` with `train_data_dir` (the images themselves, not
    `<repeats>_<name>` folders; `dataset_repeats` times an epoch; reg_data_dir unread there; a
    relative in_json beside the config), a dataset TOML's `metadata_file` subsets, with image_dir or
    (merge_captions_to_metadata.py's --full_path, --recursive) without it, and kohya_ss's fine-tune
    page's metadata in train_dir where the page does not make it anew: the concept's Captions file,
    whose images and captions the run reads; caption_separator is the tag delimiter."""
    from PIL import Image

    from ot_gradio.data import scan_concept

    images = tmp_path / "train"
    (images / "sub").mkdir(parents=True)
    for name in ("a.png", "b.png", "sub/s.png"):
        Image.new("RGB", (16, 16)).save(images / name)
    meta = tmp_path / "meta_lat.json"
    meta.write_text(json.dumps({"a": {"caption": "a fox", "tags": "red, fox", "train_resolution": [512, 512]},
                                "b": {"tags": "only tags"}}))
    (tmp_path / "kohya.json").write_text(json.dumps({
        "pretrained_model_name_or_path": "/m/sdxl.safetensors", "sdxl": True, "in_json": "meta_lat.json",
        "train_data_dir": str(images), "dataset_repeats": 10, "reg_data_dir": str(tmp_path / "reg"), "caption_separator": ";"}))
    result = load_config(tmp_path / "kohya.json")
    (concept,) = result.config.concepts
    assert (concept.path, concept.balancing, concept.text.captions_file, concept.text.tag_delimiter) == (
        str(images), 10.0, str(meta), ";")
    warning = result.warnings[0]
    assert "not carried over" not in warning or not any(k in warning.split("not carried over")[-1]
                                                        for k in ("in_json", "caption_separator", "dataset_repeats"))
    assert "reg_data_dir is not read with in_json" in warning and "meta_lat.json is its Captions file" in warning
    assert {i.relpath: i.captions for i in scan_concept(concept).items} == {"a.png": ("a fox;red, fox",), "b.png": ("only tags",)}

    full = tmp_path / "meta_full.json"  # --full_path --recursive: whole paths, subfolders, no image_dir needed
    full.write_text(json.dumps({str(images / "a.png"): {"caption": "whole path"}, str(images / "sub" / "s.png"): {"caption": "s"}}))
    (tmp_path / "dataset.toml").write_text(f'[[datasets]]\n  [[datasets.subsets]]\n  metadata_file = "{full}"\n  num_repeats = 3\n'
                                           f'  [[datasets.subsets]]\n  metadata_file = "{meta}"\n  image_dir = "{images}"\n'
                                           f'  [[datasets.subsets]]\n  image_dir = "{images}"\n'
                                           f'  [[datasets.subsets]]\n  metadata_file = "{tmp_path / "nowhere.json"}"\n')
    result = load_config({"pretrained_model_name_or_path": "/m/sd15.safetensors", "dataset_config": str(tmp_path / "dataset.toml"),
                          "dataset_repeats": 4})
    assert [(c.path, c.balancing, c.text.captions_file) for c in result.config.concepts] == [
        (str(images), 3.0, str(full)), (str(images), 4.0, str(meta)), (str(images), 4.0, "")]  # (dataset_repeats: sd-scripts')
    assert "a dataset subset without image_dir (" in result.warnings[0] and "as its Captions file" in result.warnings[0]
    assert "mixes subsets with and without metadata_file, which sd-scripts refuses" in result.warnings[0]
    assert {i.relpath: i.captions for i in scan_concept(result.config.concepts[0]).items} == {
        "a.png": ("whole path",), "sub/s.png": ("s",)}

    page = {"pretrained_model_name_or_path": "/m/sd15.safetensors", "image_folder": str(images), "train_dir": str(tmp_path), "train_batch_size": 1,
            "caption_metadata_filename": "meta_cap.json", "latent_metadata_filename": "meta_lat.json", "use_latent_files": "Yes",
            "dataset_repeats": "2"}
    made = load_config({**page, "generate_caption_database": True}).config.concepts[0]  # made anew from the caption files
    kept = load_config({**page, "generate_caption_database": False}).config.concepts[0]
    assert (made.text.captions_file, kept.text.captions_file, kept.balancing) == ("", str(meta), 2.0)


def test_zero_terminal_snr_keeps_the_prediction_sd_scripts_trains():
    """Zero terminal SNR alone trains v-prediction here (as OneTrainer); sd-scripts' zero_terminal_snr
    keeps epsilon unless v_parameterization is on."""
    base = {"pretrained_model_name_or_path": "x", "network_dim": 8, "zero_terminal_snr": True}
    epsilon = load_config(base).config
    assert epsilon.rescale_noise_scheduler_to_zero_terminal_snr and epsilon.force_epsilon_prediction
    v = load_config({**base, "v_parameterization": True}).config
    assert v.rescale_noise_scheduler_to_zero_terminal_snr and v.force_v_prediction and not v.force_epsilon_prediction


def test_a_one_step_warmup_is_no_warmup_not_the_whole_run():
    """Warmup 1 reads as the whole run (OneTrainer's fraction up to 1): sd-scripts' lr_warmup_steps 1
    is no warmup here; 2 steps stay 2."""
    base = {"pretrained_model_name_or_path": "x", "network_dim": 8}
    assert load_config({**base, "lr_warmup_steps": 1}).config.learning_rate_warmup_steps == 0
    assert load_config({**base, "lr_warmup_steps": 2}).config.learning_rate_warmup_steps == 2
