"""What kohya_ss's own shipped presets and saved configs (presets/ and test/config/ of its
repository) set, carried over as kohya_ss and sd-scripts train it: each case is a key found in
those files that an earlier import refused or read otherwise."""

import pytest

from ot_gradio.config.io import load_config
from ot_gradio.config.validation import ConfigError

BASE = {"pretrained_model_name_or_path": "/models/base.safetensors", "train_batch_size": 1}


def _load(**keys):
    result = load_config({**BASE, **keys})
    return result.config, result.warnings[0]


def test_lora_learning_rates_and_command_line():
    # kohya_ss's page sends neither rate when both are 0: both parts train at the learning rate
    c, _ = _load(network_dim=8, learning_rate=5e-4, unet_lr=0, text_encoder_lr=0)
    assert c.unet.train and c.text_encoder.train and c.learning_rate == 5e-4
    # its additional_parameters reach sd-scripts' command line and win over the file
    c, _ = _load(sdxl=True, network_dim=8, max_grad_norm=1, additional_parameters="--network_train_unet_only --max_grad_norm=0")
    assert c.unet.train and not c.text_encoder.train and not c.text_encoder_2.train and c.clip_grad_norm is None
    c, _ = _load(network_dim=8, sdxl=True, sdxl_cache_text_encoder_outputs=True)
    assert not c.text_encoder.train


def test_lycoris_lokr_and_dora():
    c, _ = _load(LoRA_type="LyCORIS/LoKr", network_dim=64, network_alpha=32, factor=8, decompose_both=True, dora_wd=True)
    assert (c.peft_type.value, c.lokr_dim, c.lora_alpha, c.lokr_decompose_factor, c.lokr_decompose_both, c.lokr_weight_decompose) == (
        "LOKR", 64, 32.0, 8, True, True)
    c, _ = _load(LoRA_type="LyCORIS/LoKr", network_dim=100000)  # LyCORIS's "full matrix" dimension
    assert c.lokr_dim == 100000
    c, _ = _load(network_module="lycoris.kohya", network_args=["algo=locon", "dora_wd=True"], network_dim=8)
    # DoRA on the input axis: what A1111, Forge and ComfyUI apply as trained (an output-axis kohya file is refused at Start)
    assert c.lora_decompose and not c.lora_decompose_output_axis
    _, warning = _load(LoRA_type="LyCORIS/LoCon", network_dim=32, conv_dim=8, conv_alpha=1)
    assert "conv_dim 8 / conv_alpha 1: the conv layers train at the same rank and alpha" in warning
    _, warning = _load(LoRA_type="LyCORIS/LoKr", network_dim=64, network_alpha=64, conv_dim=64, conv_alpha=64)  # the same: carried
    assert "conv_" not in warning


def test_conv_dim_counts_only_where_kohya_sends_it():
    c, warning = _load(LoRA_type="Standard", network_dim=32, conv_dim=32, conv_alpha=16)  # kohya_ss: LoCon types only
    assert c.layer_filter_preset == "attn-mlp" and "conv_" not in warning
    c, _ = _load(network_module="networks.lora", network_args=["conv_dim=8", "conv_alpha=4"], network_dim=8)  # sd-scripts: LoCon
    assert c.layer_filter_preset == "full"


def test_optimizer_arguments_and_adafactor():
    c, _ = _load(network_dim=8, optimizer="Prodigy", optimizer_args='"d_coef=2.0" "weight_decay=0.4" d0=1e-5 growth_rate=1.02')
    assert (c.optimizer.d_coef, c.optimizer.weight_decay, c.optimizer.d0, c.optimizer.growth_rate) == (2.0, 0.4, 1e-5, 1.02)
    c, _ = _load(network_dim=8, optimizer="Adafactor", lr_scheduler="constant", learning_rate=1e-4)
    assert (c.optimizer.relative_step, c.optimizer.scale_parameter, c.learning_rate_scheduler.value) == (True, True, "ADAFACTOR")
    c, _ = _load(network_dim=8, optimizer="Adafactor", lr_scheduler="constant", optimizer_args="scale_parameter=False relative_step=False")
    assert (c.optimizer.relative_step, c.optimizer.scale_parameter, c.learning_rate_scheduler.value) == (False, False, "CONSTANT")


def test_noise_loss_cycles_and_sizes():
    c, _ = _load(network_dim=8, noise_offset=0.0357, noise_offset_type="Multires", multires_noise_iterations=8,
                 multires_noise_discount=0.2)
    assert (c.offset_noise_weight, c.multires_noise_iterations, c.multires_noise_discount) == (0.0, 8, 0.2)
    c, _ = _load(network_dim=8, noise_offset=0.05, noise_offset_type="Original", multires_noise_iterations=6)
    assert (c.offset_noise_weight, c.multires_noise_iterations) == (0.05, 0)  # kohya_ss sends one or the other
    c, _ = _load(network_dim=8, noise_offset=0.05, multires_noise_iterations=6)  # sd-scripts' own file: both
    assert (c.offset_noise_weight, c.multires_noise_iterations, c.multires_noise_discount) == (0.05, 6, 0.3)
    c, _ = _load(network_dim=8, noise_offset=0.05, loss_type="l1", lr_scheduler="cosine_with_restarts", lr_scheduler_num_cycles="", epoch=6)
    assert (c.offset_noise_weight, c.mse_strength, c.mae_strength, c.learning_rate_cycles) == (0.05, 0.0, 1.0, 6.0)
    c, warning = _load(network_dim=8, max_resolution="512,650", enable_bucket=False)
    assert c.resolution == "512x648" and "resolution 512,650: 512x648 here" in warning


def test_max_norm_input_perturbation_and_huber():
    c, warning = _load(network_dim=8, scale_weight_norms=1.5, ip_noise_gamma=0.1, ip_noise_gamma_random_strength=True)
    assert (c.lora_max_norm, c.perturbation_noise_weight, c.perturbation_noise_random_strength) == (1.5, 0.1, True)
    assert "not carried over" not in warning
    c, warning = _load(network_dim=8, noise_offset=0.0357, noise_offset_type="Original", noise_offset_random_strength=True,
                       adaptive_noise_scale=0.00357)
    assert (c.offset_noise_weight, c.offset_noise_random_strength, c.adaptive_noise_scale) == (0.0357, True, 0.00357)
    c, warning = _load(network_dim=8, noise_offset=0.0357, noise_offset_type="Multires", noise_offset_random_strength=True,
                       adaptive_noise_scale=0.00357)  # kohya_ss sends them with its Original type only
    assert (c.offset_noise_weight, c.adaptive_noise_scale) == (0.0, 0.0) and "not carried over" not in warning
    c, warning = _load(network_dim=8, rank_dropout=0.1, module_dropout=0.2)
    assert (c.lora_rank_dropout, c.lora_module_dropout) == (0.1, 0.2) and "not carried over" not in warning
    c, _ = _load(network_module="networks.lora", network_args=["rank_dropout=0.1", "module_dropout=0.05"], network_dim=8)
    assert (c.lora_rank_dropout, c.lora_module_dropout) == (0.1, 0.05)
    c, warning = _load(LoRA_type="LyCORIS/LoKr", network_dim=8, rank_dropout=0.1)
    assert c.lora_rank_dropout == 0.0 and "rank_dropout 0.1: kohya's rank dropout acts here on plain LoRA layers, not LyCORIS/LoKr" in warning
    c, warning = _load(LoRA_type="LyCORIS/LoHa", network_dim=8, scale_weight_norms=1)
    assert c.lora_max_norm == 0.0 and "scale_weight_norms 1: the max norm here caps plain LoRA and DoRA layers, not LyCORIS/LoHa" in warning
    c, warning = _load(network_dim=8, loss_type="huber", huber_c=0.1, huber_schedule="snr")
    assert (c.mse_strength, c.huber_strength) == (1.0, 0.0) and "loss_type huber: sd-scripts' pseudo-Huber loss" in warning
    assert "but not carried over" not in warning  # huber_c and huber_schedule said there, not listed again
    # sd-scripts' SD 3 script draws plain noise: no offset, multires, min-SNR nor input perturbation
    c, warning = _load(sd3_checkbox=True, network_dim=8, noise_offset=0.05, noise_offset_type="Multires", multires_noise_iterations=8,
                       ip_noise_gamma=0.1, min_snr_gamma=5)
    assert (c.multires_noise_iterations, c.perturbation_noise_weight, c.loss_weight_fn.value) == (0, 0.0, "CONSTANT")
    assert "multires_noise_iterations, min_snr_gamma, ip_noise_gamma: sd-scripts does not use them for SD 3" in warning
    c, warning = _load(anima_checkbox=True, network_dim=8, debiased_estimation_loss=True)  # nor debiased estimation
    assert c.loss_weight_fn.value == "CONSTANT" and "debiased_estimation_loss: sd-scripts does not use them for Anima" in warning
    c, _ = _load(sdxl=True, network_dim=8, anima_checkbox=False, anima_qwen3="/m/qwen3")  # the page's saved Anima path
    assert c.model_type.value == "STABLE_DIFFUSION_XL_10_BASE"
    c, _ = _load(flux1_checkbox=True, network_dim=8, ip_noise_gamma=0.1)  # its Flux script does perturb the input
    assert c.perturbation_noise_weight == 0.1


def test_kohya_ss_newer_families_chroma_anima_lumina_hunyuan_image():
    # its Flux page with model type Chroma runs flux_train_network.py --model_type chroma
    c, warning = _load(flux1_checkbox=True, model_type="chroma", LoRA_type="Flux1", network_dim=8, guidance_scale=0.0,
                       pretrained_model_name_or_path="/m/Chroma1-HD.safetensors", ae="/m/ae.safetensors",
                       t5xxl="/m/t5.safetensors", apply_t5_attn_mask=True, sample_prompts="a cat --l 4\na dog", min_snr_gamma=5)
    assert (c.model_type.value, c.transformer.model_name, c.base_model_name) == ("CHROMA_1", "/m/Chroma1-HD.safetensors", "lodestones/Chroma1-HD")
    assert (c.text_encoder.model_name, c.vae.model_name) == ("/m/t5.safetensors", "/m/ae.safetensors")  # Chroma's T5 is its one encoder
    # kohya_ss's shipped Flux preset holds placeholders, not paths: named, and the parts come from the base model
    placeholder, note = _load(flux1_checkbox=True, network_dim=8, ae="put the full path to ae.sft here",
                              pretrained_model_name_or_path="/m/flux1-dev.safetensors")
    assert placeholder.vae.model_name == "" and "ae: 'put the full path to ae.sft here' names no file; the VAE comes from" in note
    # kohya_ss's page sends its SD `vae` field too: sd-scripts' Flux script reads `ae` alone
    both, note = _load(flux1_checkbox=True, network_dim=8, ae="/m/ae.safetensors", vae="/m/sdxl_vae.safetensors")
    assert both.vae.model_name == "/m/ae.safetensors" and "vae '/m/sdxl_vae.safetensors': sd-scripts' Flux training reads ae" in note
    assert (c.layer_filter_preset, c.timestep_distribution.value, c.timestep_shift, c.loss_weight_fn.value) == ("blocks", "UNIFORM", 3.0, "CONSTANT")
    assert c.text_encoder_sequence_length == 512
    assert [(s.cfg_scale, s.diffusion_steps) for s in c.samples] == [(4.0, 20), (1.0, 20)]
    assert "the Chroma transformer is read from" in warning and "sd-scripts does not use them for Chroma" in warning
    assert not c.transformer.attention_mask and "apply_t5_attn_mask" not in warning  # Chroma reads T5 with its mask anyway
    # its Anima page: anima_train_network.py, a logit-normal unshifted by default, its page's keys prefixed
    c, warning = _load(anima_checkbox=True, LoRA_type="Anima", network_dim=16, pretrained_model_name_or_path="/m/anima.safetensors",
                       anima_qwen3="/m/qwen3", anima_vae="/m/vae.safetensors", anima_discrete_flow_shift=3.0,
                       anima_timestep_sampling="shift", flux1_checkbox=False,
                       anima_compile=False, lumina_checkbox=False, lumina_discrete_flow_shift=6.0, blocks_to_swap=7,
                       anima_qwen3_max_token_length=256)
    assert (c.model_type.value, c.transformer.model_name, c.base_model_name) == (
        "ANIMA", "/m/anima.safetensors", "circlestone-labs/Anima-Base-v1.0-Diffusers")
    assert (c.layer_filter_preset, c.timestep_distribution.value, c.timestep_shift, c.vae.model_name) == ("attn-mlp", "LOGIT_NORMAL", 3.0, "")
    assert c.transformer.offload_fraction == 0.25 and "anima_qwen3, anima_vae files are not read" in warning
    assert c.text_encoder_sequence_length == 256
    assert not c.text_encoder.train and "sd-scripts' Anima LoRA can train Qwen3 too" in warning
    assert "lumina" not in warning and "model_prediction_type" not in warning
    for switch in ("lumina_checkbox", "hunyuan_image_checkbox"):  # no such model type here: refused, naming it
        with pytest.raises(ConfigError, match=f"{switch}: this kohya_ss config trains"):
            _load(**{switch: True}, network_dim=8)


def test_sd3_timesteps_and_other_families_keys():
    sd3 = {"sd3_checkbox": True, "network_dim": 8}
    c, _ = _load(**sd3, weighting_scheme="logit_normal", logit_mean=0.2, logit_std=1.5, mode_scale=1.29, training_shift=3.0)
    assert (c.timestep_distribution.value, c.noising_bias, c.noising_weight, c.timestep_shift) == ("LOGIT_NORMAL", 0.2, 0.5, 3.0)
    c, _ = _load(**sd3, weighting_scheme="mode", mode_scale=1.1)
    assert (c.timestep_distribution.value, c.noising_weight, c.timestep_shift) == ("HEAVY_TAIL", 1.1, 1.0)
    c, warning = _load(**sd3, weighting_scheme="sigma_sqrt")
    assert c.timestep_distribution.value == "UNIFORM" and "weighting_scheme 'sigma_sqrt'" in warning
    assert _load(**sd3)[0].timestep_distribution.value == "UNIFORM"  # sd-scripts' default
    c, _ = _load(**sd3, max_timestep=500)
    assert c.max_noising_strength == 0.5
    c, warning = _load(**sd3, max_timestep=500, training_shift=3.0)  # sd-scripts shifts, then maps into the range
    assert (c.max_noising_strength, c.timestep_shift) == (1.0, 3.0) and "min_timestep / max_timestep with training_shift 3.0" in warning
    # kohya_ss's page saves Flux's and SD 3's settings in every config and sends them only for their family
    page = {"weighting_scheme": "logit_normal", "logit_std": 1.0, "discrete_flow_shift": 3, "t5xxl_max_token_length": 512,
            "train_blocks": "all", "guidance_scale": 3.5, "sd3_text_encoder_batch_size": 1, "t5xxl_dtype": "bf16"}
    c, warning = _load(sdxl=True, network_dim=8, **page)
    assert "not carried over" not in warning and c.timestep_distribution.value == "UNIFORM"
    c, warning = _load(flux1_checkbox=True, network_dim=8, **page)
    assert "weighting_scheme" not in warning and c.timestep_shift == 3.0


def test_sd3_text_encoders():
    # sd-scripts' T5 window (256 unless set; kohya_ss's page sends its Flux page's value for Flux alone), and the
    # settings its SD 3 scripts do not use; the text encoders' own files are said
    c, warning = _load(sd3_checkbox=True, network_dim=8, t5xxl_max_token_length=512, t5xxl_dtype="bf16", max_token_length=225,
                       clip_l="/m/clip_l.safetensors", clip_g="/m/clip_g.safetensors", t5xxl="/m/t5xxl.safetensors")
    assert c.text_encoder_3_sequence_length == 256 and c.text_encoder_max_token_length == 75 and "not carried over" not in warning
    # sd-scripts reads the text encoders' own files before the checkpoint's; so does this trainer
    assert (c.text_encoder.model_name, c.text_encoder_2.model_name, c.text_encoder_3.model_name) == (
        "/m/clip_l.safetensors", "/m/clip_g.safetensors", "/m/t5xxl.safetensors") and "files are not read" not in warning
    toml = load_config({**BASE, "network_module": "networks.lora_sd3", "network_dim": 8, "t5xxl_max_token_length": 154}).config
    assert toml.model_type.value == "STABLE_DIFFUSION_3" and toml.text_encoder_3_sequence_length == 154
    long = load_config({**BASE, "network_module": "networks.lora_sd3", "network_dim": 8, "t5xxl_max_token_length": 1024})
    assert long.config.text_encoder_3_sequence_length == 512 and "t5xxl_max_token_length 1024: T5 reads at most 512" in long.warnings[0]


def test_flux_train_blocks_and_network_settings_that_change_nothing():
    for blocks, pattern in (("single", r"^single_transformer_blocks\."), ("double", r"^transformer_blocks\.")):
        c, warning = _load(flux1_checkbox=True, LoRA_type="Flux1", network_dim=8, train_blocks=blocks)
        assert (c.layer_filter_preset, c.layer_filter, c.layer_filter_regex) == ("custom", pattern, True)
        assert "train_blocks" not in warning
    c, _ = _load(network_module="networks.lora_flux", network_dim=8, network_args=["train_blocks=single"])
    assert c.model_type.value == "FLUX_DEV_1" and c.layer_filter == r"^single_transformer_blocks\."
    assert _load(flux1_checkbox=True, LoRA_type="Flux1", network_dim=8, train_blocks="all")[0].layer_filter_preset == "blocks"
    # kohya_ss's page sends use_cp with LoKr alone, rank_dropout_scale scales a rank dropout, bypass_mode computes the same;
    # older pages named the LoRA to continue from lora_network_weights, whose rank it trains at here (dim_from_weights)
    c, warning = _load(LoRA_type="LyCORIS/LoHa", network_dim=8, use_cp=True, rank_dropout_scale=True, bypass_mode=True,
                       lora_network_weights="/m/start.safetensors", dim_from_weights=True, lr_scheduler_power=1.02)
    assert c.lora_model_name == "/m/start.safetensors" and "not carried over" not in warning
    _, warning = _load(LoRA_type="Standard", network_dim=8, rank_dropout=0.1, rank_dropout_scale=True)
    assert warning.endswith("not carried over (left at this trainer's defaults): rank_dropout_scale.")


def test_families_textual_inversion_and_fine_tune_pages(tmp_path):
    c, warning = _load(sdxl=True, token_string="zxc", init_word="woman", num_vectors_per_token=4, learning_rate=2e-3,
                       template="style template", caption_dropout_rate=0.1)
    assert (c.training_method.value, c.embedding.placeholder, c.embedding.initial_embedding_text, c.embedding.token_count) == (
        "EMBEDDING", "zxc", "woman", 4)
    assert c.embedding_learning_rate == 2e-3 and c.caption_dropout_probability == 0.1 and c.text_encoder_2.dropout_probability == 0
    assert "template 'style template'" in warning
    sd3, _ = _load(sd3_checkbox=True, t5xxl="/t5.safetensors", learning_rate_te1=1e-5)  # DreamBooth page: a fine-tune
    assert sd3.model_type.value == "STABLE_DIFFUSION_3" and not sd3.text_encoder.train and not sd3.text_encoder_3.train
    lora = load_config({**BASE, "pretrained_model_name_or_path": "/m/sd3.5_large.safetensors", "sd3_checkbox": True,
                        "network_dim": 8}).config
    assert lora.model_type.value == "STABLE_DIFFUSION_35" and lora.text_encoder.train and not lora.text_encoder_3.train
    folder = tmp_path / "img"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"")
    assert "dataset_repeats" not in _load(sdxl_checkbox=True, dataset_repeats="10")[1]  # no image_folder: nothing to repeat
    c, _ = _load(sdxl_checkbox=True, train_text_encoder=False, image_folder=str(folder), dataset_repeats="50",
                 caption_metadata_filename="meta_cap.json", batch_size="8")
    assert c.model_type.value == "STABLE_DIFFUSION_XL_10_BASE" and c.training_method.value == "FINE_TUNE"
    assert not c.text_encoder.train and [(x.path, x.balancing) for x in c.concepts] == [(str(folder), 50.0)]


def test_flux():
    c, warning = _load(flux1_checkbox=True, LoRA_type="Flux1", network_dim=16, min_snr_gamma=7, noise_offset=0.05,
                       pretrained_model_name_or_path="/models/flux1-dev.safetensors", ae="/models/ae.safetensors",
                       clip_l="/models/clip_l.safetensors", t5xxl="/models/t5xxl.safetensors", unet_lr=1e-4, text_encoder_lr=1e-5,
                       sample_prompts="a cat --g 4 --l 2\na dog", max_resolution="1024,1024")
    assert (c.layer_filter_preset, c.loss_weight_fn.value, c.offset_noise_weight) == ("blocks", "CONSTANT", 0.0)
    # the transformer's file and its learning rate, each text encoder's and the VAE's file (ComfyUI's files, read here)
    assert (c.transformer.model_name, c.transformer.learning_rate, c.base_model_name) == (
        "/models/flux1-dev.safetensors", 1e-4, "black-forest-labs/FLUX.1-dev")
    assert (c.text_encoder.model_name, c.text_encoder.learning_rate, c.text_encoder_2.model_name, c.vae.model_name) == (
        "/models/clip_l.safetensors", 1e-5, "/models/t5xxl.safetensors", "/models/ae.safetensors")
    assert ("the Flux transformer is read from /models/flux1-dev.safetensors, clip_l from /models/clip_l.safetensors, t5xxl "
            "from /models/t5xxl.safetensors, ae from /models/ae.safetensors; its configs from black-forest-labs/FLUX.1-dev") in warning
    assert "files are not read" not in warning and "sd-scripts does not use them for Flux" in warning
    assert [(s.cfg_scale, s.diffusion_steps) for s in c.samples] == [(4.0, 20), (3.5, 20)]  # --g is Flux's guidance
    # sd-scripts' defaults: timesteps uniform, shifted by 3; the transformer given guidance 3.5; the loss sigma-scaled
    assert (c.timestep_distribution.value, c.timestep_shift, c.transformer.guidance_scale) == ("UNIFORM", 3.0, 3.5)
    assert c.text_encoder_2_sequence_length == 512  # sd-scripts' T5 window for Flux.1 dev (OneTrainer's default is 77)
    assert "model_prediction_type 'sigma_scaled'" in warning
    flux = {"flux1_checkbox": True, "network_dim": 8}
    c, warning = _load(**flux, timestep_sampling="shift", discrete_flow_shift=3.1582, sigmoid_scale=1.5, guidance_scale=1.0,
                       model_prediction_type="raw", fp8_base=True, flux1_cache_text_encoder_outputs=True, t5xxl_max_token_length=256)
    assert (c.timestep_distribution.value, c.noising_weight, c.timestep_shift, c.dynamic_timestep_shifting) == (
        "LOGIT_NORMAL", 0.5, 3.1582, False)  # sigmoid(1.5 x N(0, 1)): std noising_weight + 1
    assert (c.transformer.guidance_scale, c.transformer.weight_dtype.value, c.text_encoder.train) == (1.0, "FLOAT_8", False)
    assert "model_prediction_type" not in warning and "flux1_cache" not in warning and c.text_encoder_2_sequence_length == 256
    c, warning = _load(**flux, apply_t5_attn_mask=True)
    assert c.transformer.attention_mask and "apply_t5_attn_mask: here the padding tokens' prompt embeddings are zeroed" in warning
    c, warning = _load(**flux, blocks_to_swap=18)  # 9 of 19 double blocks and 18 of 38 single ones
    assert c.transformer.offload_fraction == 0.47 and "blocks_to_swap 18: the transformer's Offload fraction is 0.47" in warning
    c, _ = _load(**flux, timestep_sampling="flux_shift")
    assert (c.timestep_distribution.value, c.timestep_shift, c.dynamic_timestep_shifting) == ("LOGIT_NORMAL", 1.0, True)
    c, _ = _load(**flux, timestep_sampling="uniform", discrete_flow_shift=3.0)
    assert (c.timestep_distribution.value, c.timestep_shift) == ("UNIFORM", 1.0)  # sd-scripts shifts only "sigma" and "shift"


def test_dataset_toml_options_per_dataset(tmp_path):
    (tmp_path / "d.toml").write_text(
        '[general]\ncaption_tag_dropout_rate = 0.1\ncaption_prefix = "photo of"\n'
        '[[datasets]]\nresolution = 1024\n[[datasets.subsets]]\nimage_dir = "/a"\ncaption_dropout_rate = 0.05\n'
        '[[datasets]]\nresolution = [768, 512]\n[[datasets.subsets]]\nimage_dir = "/a"\ncaption_dropout_rate = 0.05\n'
        'color_aug = true\n')
    c, warning = _load(sdxl=True, network_dim=8, dataset_config=str(tmp_path / "d.toml"))
    assert c.resolution == "1024"
    assert [(x.image.enable_resolution_override, x.image.resolution_override) for x in c.concepts] == [(False, "512"), (True, "768x512")]
    assert all((x.text.tag_dropout_enable, x.text.tag_dropout_mode, x.text.tag_dropout_probability) == (True, "RANDOM", 0.1)
               for x in c.concepts)
    assert c.caption_dropout_probability == 0.05 and c.text_encoder.dropout_probability == c.text_encoder_2.dropout_probability == 0
    assert "the dataset config sets, not carried over: color_aug" in warning
    assert all(x.text.caption_prefix == "photo of" for x in c.concepts)  # [general]'s, for every subset
    # a caption extension this trainer does not read is said once, however many folders
    c, warning = _load(network_dim=8, dataset_config=str(tmp_path / "d.toml"), caption_extension=".tags")
    assert warning.count("caption_extension '.tags': here captions are read from .txt, else .caption files") == 1
    assert "caption_extension" not in _load(network_dim=8, dataset_config=str(tmp_path / "d.toml"), caption_extension="caption")[1]


def test_custom_scheduler_and_full_bf16():
    c, _ = _load(network_dim=8, lr_scheduler="cosine", lr_scheduler_type="CosineAnnealingLR", lr_scheduler_args="T_max=100 eta_min=1e-6",
                 lr_warmup_steps=50, full_bf16=True)
    assert (c.learning_rate_scheduler.value, c.custom_learning_rate_scheduler, c.learning_rate_warmup_steps) == (
        "CUSTOM", "torch.optim.lr_scheduler.CosineAnnealingLR", 0.0)
    assert c.scheduler_params == [{"key": "T_max", "value": "100"}, {"key": "eta_min", "value": "1e-6"}]
    assert c.lora_weight_dtype.value == "BFLOAT_16"
    # values as sd-scripts reads them, Python literals: a text value keeps its quotes
    c, _ = _load(network_dim=8, lr_scheduler_type="OneCycleLR", lr_scheduler_args='max_lr=1e-4 total_steps=1000 anneal_strategy="linear"')
    assert c.scheduler_params[2] == {"key": "anneal_strategy", "value": '"linear"'}
    c, _ = _load(network_dim=8, lr_scheduler_type="OneCycleLR", lr_scheduler_args=["max_lr=1e-4", "anneal_strategy='cos'"])
    assert c.scheduler_params == [{"key": "max_lr", "value": "1e-4"}, {"key": "anneal_strategy", "value": "'cos'"}]
    c, _ = _load(sdxl=True, learning_rate=1e-5, full_fp16=True, train_text_encoder=False)  # a fine-tune: the UNet's weights
    assert (c.training_method.value, c.unet.weight_dtype.value, c.text_encoder.weight_dtype.value) == ("FINE_TUNE", "FLOAT_16", "FLOAT_32")


def test_timestep_range_and_masked_loss():
    c, warning = _load(network_dim=8, min_timestep=100, max_timestep=900, masked_loss=True)
    assert (c.min_noising_strength, c.max_noising_strength, c.masked_training) == (0.1, 0.9, False)
    assert "masked_loss: here a mask is a <image>-masklabel.png" in warning and "not carried over" not in warning
    c, warning = _load(flux1_checkbox=True, network_dim=8, min_timestep=100)  # sd-scripts' Flux script draws from all
    assert c.min_noising_strength == 0.0 and "min_timestep: sd-scripts does not use them for Flux" in warning


def _buckets(c):
    return (c.aspect_ratio_bucketing, c.bucket_resolution_step, c.min_bucket_resolution, c.max_bucket_resolution)


def test_buckets(tmp_path):
    # kohya_ss's page: its step and sides, kohya's buckets here too
    c, warning = _load(network_dim=8, enable_bucket=True, bucket_no_upscale=True, bucket_reso_steps=64, min_bucket_reso=256,
                       max_bucket_reso=2048)
    assert _buckets(c) == (True, 64, 256, 2048) and c.bucket_no_upscale and "bucket" not in warning
    # sd-scripts' defaults where a config sets none: 64 px between 256 and 1024; kohya_ss's page's largest side is 2048
    assert _buckets(_load(network_dim=8, enable_bucket=True)[0]) == (True, 64, 256, 1024)
    assert _buckets(_load(network_dim=8, enable_bucket=True, sdxl=True, max_resolution="1024,1024")[0]) == (True, 64, 256, 2048)
    # its "1" (every width) is the model's step; Flux's 16; a largest side below the resolution is raised to it
    c, warning = _load(network_dim=8, enable_bucket=True, bucket_reso_steps=1)
    assert c.bucket_resolution_step == 8 and "bucket_reso_steps 1: 8 px here (this model's image sides are multiples of 8 px)" in warning
    c, warning = _load(network_module="networks.lora_flux", network_dim=8, enable_bucket=True, bucket_reso_steps="8",
                       resolution="1536,1536")  # sd-scripts' file: its largest side 1024 unless set
    assert _buckets(c) == (True, 16, 256, 1536) and "bucket_reso_steps 8: 16 px here" in warning
    assert "max_bucket_reso 1024: 1536 here, the resolution's longest side" in warning
    # bucketing off: none of it; an sd-scripts file without enable_bucket does not bucket either (said)
    c, warning = _load(network_dim=8, enable_bucket=False, bucket_reso_steps=32)
    assert _buckets(c) == (False, 0, 256, 2048) and "not carried over" not in warning
    c, warning = _load(network_dim=8, bucket_reso_steps=32)
    assert _buckets(c) == (False, 0, 256, 2048) and "enable_bucket is not set, so sd-scripts trains every image" in warning
    # a dataset TOML's own
    toml = tmp_path / "data.toml"
    toml.write_text('[general]\nenable_bucket = true\nbucket_no_upscale = true\nbucket_reso_steps = 32\n[[datasets]]\n'
                    f'resolution = 1024\nmax_bucket_reso = 1536\n[[datasets.subsets]]\nimage_dir = "{tmp_path}"\nnum_repeats = 2\n')
    # the training config's as fallback; its train_data_dir is ignored, as sd-scripts ignores it beside a dataset config
    c, warning = _load(network_dim=8, dataset_config=str(toml), min_bucket_reso=128, train_data_dir=str(tmp_path / "other"))
    assert c.bucket_no_upscale and _buckets(c) == (True, 32, 128, 1536) and "not carried over" not in warning
    assert "max_bucket_reso" not in warning  # read once, with the dataset's resolution (1024), not the training config's
    assert [concept.path for concept in c.concepts] == [str(tmp_path)]
    # a second dataset's own bucket settings are said: every dataset is bucketed as the first here
    toml.write_text(toml.read_text() + f'[[datasets]]\nresolution = 768\nenable_bucket = false\n[[datasets.subsets]]\nimage_dir = "{tmp_path}"\n')
    c, warning = _load(network_dim=8, dataset_config=str(toml), min_bucket_reso=1024)
    assert "dataset 2 sets its own enable_bucket, max_bucket_reso: here every dataset is bucketed as the first" in warning
    # a smallest side above a resolution (the second dataset's 768 here), which sd-scripts refuses, is lowered to it
    assert c.min_bucket_resolution == 768 and "min_bucket_reso 1024: 768 here, the resolution's shortest side" in warning
    # a dataset that inherits what the first sets (from the training config) sets nothing of its own; the training
    # config's bucket keys count as read; a kohya_ss page config's unset largest side is the page's 2048
    toml.write_text(f'[[datasets]]\nresolution = 512\n[[datasets.subsets]]\nimage_dir = "{tmp_path}"\n'
                    f'[[datasets]]\nresolution = 512\n[[datasets.subsets]]\nimage_dir = "{tmp_path}"\n')
    c, warning = _load(network_dim=8, dataset_config=str(toml), enable_bucket=True, sdxl=True, bucket_reso_steps=64)
    assert _buckets(c) == (True, 64, 256, 2048) and "sets its own" not in warning and "not carried over" not in warning


def test_defaults_written_as_text_are_not_listed_as_left_out():
    # kohya_ss saves some numbers as text ("75") or floats (64.0): kohya's defaults and zeros change nothing
    _, warning = _load(network_dim=8, max_token_length="75", bucket_reso_steps=64.0, keep_tokens="0", prior_loss_weight=1.0,
                       adaptive_noise_scale=0)
    assert "not carried over" not in warning
    c, warning = _load(network_dim=8, max_token_length="225", clip_skip=1.0)
    assert "not carried over" not in warning
    assert c.text_encoder_max_token_length == 225  # CLIP read in three windows of 75


def test_polynomial_scheduler_is_the_linear_decay_of_its_default_power():
    # a user's shared kohya_ss Pony preset uses it: diffusers' polynomial decay of power 1 (sd-scripts' default) is linear
    c, warning = _load(network_dim=8, lr_scheduler="polynomial", lr_scheduler_power="")
    assert c.learning_rate_scheduler.value == "LINEAR" and "polynomial" not in warning
    c, warning = _load(network_dim=8, lr_scheduler="polynomial", lr_scheduler_power=2)
    assert c.learning_rate_scheduler.value == "LINEAR" and "lr_scheduler 'polynomial' of power 2: here it decays linearly" in warning


def test_min_lr_cosine_random_crop_and_settings_that_change_nothing(tmp_path):
    c, warning = _load(network_dim=8, lr_scheduler="cosine_with_min_lr", lr_scheduler_min_lr_ratio=0.1)
    assert (c.learning_rate_scheduler.value, c.learning_rate_min_factor) == ("COSINE", 0.1) and "lr_scheduler" not in warning
    (tmp_path / "10_cat").mkdir()
    c, warning = _load(network_dim=8, train_data_dir=str(tmp_path), random_crop=True, keep_tokens_separator="|||", huber_c=0.2,
                       huber_schedule="exponential", lowram=True, highvram=True)
    assert c.concepts[0].image.enable_crop_jitter and "not carried over" not in warning  # l2: the Huber settings do nothing
    assert not _load(network_dim=8, train_data_dir=str(tmp_path))[0].concepts[0].image.enable_crop_jitter


def test_alpha_mask_is_masked_training_by_the_alpha_channel(tmp_path):
    (tmp_path / "10_cat").mkdir()
    c, warning = _load(network_dim=8, train_data_dir=str(tmp_path), alpha_mask=True, masked_loss=True)
    assert c.masked_training and c.concepts[0].image.alpha_mask and "masked_loss" not in warning and "not carried over" not in warning
    assert (c.unmasked_probability, c.unmasked_weight) == (0.0, 0.0)  # sd-scripts: transparent areas weigh 0 in every step
    c, warning = _load(network_dim=8, train_data_dir=str(tmp_path), masked_loss=True)  # masks from a folder: said
    assert not c.masked_training and not c.concepts[0].image.alpha_mask and "masked_loss: here a mask is a" in warning
    toml = tmp_path / "data.toml"
    toml.write_text(f'[[datasets]]\n[[datasets.subsets]]\nimage_dir = "{tmp_path / "10_cat"}"\nalpha_mask = true\n')
    c, _ = _load(network_dim=8, dataset_config=str(toml))
    assert c.masked_training and c.concepts[0].image.alpha_mask


def test_caption_prefix_and_suffix(tmp_path):
    (tmp_path / "10_cat").mkdir()
    c, warning = _load(network_dim=8, train_data_dir=str(tmp_path), caption_prefix="ohwx,", caption_suffix=", best quality")
    assert (c.concepts[0].text.caption_prefix, c.concepts[0].text.caption_suffix) == ("ohwx,", ", best quality")
    assert "not carried over" not in warning
    toml = tmp_path / "data.toml"
    toml.write_text(f'[[datasets]]\n[[datasets.subsets]]\nimage_dir = "{tmp_path / "10_cat"}"\ncaption_prefix = "sks dog"\n')
    assert _load(network_dim=8, dataset_config=str(toml))[0].concepts[0].text.caption_prefix == "sks dog"


def test_save_last_n_epochs_and_steps_keep_that_many_saves():
    c, warning = _load(network_dim=8, save_every_n_epochs=2, save_last_n_epochs=3)
    assert (c.save_every, c.save_every_unit.value, c.save_keep_last) == (2, "EPOCH", 3) and "not carried over" not in warning
    # sd-scripts keeps the saves of the last N steps: every 10 steps, the last 30 are 4 saves (at 50: 20, 30, 40, 50)
    c, warning = _load(network_dim=8, save_every_n_steps=10, save_last_n_steps=30)
    assert (c.save_every, c.save_every_unit.value, c.save_keep_last) == (10, "STEP", 4) and "not carried over" not in warning
