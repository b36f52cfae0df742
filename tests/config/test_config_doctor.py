"""Warnings before a run."""

import pytest

from ot_gradio.config.concept import ConceptConfig
from ot_gradio.config.doctor import check, errors, planned_changes
from ot_gradio.config.enums import ModelFormat, ModelType, TrainingMethod
from ot_gradio.config.parts import SampleConfig
from ot_gradio.config.schema import TrainConfig


def good() -> TrainConfig:
    return TrainConfig(training_method=TrainingMethod.LORA, output_model_format=ModelFormat.KOHYA_LORA,
                       concepts=[ConceptConfig(name="a", path="data/a")], samples=[SampleConfig(prompt="a cat")])


def test_a_supported_lora_config_has_no_warnings():
    assert check(good()) == []


def test_planned_options_are_listed_in_one_message():
    config = good()
    config.optimizer.block_wise = True
    config.unconditional_transformer.train = True
    config.embedding.is_output_embedding = True  # acted on (training/output_embeddings.py)
    config.debug_mode, config.debug_dir = True, "elsewhere"  # acted on (training/debug_output.py)
    warnings = check(config)
    assert len(warnings) == 1
    assert "optimizer.block_wise" in warnings[0]
    assert "debug" not in warnings[0] and "is_output_embedding" not in warnings[0]
    assert "unconditional_transformer" not in warnings[0]  # SD 1.5 has none: nothing is ignored
    assert planned_changes(good()) == []
    config.model_type = ModelType.IDEOGRAM_4
    assert "unconditional_transformer.train" in planned_changes(config)


def test_sections_a_run_never_reads_are_not_said_to_be_ignored():
    """OneTrainer saves every key: its cloud settings with cloud training off, and the default of
    an unconditional transformer the model does not have (offload fraction 0), are not listed."""
    config = good()
    config.cloud.update(create=False, name="my pod")
    config.unconditional_transformer.offload_fraction = 0.0
    assert planned_changes(config) == []
    config.cloud["enabled"] = True
    assert "cloud.enabled" in planned_changes(config)


def test_an_attention_mechanism_that_does_not_reach_the_model_is_refused_and_flex_wants_compile():
    from ot_gradio.config.enums import AttentionMechanism

    config = good()
    config.attention_mechanism = AttentionMechanism.FLEX
    assert errors(config) == ["attention_mechanism: FLEX does not reach STABLE_DIFFUSION_15's attention, which takes SDP, DEFAULT, "
                              "XFORMERS, FLASH; choose one of these (SDP is the default)."]
    config.model_type, config.base_model_name = ModelType.FLUX_DEV_1, ""
    assert not [e for e in errors(config) if e.startswith("attention_mechanism")]
    assert [w for w in check(config) if w.startswith("attention_mechanism")] == [
        "attention_mechanism: FLEX is a fused kernel only when the denoiser is compiled; with compile off it computes the whole "
        "attention matrix (slow, and much more memory than SDP). Turn compile on (Model tab), or use SDP."]
    config.compile = True
    assert not [w for w in check(config) if w.startswith("attention_mechanism")]
    config.train_device = "cpu"  # refused before the model loads, not after
    assert [e for e in errors(config) if e.startswith("attention_mechanism")] == [
        "attention_mechanism: FLEX needs a CUDA GPU and train_device is cpu; use SDP, or train on cuda."]
    config.train_device = "cuda:1"
    assert not [e for e in errors(config) if e.startswith("attention_mechanism")]
    config.model_type, config.attention_mechanism = ModelType.STABLE_DIFFUSION_3, AttentionMechanism.FLASH
    assert [e for e in errors(config) if e.startswith("attention_mechanism")] == [
        "attention_mechanism: FLASH does not reach STABLE_DIFFUSION_3's attention, which takes SDP, DEFAULT; choose one of these "
        "(SDP is the default)."]


def test_masked_prior_preservation_and_custom_conditioning_are_refused_where_they_cannot_work():
    config = good()
    config.masked_prior_preservation_weight = 0.5
    assert [e.split(":")[0] for e in errors(config)] == ["masked_prior_preservation_weight"]
    assert "masked_training" in errors(config)[0]
    config.masked_training = True
    assert check(config) == [] and errors(config) == []
    config.training_method = TrainingMethod.FINE_TUNE
    config.output_model_format = ModelFormat.SAFETENSORS
    assert any(e.startswith("masked_prior_preservation_weight: ") and "LORA" in e for e in errors(config))

    config = good()  # a PRIOR_PREDICTION concept: a LoRA's (the LoRA turned off is the base model)
    config.concepts.append(ConceptConfig(name="reg", path="data/reg", type="PRIOR_PREDICTION"))
    assert check(config) == [] and errors(config) == []
    config.concepts.append(ConceptConfig(name="off", path="data/off", type="PRIOR_PREDICTION", enabled=False))
    config.training_method, config.output_model_format = TrainingMethod.FINE_TUNE, ModelFormat.SAFETENSORS
    assert [e for e in errors(config) if "PRIOR_PREDICTION" in e] == [
        "concepts[1].type: a PRIOR_PREDICTION concept trains towards the base model's prediction (the model with the LoRA "
        "turned off, as in OneTrainer), so it needs training_method LORA, not FINE_TUNE; set its type to STANDARD or train a LORA."]

    config = good()
    config.custom_conditioning_image = True
    assert any(e.startswith("custom_conditioning_image: ") and "STABLE_DIFFUSION_15" in e for e in errors(config))
    for model_type in (ModelType.STABLE_DIFFUSION_15_INPAINTING, ModelType.STABLE_DIFFUSION_XL_10_BASE_INPAINTING):
        config.model_type = model_type
        assert not any("custom_conditioning_image" in e for e in errors(config) + check(config))


def test_wan21_i2v_reads_512_text_tokens_and_no_other_window():
    config = good()
    config.model_type, config.training_method = ModelType.WAN_2_1_I2V, TrainingMethod.LORA
    config.text_encoder_sequence_length = 256
    assert any(e.startswith("text_encoder_sequence_length: WAN_2_1_I2V reads exactly 512") for e in errors(config))
    for window in (512, None):
        config.text_encoder_sequence_length = window
        assert not any("text_encoder_sequence_length" in e for e in errors(config))
    config.model_type, config.text_encoder_sequence_length = ModelType.WAN_2_1, 256  # Wan 2.1 T2V reads any window
    assert not any("text_encoder_sequence_length" in e for e in errors(config))


def test_circular_padding_only_for_the_families_that_do_it():
    config = good()
    config.force_circular_padding = True
    config.concepts[0].image.enable_random_circular_mask_shrink = True  # no longer planned: no warning
    config.concepts[0].image.enable_random_mask_rotate_crop = True
    assert check(config) == [] and errors(config) == []
    for model_type in (ModelType.STABLE_DIFFUSION_XL_10_BASE, ModelType.STABLE_DIFFUSION_20_INPAINTING, ModelType.STABLE_CASCADE_1):
        config.model_type = model_type
        assert not any("force_circular_padding" in e for e in errors(config))
    config.model_type = ModelType.FLUX_DEV_1
    assert any(e.startswith("force_circular_padding: ") and "FLUX_DEV_1" in e for e in errors(config))


def test_kohya_bucket_step_and_sides_are_refused_where_they_cannot_work():
    config = good()
    config.resolution = "512"
    config.bucket_resolution_step = 64
    assert errors(config) == []
    config.model_type, config.bucket_resolution_step = ModelType.FLUX_DEV_1, 8  # Flux's sizes are multiples of 16
    assert "bucket_resolution_step: 8 px is no multiple of 16 px, the size FLUX_DEV_1's images are multiples of; use 16, or 0 " \
           "for the aspect-ratio buckets" in errors(config)
    config.bucket_resolution_step, config.min_bucket_resolution, config.max_bucket_resolution = 64, 600, 2048
    assert any(e.startswith("min_bucket_resolution: 600 px (rounded to the 64 px step: 576) is above the 512 px of resolution 512")
               for e in errors(config))
    config.min_bucket_resolution, config.concepts[0].image.enable_resolution_override = 256, True
    config.concepts[0].image.resolution_override = "768x2304"
    assert [e for e in errors(config) if "bucket" in e] == [
        "max_bucket_resolution: 2048 px (rounded to the 64 px step: 2048) is below the 2304 px of "
        "concepts[0].image.resolution_override 768x2304; raise it to 2304 or more"]
    config.concepts[0].image.enable_resolution_override = False
    config.bucket_resolution_step, config.min_bucket_resolution = 1024, 1024  # buckets larger than the 512 px resolution
    assert any(e.startswith("bucket_resolution_step: 1024 px is above the 512 px of resolution 512") for e in errors(config))
    config.bucket_resolution_step, config.min_bucket_resolution = 64, 32  # a smallest side of 0 at the step
    assert any(e.startswith("min_bucket_resolution: 32 px rounds down to 0 at the 64 px bucket step") for e in errors(config))
    config.bucket_resolution_step = 12  # no multiple of Flux's 16 px (the config itself saves: refused at Start)
    assert any(e.startswith("bucket_resolution_step: 12 px is no multiple of 16 px") for e in errors(config))
    config.aspect_ratio_bucketing = False  # no buckets: nothing to refuse
    assert not any("bucket" in e for e in errors(config))


def test_alpha_as_mask_without_masked_training_is_said():
    config = good()
    config.concepts[0].image.alpha_mask = True
    assert any(w.startswith("Concept 1 ") and "Alpha as mask is on but Training → Masked training is off" in w for w in check(config))
    config.masked_training = True
    assert not any("Alpha as mask" in w for w in check(config))


def test_padding_mask_only_for_the_families_that_read_it():
    config = good()
    config.transformer.attention_mask = True
    config.samples = [SampleConfig(prompt="a"), SampleConfig(prompt="b", transformer_attention_mask=True),
                      SampleConfig(prompt="c", transformer_attention_mask=True, enabled=False)]
    for model_type in (ModelType.FLUX_DEV_1, ModelType.FLUX_FILL_DEV_1, ModelType.STABLE_DIFFUSION_35, ModelType.HI_DREAM_FULL):
        config.model_type = model_type
        assert not any("attention_mask" in e for e in errors(config)) and planned_changes(config) == []
        assert not any("attention_mask" in w for w in check(config))
    config.model_type = ModelType.STABLE_DIFFUSION_XL_10_BASE
    refused = [e for e in errors(config) if "attention_mask" in e]
    assert [e.split(":")[0] for e in refused] == ["transformer.attention_mask"]
    assert all("STABLE_DIFFUSION_XL_10_BASE" in e and "Flux.1" in e and "HiDream" in e for e in refused)
    # a sample's own switch there: ignored and said, as OneTrainer ignores it (its imported samples may hold it)
    assert [w for w in check(config) if w.startswith("samples[")] == [
        "samples[1].transformer_attention_mask: padding tokens are zeroed for Flux.1, Flux.1 Fill, SD 3 / 3.5 and HiDream, not "
        "for STABLE_DIFFUSION_XL_10_BASE; ignored, as in OneTrainer."]
    config.transformer.attention_mask = False
    assert not any("attention_mask" in e for e in errors(config))


def test_an_inpainting_sample_of_a_model_that_does_not_inpaint_is_drawn_from_its_prompt():
    """OneTrainer ignores sample_inpainting there; refused here, an imported config did not start."""
    from ot_gradio.training.method_base import sample_images

    config = good()
    config.samples = [SampleConfig(prompt="a", sample_inpainting=True)]
    assert not any("sample_inpainting" in e for e in errors(config))
    assert any(w.startswith("samples[0].sample_inpainting: STABLE_DIFFUSION_15 is not an inpainting model") for w in check(config))
    assert sample_images(config.samples[0], inpaints=False) == {}


def test_lora_with_a_whole_model_format():
    config = good()
    config.output_model_format = ModelFormat.DIFFUSERS
    assert not any("DIFFUSERS" in w for w in check(config))  # not a warning: the run cannot start with it
    assert errors(config) == ["output_model_format: LoRA training writes KOHYA_LORA or COMFY_LORA (A1111, ComfyUI, Forge) or "
                              "DIFFUSERS_LORA (diffusers keys) or SAFETENSORS (kohya keys for SD 1.x/2.x/SDXL, diffusers keys "
                              "otherwise), not DIFFUSERS; choose one of those."]


def test_embedding_samples_without_placeholder():
    config = good()
    config.training_method = TrainingMethod.EMBEDDING
    config.output_model_format = ModelFormat.SAFETENSORS
    config.samples = [SampleConfig(prompt="a photo of <embedding>"), SampleConfig(prompt="a cat"), SampleConfig(prompt="x", enabled=False)]
    warnings = check(config)
    assert any("Sample prompt 2 lacks <embedding>" in w for w in warnings)
    assert not any("EMBEDDING is not supported" in w for w in warnings)


def test_sample_size_far_from_native_resolution():
    config = good()
    config.samples = [SampleConfig(prompt="a", width=1024, height=1024), SampleConfig(prompt="b", width=512, height=768)]
    warnings = check(config)
    assert any("native resolution 512x512 for sample 1 (1024x1024)" in w for w in warnings)
    assert not any("sample 2" in w for w in warnings)
    config.model_type = ModelType.STABLE_DIFFUSION_XL_10_BASE
    config.samples = [SampleConfig(prompt="a", width=512, height=512)]
    assert any("1024x1024" in w for w in check(config))
    config.base_model_name = "tiny:sdxl"  # tiny test models have no native size
    assert not any("native" in w for w in check(config))


def test_unsupported_model_type_method_and_no_concepts(monkeypatch):
    import ot_gradio.config.doctor as doctor

    # every OneTrainer model type trains now: the warning is checked with one taken out
    trained = doctor.implemented_model_types()
    monkeypatch.setattr(doctor, "implemented_model_types", lambda: [m for m in trained if m != ModelType.STABLE_DIFFUSION_20_DEPTH])
    config = TrainConfig(model_type=ModelType.STABLE_DIFFUSION_20_DEPTH)
    warnings = check(config)
    assert any("STABLE_DIFFUSION_20_DEPTH is not supported" in w for w in warnings)
    monkeypatch.undo()
    assert any("no concepts" in w for w in warnings)
    config = TrainConfig(model_type=ModelType.FLUX_DEV_1, training_method=TrainingMethod.FINE_TUNE_VAE)
    assert "training_method: FINE_TUNE_VAE is not available for model type FLUX_DEV_1; choose LORA, FINE_TUNE, EMBEDDING" in check(config)
    config.concepts = [ConceptConfig(enabled=False)]
    assert any("Every concept is disabled" in w for w in check(config))


def test_optimizer_not_in_the_trainer():
    config = good()
    config.optimizer.optimizer = "PRODIGY"
    assert any("PRODIGY is not available" in w for w in check(config, available_optimizers=["ADAMW", "SGD"]))
    assert not any("is not available" in w for w in check(config))


def _diffusers_lora_cases():
    from ot_gradio.config.families import DIFFUSERS_LORA_TEXT_ENCODERS, FAMILIES

    return [(m, part) for m in DIFFUSERS_LORA_TEXT_ENCODERS for part in FAMILIES[m].text_encoders]


def test_the_diffusers_lora_table_is_what_each_pipeline_loads():
    """The text encoders DIFFUSERS_LORA_TEXT_ENCODERS lets through are the pipeline's own LoRA
    hooks (`_lora_loadable_modules`), Chroma's aside: its mixin names `text_encoder` (Flux's CLIP)
    but fails on Chroma's T5 there."""
    import diffusers

    from ot_gradio.config.families import DIFFUSERS_LORA_TEXT_ENCODERS, FAMILIES

    for model_type, (pipeline, loadable) in DIFFUSERS_LORA_TEXT_ENCODERS.items():
        hooks = set(getattr(diffusers, pipeline)._lora_loadable_modules) & set(FAMILIES[model_type].text_encoders)
        assert set(loadable) == (set() if model_type == ModelType.CHROMA_1 else hooks), model_type


def test_a_text_encoder_lora_diffusers_cannot_load_is_refused_for_diffusers_keys():
    """Flux.1's T5, Chroma's T5, SD 3's T5 and the language-model encoders of Qwen-Image, Z-Image,
    Sana and Flux.2: refused with diffusers keys, naming the format and the switch as the page shows them."""
    from ot_gradio.config.families import DIFFUSERS_LORA_TEXT_ENCODERS, FAMILIES

    for model_type, part in _diffusers_lora_cases():
        loadable = part in DIFFUSERS_LORA_TEXT_ENCODERS[model_type][1]
        for fmt in (ModelFormat.DIFFUSERS_LORA, ModelFormat.SAFETENSORS, ModelFormat.KOHYA_LORA):
            config = good()
            config.model_type = model_type
            config.output_model_format = fmt
            for other in ("text_encoder", "text_encoder_2", "text_encoder_3"):
                getattr(config, other).train = other == part
            found = [e for e in errors(config) if e.startswith(f"{part}.train:")]
            if fmt == ModelFormat.KOHYA_LORA:
                continue  # the kohya layout has its own rule (tests/config/test_lora_reader_rule.py)
            if loadable:
                assert found == [], (model_type, part, fmt)
                continue
            label = TrainConfig.model_fields[part].json_schema_extra["label"]
            assert len(found) == 1, (model_type, part, fmt)
            assert f"a {fmt.value} file (Model → Output format)" in found[0] and f"Training → {label} → Train" in found[0]
            # the kohya layout is offered where a reader loads that part from it (Sana's text encoder: none)
            kohya_read = not any(layout == "kohya" and p == part for layout, p, _ in FAMILIES[model_type].lora_unread)
            assert ("or choose KOHYA_LORA there" in found[0]) == kohya_read, (model_type, part)
        if not loadable:
            config.output_model_format, config.training_method = ModelFormat.DIFFUSERS_LORA, TrainingMethod.EMBEDDING
            assert not [e for e in errors(config) if e.startswith(f"{part}.train:")]


def test_the_output_format_tooltip_says_which_loader_reads_each_format():
    """Kohya files load in diffusers for the SD 1.x/2.x/SDXL pipelines only; the families without a
    diffusers LoRA loader are named."""
    from ot_gradio.config.families import DIFFUSERS_LORA_TEXT_ENCODERS, FAMILIES

    tip = TrainConfig.model_fields["output_model_format"].description
    no_loader = {m for m, info in FAMILIES.items() if info.implemented and TrainingMethod.LORA in info.methods}
    names = {ModelType.PIXART_ALPHA: "PixArt", ModelType.PIXART_SIGMA: "PixArt", ModelType.WUERSTCHEN_2: "Würstchen",
             ModelType.STABLE_CASCADE_1: "Stable Cascade"}
    assert no_loader - set(DIFFUSERS_LORA_TEXT_ENCODERS) == set(names)
    assert all(name in tip for name in names.values())
    assert "for SD 1.x/2.x/SDXL also A1111, Forge and diffusers" in tip and "alpha folded into the weights" in tip


def test_a_video_familys_frame_count_off_its_form_is_named():
    config = good()
    config.model_type, config.frames = ModelType.WAN_2_1, "20"
    assert any(w.startswith("frames: WAN_2_1 trains clips of 4k+1 frames, so Frames 20 trains 17") for w in check(config))
    config.frames = "21"
    assert not any(w.startswith("frames:") for w in check(config))
    config.model_type = ModelType.STABLE_DIFFUSION_15  # an image family reads no frames
    config.frames = "20"
    assert not any(w.startswith("frames:") for w in check(config))


def test_a_hunyuan_video_comfy_lora_is_not_said_to_load_nowhere_else():
    """HunyuanVideo's COMFY_LORA holds ComfyUI's names, q/k/v fused (models/comfy_lora_names.py): no warning."""
    for fmt in (ModelFormat.COMFY_LORA, ModelFormat.KOHYA_LORA, ModelFormat.DIFFUSERS_LORA):
        config = TrainConfig(model_type=ModelType.HUNYUAN_VIDEO, training_method="LORA", output_model_format=fmt)
        assert not [w for w in check(config) if "only this trainer loads it" in w or "HunyuanVideo's" in w], fmt


@pytest.mark.parametrize("fmt", ["KOHYA_LORA", "COMFY_LORA"])
@pytest.mark.parametrize(("model_type", "model", "pipeline"), [("LTX_2", "LTX-2", "LTX2Pipeline"), ("KREA_2", "Krea 2", "Krea2Pipeline")])
def test_a_lora_in_the_kohya_layout_of_a_model_comfyui_lacks_is_refused_before_the_run(fmt, model_type, model, pipeline):
    config = TrainConfig(model_type=model_type, training_method="LORA", output_model_format=fmt)
    assert [e for e in errors(config) if e.startswith("transformer.train:")] == [
        f"transformer.train: a {model_type} transformer LoRA saved as {fmt} would load nowhere: ComfyUI has no {model} model to map "
        f"its names to and diffusers reads no kohya {model} file ({pipeline}.load_lora_weights reads DIFFUSERS_LORA); "
        "save as DIFFUSERS_LORA, or turn off training transformer."]
    config.output_model_format = ModelFormat.DIFFUSERS_LORA
    assert not [e for e in errors(config) if e.startswith("transformer.train:")]


def test_a_hidream_llama_lora_in_the_kohya_layout_is_refused_before_the_run():
    """The kohya layout has no name for HiDream's fourth text encoder: refused, not lost at the save."""
    config = TrainConfig(model_type=ModelType.HI_DREAM_FULL, training_method="LORA", output_model_format="KOHYA_LORA")
    assert [e for e in errors(config) if e.startswith("text_encoder_4.train:")] == [
        "text_encoder_4.train: a HI_DREAM_FULL text_encoder_4 LoRA saved as KOHYA_LORA would load nowhere: the kohya layout has "
        "no name for a fourth text encoder; turn off training text_encoder_4."]
    config.text_encoder_4.train = False
    assert not [e for e in errors(config) if "text_encoder_4" in e]


@pytest.mark.parametrize("peft_type", ["LOHA", "LOKR"])
def test_loha_and_lokr_on_nf4_weights_are_not_refused(peft_type):
    """Their layers are sized from the layer's real shape, not from bitsandbytes' packed bytes
    (tests/training/test_quantized_parts.py trains them)."""
    config = TrainConfig.model_validate({"model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "peft_type": peft_type,
                                         "text_encoder": {"train": True, "weight_dtype": "NFLOAT_4"}})
    assert [e for e in errors(config) if e.startswith("text_encoder.weight_dtype")] == []


def test_an_sdxl_vae_in_float16_is_warned_about_unless_it_is_the_fp16_fix():
    config = good()
    config.model_type = "STABLE_DIFFUSION_XL_10_BASE"
    assert not [w for w in check(config) if w.startswith("vae.weight_dtype")]  # FLOAT_32, the default
    config.vae.weight_dtype = "FLOAT_16"
    (line,) = [w for w in check(config) if w.startswith("vae.weight_dtype")]
    assert "sdxl-vae-fp16-fix" in line
    config.vae.model_name = "madebyollin/sdxl-vae-fp16-fix"
    assert not [w for w in check(config) if w.startswith("vae.weight_dtype")]
    config.model_type, config.vae.model_name = "STABLE_DIFFUSION_15", ""  # SD 1.5's VAE is fine in float16
    assert not [w for w in check(config) if w.startswith("vae.weight_dtype")]


@pytest.mark.parametrize("temp, train, refused", [
    ("cpu", "cuda", False), ("", "cuda", False), ("CPU", "cuda:1", False),
    ("cuda", "cuda", False), ("cuda", "cuda:1", False), ("cuda:0", "cuda", False), ("cuda:1", "cuda:1", False),
    ("cuda:1", "cuda", True), ("cuda:0", "cuda:1", True), ("mps", "cuda", True), ("gpu", "cuda", True),
])
def test_temp_device_is_ram_or_the_train_device(temp, train, refused):
    config = good()
    config.temp_device, config.train_device = temp, train
    problems = [e for e in errors(config) if e.startswith("temp_device")]
    assert bool(problems) == refused
    assert not problems or f"neither cpu nor the train device ({train})" in problems[0]


def test_a_fine_tune_with_a_layer_preset_says_the_rest_is_frozen():
    """A LoRA preset's attn-mlp stays when the method becomes FINE_TUNE: said, since it now picks the weights."""
    config = good()
    config.training_method, config.output_model_format, config.layer_filter_preset = TrainingMethod.FINE_TUNE, ModelFormat.SAFETENSORS, "attn-mlp"
    assert any(w.startswith("layer_filter_preset: attn-mlp: this fine-tune trains only the unet weights the attn-mlp preset names")
               for w in check(config))
    config.layer_filter_preset = "full"
    assert not any(w.startswith("layer_filter_preset") for w in check(config))
