"""diffusion-pipe configs (config/dpipe_import.py, dpipe_data.py): its main TOML and its dataset
TOML in a diffusion-pipe checkout's layout (`examples/`, paths relative to the checkout's root),
read as diffusion-pipe trains them."""

from __future__ import annotations

import json

import pytest

from ot_gradio.config.io import config_to_dict, load_config
from ot_gradio.config.validation import ConfigError

# diffusion-pipe's examples/main_example.toml (HunyuanVideo from ComfyUI's files), trimmed of its comments
MAIN_EXAMPLE = """output_dir = '/data/diffusion_pipe_training_runs/hunyuan_video_test'
dataset = 'examples/dataset.toml'
epochs = 1000
micro_batch_size_per_gpu = 1
pipeline_stages = 1
gradient_accumulation_steps = 1
gradient_clipping = 1.0
warmup_steps = 100
eval_every_n_epochs = 1
eval_before_first_step = true
eval_micro_batch_size_per_gpu = 1
eval_gradient_accumulation_steps = 1
save_every_n_epochs = 2
checkpoint_every_n_minutes = 120
activation_checkpointing = true
partition_method = 'parameters'
save_dtype = 'bfloat16'
caching_batch_size = 1
steps_per_print = 1
video_clip_mode = 'single_beginning'

[model]
type = 'hunyuan-video'
transformer_path = '/models/hunyuan_video_720_cfgdistill_fp8_e4m3fn.safetensors'
vae_path = '/models/hunyuan_video_vae_bf16.safetensors'
llm_path = '/models/llava-llama-3-8b-text-encoder-tokenizer'
clip_path = '/models/clip-vit-large-patch14'
dtype = 'bfloat16'
transformer_dtype = 'float8'
timestep_sample_method = 'logit_normal'

[adapter]
type = 'lora'
rank = 32
dtype = 'bfloat16'

[optimizer]
type = 'adamw_optimi'
lr = 2e-5
betas = [0.9, 0.99]
weight_decay = 0.01
eps = 1e-8

[monitoring]
enable_wandb = false
"""
DATASET = """resolutions = [512, 768]
enable_ar_bucket = true
min_ar = 0.5
max_ar = 2.0
num_ar_buckets = 7
frame_buckets = [1, 33]

[[directory]]
path = 'data/cats'
num_repeats = 2
caption_prefix = 'sks cat, '

[[directory]]
path = 'data/dogs'
"""


@pytest.fixture
def checkout(tmp_path):
    """A diffusion-pipe checkout: configs in examples/, images in data/ (one dog without a caption)."""
    (tmp_path / "examples").mkdir()
    for name, captioned in (("cats", ("a", "b")), ("dogs", ("a",))):
        (tmp_path / "data" / name).mkdir(parents=True)
        for stem in ("a", "b"):
            (tmp_path / "data" / name / f"{stem}.png").write_bytes(b"")
        for stem in captioned:
            (tmp_path / "data" / name / f"{stem}.txt").write_text("a photo")
    (tmp_path / "examples" / "dataset.toml").write_text(DATASET)
    return tmp_path


def load(checkout, text: str, name: str = "config.toml"):
    path = checkout / "examples" / name
    path.write_text(text)
    result = load_config(path)
    return config_to_dict(result.config), result.warnings[0]


def test_diffusion_pipes_main_example_reads_as_it_trains(checkout):
    config, warning = load(checkout, MAIN_EXAMPLE)
    assert config["random_clip_window"] is False  # video_clip_mode 'single_beginning': each clip's first frames
    overlapping, notes = load(checkout, MAIN_EXAMPLE.replace("'single_beginning'", "'multiple_overlapping'"))
    assert overlapping["random_clip_window"] is True and "overlapping windows of each clip" in notes
    assert config["model_type"] == "HUNYUAN_VIDEO" and config["base_model_name"] == "hunyuanvideo-community/HunyuanVideo"
    assert config["transformer"]["model_name"] == "/models/hunyuan_video_720_cfgdistill_fp8_e4m3fn.safetensors"
    assert config["transformer"]["weight_dtype"] == "FLOAT_8" and config["text_encoder"]["weight_dtype"] == "BFLOAT_16"
    assert config["train_dtype"] == "BFLOAT_16" and config["lora_weight_dtype"] == "BFLOAT_16" and config["output_dtype"] == "BFLOAT_16"
    # alpha = rank, every linear layer of the blocks, logit-normal timesteps, guidance 1 (x1000 as the model reads it)
    assert (config["training_method"], config["lora_rank"], config["lora_alpha"], config["layer_filter_preset"]) == ("LORA", 32, 32.0, "blocks")
    assert config["timestep_distribution"] == "LOGIT_NORMAL" and config["noising_weight"] == 0.0 and config["timestep_shift"] == 1.0
    assert config["transformer"]["guidance_scale"] == 1.0
    assert (config["epochs"], config["batch_size"], config["gradient_accumulation_steps"], config["clip_grad_norm"]) == (1000, 1, 1, 1.0)
    assert config["learning_rate_warmup_steps"] == 100 and config["learning_rate_scheduler"] == "CONSTANT"
    assert (config["save_every"], config["save_every_unit"], config["backup_after"], config["backup_after_unit"]) == (2, "EPOCH", 120, "MINUTE")
    assert config["transformer"]["gradient_checkpointing"] == "ON"
    assert config["output_model_format"] == "COMFY_LORA"  # ComfyUI's names, as diffusion-pipe writes Wan's, Qwen's ...
    assert not config["text_encoder"]["train"] and not config["text_encoder_2"]["train"]  # the transformer alone
    assert config["optimizer"]["optimizer"] == "ADAMW" and config["learning_rate"] == 2e-5
    assert (config["optimizer"]["beta1"], config["optimizer"]["beta2"], config["optimizer"]["eps"], config["optimizer"]["weight_decay"]) == (0.9, 0.99, 1e-8, 0.01)
    assert config["output_model_destination"] == "/data/diffusion_pipe_training_runs/hunyuan_video_test/config.safetensors"
    # the dataset TOML, found from the checkout's root as diffusion-pipe runs there; its folders relative to it
    assert config["resolution"] == "512,768" and config["aspect_ratio_bucketing"] is True and config["frames"] == "33"
    cats, dogs = config["concepts"]  # diffusion-pipe's epoch: each image at each of the 2 resolutions
    assert (cats["path"], cats["balancing"], cats["text"]["caption_prefix"]) == (str(checkout / "data" / "cats"), 4.0, "sks cat, ")
    assert (dogs["path"], dogs["balancing"]) == (str(checkout / "data" / "dogs"), 2.0)
    assert not cats["image"]["enable_crop_jitter"]  # diffusion-pipe centre-crops
    assert config["frame_rate"] == 24.0  # HunyuanVideo's clips at 24 fps there
    assert "read as diffusion-pipe trains it" in warning
    assert "the VAE hunyuan_video_vae_bf16.safetensors is not read here" in warning
    # its llm_path folder (transformers' layout) and clip_path folder: the text encoders' own, as there
    assert config["text_encoder"]["model_name"] == "/models/llava-llama-3-8b-text-encoder-tokenizer"
    assert config["text_encoder_2"]["model_name"] == "/models/clip-vit-large-patch14"
    assert "dataset.directory[1]: 1 images have no caption file, which diffusion-pipe leaves out" in warning
    assert "each step trains at one of them" in warning  # two resolutions
    assert "not carried over" not in warning  # its eval settings do nothing without eval_datasets, there too


def test_wan_from_its_official_folder_and_comfyui_files(checkout):
    """The variant from ckpt_path's config.json, as diffusion-pipe tells it; an A14B expert's file
    and min_t / max_t its range pick the expert; the UMT5 file and the transformer file are read."""
    folder = checkout / "models" / "Wan2.2-I2V-A14B"
    (folder / "low_noise_model").mkdir(parents=True)
    (folder / "low_noise_model" / "config.json").write_text(json.dumps({"model_type": "i2v", "dim": 5120}))
    text = (f"output_dir = 'out'\ndataset = 'examples/dataset.toml'\nepochs = 3\nblocks_to_swap = 20\nactivation_checkpointing = 'unsloth'\n"
            f"[model]\ntype = 'wan'\nckpt_path = '{folder}'\ntransformer_path = '/m/wan2.2_i2v_high_noise_14B_fp16.safetensors'\n"
            f"llm_path = '/m/umt5_xxl_fp16.safetensors'\ndtype = 'bfloat16'\ntext_encoder_fp8 = true\nmin_t = 0.9\nmax_t = 1.0\n"
            f"shift = 5.0\ntimestep_sample_method = 'uniform'\n[adapter]\ntype = 'lora'\nrank = 16\n[optimizer]\ntype = 'adamw_optimi'\nlr = 1e-4\n")
    config, warning = load(checkout, text)
    assert config["model_type"] == "WAN_2_2_I2V_A14B" and config["base_model_name"] == "Wan-AI/Wan2.2-I2V-A14B-Diffusers"
    assert config["trained_expert"] == "HIGH_NOISE"
    assert not config["transformer"]["model_name"]  # an A14B expert loads from its diffusers repo here
    assert "the transformer wan2.2_i2v_high_noise_14B_fp16.safetensors is not read here (Wan 2.2 I2V A14B reads no transformer" in warning
    assert config["text_encoder"]["model_name"] == "/m/umt5_xxl_fp16.safetensors" and config["text_encoder"]["weight_dtype"] == "FLOAT_8"
    assert config["timestep_distribution"] == "UNIFORM" and config["timestep_shift"] == 5.0
    assert config["transformer"]["offload_fraction"] == 0.5 and config["transformer"]["activation_offloading"] is True
    # adamw_optimi's own defaults where the file is silent
    assert (config["optimizer"]["beta2"], config["optimizer"]["eps"], config["optimizer"]["weight_decay"]) == (0.99, 1e-6, 0.01)
    assert "config.json was not read" not in warning


@pytest.mark.parametrize("model, expected", [
    ("type = 'z_image'\ndiffusion_model = '/m/z_image_bf16.safetensors'\nvae = '/m/ae.safetensors'\n"
     "text_encoders = [{path = '/m/qwen_3_4b.safetensors', type = 'lumina2'}]\nmerge_adapters = ['/m/zimage_turbo_training_adapter.safetensors']\n",
     {"model_type": "Z_IMAGE", "transformer": "/m/z_image_bf16.safetensors", "text_encoder": "/m/qwen_3_4b.safetensors",
      "note": "merge_adapters / fuse_adapters: diffusion-pipe merges those LoRAs"}),
    ("type = 'flux2'\ndiffusion_model = '/m/flux-2-klein-base-9b.safetensors'\nvae = '/m/flux2-vae.safetensors'\n"
     "text_encoders = [{path = '/m/qwen_3_8b.safetensors', type = 'flux2'}]\n",
     {"model_type": "FLUX_2", "base": "black-forest-labs/FLUX.2-klein-base-9B", "text_encoder": "/m/qwen_3_8b.safetensors"}),
    ("type = 'qwen_image'\ntransformer_path = '/m/qwen_image_edit_2509_bf16.safetensors'\ntext_encoder_path = '/m/qwen_2.5_vl_7b.safetensors'\n",
     {"model_type": "QWEN_IMAGE_EDIT", "base": "Qwen/Qwen-Image-Edit-2509", "text_encoder": "/m/qwen_2.5_vl_7b.safetensors"}),
    ("type = 'sdxl'\ncheckpoint_path = '/m/illustriousXL.safetensors'\nunet_lr = 4e-5\ntext_encoder_1_lr = 2e-5\n",
     {"model_type": "STABLE_DIFFUSION_XL_10_BASE", "base": "/m/illustriousXL.safetensors"}),
    ("type = 'flux'\ndiffusers_path = '/m/FLUX.1-dev'\ntransformer_path = '/m/flux1-dev.safetensors'\nflux_shift = true\nguidance = 1.0\n",
     {"model_type": "FLUX_DEV_1", "base": "/m/FLUX.1-dev", "transformer": "/m/flux1-dev.safetensors"}),
])
def test_each_family_reads_its_files(checkout, model, expected):
    config, warning = load(checkout, f"output_dir = 'out'\nepochs = 2\n[model]\n{model}dtype = 'bfloat16'\n"
                                     "[adapter]\ntype = 'lora'\nrank = 8\n[optimizer]\ntype = 'adamw'\nlr = 1e-4\n")
    assert config["model_type"] == expected["model_type"]
    if "base" in expected:
        assert config["base_model_name"] == expected["base"]
    if "transformer" in expected:
        denoiser = "unet" if config["model_type"] == "STABLE_DIFFUSION_XL_10_BASE" else "transformer"
        assert config[denoiser]["model_name"] == expected["transformer"]
    if "text_encoder" in expected:
        assert config["text_encoder"]["model_name"] == expected["text_encoder"]
    if "note" in expected:
        assert expected["note"] in warning
    if config["model_type"] == "STABLE_DIFFUSION_XL_10_BASE":  # its LoRA trains both text encoders, each at its own rate
        assert config["unet"]["learning_rate"] == 4e-5 and config["text_encoder"]["learning_rate"] == 2e-5
        assert config["text_encoder"]["train"] and config["text_encoder_2"]["train"]
        assert (config["layer_filter_preset"], config["layer_filter"]) == ("custom", "attentions,time_emb_proj")
    if config["model_type"] == "FLUX_DEV_1":
        assert config["dynamic_timestep_shifting"] is True and config["transformer"]["guidance_scale"] == 1.0


def test_what_diffusion_pipe_trains_that_has_no_model_type_here_is_refused(checkout):
    base = "output_dir = 'out'\ndataset = 'examples/dataset.toml'\nepochs = 2\n"
    with pytest.raises(ConfigError, match="trains MiniMax H3, which has no model type here"):
        load(checkout, base + "[model]\ntype = 'minimax_h3'\n")
    (checkout / "examples" / "kontext.toml").write_text("resolutions = [512]\n[[directory]]\npath = 'data/cats'\ncontrol_path = 'data/dogs'\n")
    with pytest.raises(ConfigError, match="trains Flux Kontext"):
        load(checkout, base.replace("dataset.toml", "kontext.toml") + "[model]\ntype = 'flux'\ndiffusers_path = '/m/FLUX.1-Kontext-dev'\n")
    with pytest.raises(ConfigError, match="epochs: diffusion-pipe needs a number of epochs"):
        load(checkout, "output_dir = 'out'\n[model]\ntype = 'z_image'\n")
    with pytest.raises(ConfigError, match="dataset.resolutions: 512 is not a list of sizes"):
        (checkout / "examples" / "bare.toml").write_text("resolutions = 512\n")
        load(checkout, base.replace("dataset.toml", "bare.toml") + "[model]\ntype = 'z_image'\n")


def test_a_full_fine_tune_and_the_optimizers_and_schedules(checkout):
    """No [adapter]: a full fine-tune; `automagic` (its own rate per weight) is Prodigy at lr 1;
    the optimizer's library defaults stand where the file is silent."""
    config, warning = load(checkout, "output_dir = 'out'\nepochs = 2\nlr_scheduler = 'cosine'\nuncond_fraction = 0.1\n"
                                     "huber_delta = 0.5\n[model]\ntype = 'z_image'\ndtype = 'bfloat16'\n[optimizer]\ntype = 'automagic'\n")
    assert config["training_method"] == "FINE_TUNE" and config["learning_rate_scheduler"] == "COSINE"
    assert config["optimizer"]["optimizer"] == "PRODIGY" and config["learning_rate"] == 1.0 and "automagic" in warning
    assert config["caption_dropout_probability"] == 0.1 and config["text_encoder"]["dropout_probability"] == 0
    assert (config["mse_strength"], config["huber_strength"], config["huber_delta"]) == (0.0, 1.0, 0.5)
    assert "dataset: none named" in warning


def test_what_a_review_against_diffusion_pipes_source_found(checkout):
    """LoKr at alpha = rank; Wan's variant from config.json alone (a hash in the path says nothing)
    at 16 fps; flux_shift as diffusion-pipe computes it where ours differs; min_t / max_t only for
    Wan; Z-Image's refiners in the LoRA; pytorch_optimizer's Prodigy defaults; gradient_release
    unclipped; a value of 0 listed; relative paths from the checkout's root; shift = 0 unset."""
    folder = checkout / "models" / "hub" / "snapshots" / "3e5b1c0a9f22"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "t2v", "dim": 5120}))
    config, warning = load(checkout, "output_dir = 'out'\nepochs = 2\nuncond_fraction = 0.1\n[model]\ntype = 'wan'\n"
                                     "ckpt_path = 'models/hub/snapshots/3e5b1c0a9f22'\ndtype = 'bfloat16'\nshift = 0\n"
                                     "[adapter]\ntype = 'lokr'\nrank = 16\n[optimizer]\ntype = 'Prodigy'\nweight_decay = 0.01\n")
    assert config["model_type"] == "WAN_2_1" and config["base_model_name"] == "Wan-AI/Wan2.1-T2V-14B-Diffusers"
    assert config["frame_rate"] == 16.0 and config["timestep_shift"] == 1.0
    assert (config["peft_type"], config["lokr_dim"], config["lora_alpha"]) == ("LOKR", 16, 16.0)
    assert config["lora_weight_dtype"] == "BFLOAT_16" == config["output_dtype"]  # the model's dtype, as there
    assert config["optimizer"]["decouple"] is True and config["optimizer"]["weight_decay"] == 0.01 and config["learning_rate"] == 1.0

    config, warning = load(checkout, "output_dir = 'out'\ndataset = 'examples/dataset.toml'\nepochs = 2\n[model]\ntype = 'qwen_image'\n"
                                     "diffusers_path = 'models/Qwen-Image'\nflux_shift = true\nmin_t = 0.2\n[adapter]\ntype = 'lora'\nrank = 4\n"
                                     "[optimizer]\ntype = 'adamw'\nlr = 1e-4\ngradient_release = true\n")
    assert config["base_model_name"] == str(checkout / "models" / "Qwen-Image")  # from the checkout's root, not a hub id
    assert config["dynamic_timestep_shifting"] is False and config["timestep_shift"] == 1.878  # e^mu at 512 px (1024 tokens)
    assert config["min_noising_strength"] == 0.0  # diffusion-pipe reads min_t for Wan alone
    assert config["optimizer"]["fused_back_pass"] is True and config["clip_grad_norm"] is None
    assert "here a fixed Timestep shift of 1.878" in warning

    config, warning = load(checkout, "output_dir = 'out'\nepochs = 2\n[model]\ntype = 'z_image'\nflux_shift = true\nmod_lr = 0\n"
                                     "[adapter]\ntype = 'lora'\nrank = 4\n[optimizer]\ntype = 'automagic'\neps = [1e-30, 1e-3]\n")
    assert config["dynamic_timestep_shifting"] is True  # Z-Image's image-size shift is diffusion-pipe's
    assert (config["layer_filter_preset"], config["layer_filter"]) == ("custom", "layers.,noise_refiner,context_refiner")
    assert "model.mod_lr" in warning and "optimizer.eps" in warning.split("not carried over")[1]


def test_caption_files_diffusion_pipe_reads_otherwise_are_named(checkout):
    """A caption file is one caption there, whatever its lines (Caption file lines WHOLE); its
    captions.json, read instead of the .txt files, is named."""
    (checkout / "data" / "cats" / "a.txt").write_text("first paragraph\nsecond paragraph")
    config, warning = load(checkout, MAIN_EXAMPLE)
    assert {c["text"]["caption_lines"] for c in config["concepts"]} == {"WHOLE"} and "several lines" not in warning
    (checkout / "data" / "dogs" / "captions.json").write_text('{"a.png": ["one", "two"]}')
    _, warning = load(checkout, MAIN_EXAMPLE)
    assert "dataset.directory[1]: its captions.json replaces the .txt files there; here a .txt file beside an image wins" in warning
    assert "dataset.directory[1]: diffusion-pipe trains each of an image's captions in captions.json every epoch" in warning
    for text in (checkout / "data" / "dogs").glob("*.txt"):
        text.unlink()
    _, warning = load(checkout, MAIN_EXAMPLE)  # captions.json alone: an image without an entry is what is left out there
    assert "dataset.directory[1]: 1 images have no entry in captions.json, which diffusion-pipe leaves out" in warning
    assert "uncond_fraction" not in warning  # none set


def test_from_the_page_a_relative_path_is_looked_up_only_in_its_folders(tmp_path):
    """The page's imports read only inside its folders: a relative path of the config that exists
    only outside them is not found (so its existence is not told), as it is from the command line."""
    (tmp_path / "secret").mkdir()
    (tmp_path / "co" / "examples").mkdir(parents=True)
    path = tmp_path / "co" / "examples" / "x.toml"
    path.write_text("output_dir = 'out'\nepochs = 1\n[model]\ntype = 'flux'\ndiffusers_path = '../secret'\n")
    anywhere = config_to_dict(load_config(path).config)["base_model_name"]
    confined = config_to_dict(load_config(path, readable=[tmp_path / "co"]).config)["base_model_name"]
    assert anywhere == str(tmp_path / "co" / ".." / "secret")
    assert confined == str(tmp_path / "co" / "examples" / ".." / "secret")  # the config's own folder: a path that is not there


def test_eval_datasets_are_validation_concepts(checkout):
    """diffusion-pipe's eval_datasets: held-out VALIDATION concepts, their loss every eval_every_n_epochs."""
    (checkout / "data" / "held").mkdir()
    (checkout / "examples" / "eval.toml").write_text("resolutions = [512]\n[[directory]]\npath = 'data/held'\n")
    text = MAIN_EXAMPLE.replace("epochs = 1000\n", "epochs = 1000\neval_datasets = [{name = 'people', config = 'examples/eval.toml'}]\n")
    config, warning = load(checkout, text)
    held = config["concepts"][-1]
    assert (held["type"], held["name"], held["path"], held["balancing"]) == ("VALIDATION", "people: held", str(checkout / "data" / "held"), 1.0)
    assert [c["type"] for c in config["concepts"]] == ["STANDARD", "STANDARD", "VALIDATION"]
    assert config["validation"] is True and (config["validate_after"], config["validate_after_unit"]) == (1, "EPOCH")
    assert config["resolution"] == "512,768"  # the training dataset's, not the eval one's
    assert "eval_every_n_epochs" not in warning


def test_its_dataset_file_given_as_the_config_is_refused_naming_the_config_to_give(checkout):
    """Read as a config of ours, it would load the defaults with its keys dropped."""
    with pytest.raises(ConfigError, match=r"dataset.toml: this is diffusion-pipe's dataset file .* import its main config"):
        load_config(checkout / "examples" / "dataset.toml")
