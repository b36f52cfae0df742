"""Fields shown by model type and training method, from the families table."""

import pytest

from ot_gradio.config.enums import TrainingMethod
from ot_gradio.config.families import FAMILIES
from ot_gradio.ui.visibility import field_shown, model_parts, part_field_shown, part_of, shown_parts, tab_shown


def test_every_family_part_is_a_config_part():
    for model_type, info in FAMILIES.items():
        assert set(info.parts) <= set(model_parts()), model_type


def test_part_of_nested_and_prefixed_fields():
    assert part_of("unet.learning_rate") == "unet"
    assert part_of("text_encoder_2.train") == "text_encoder_2"
    assert part_of("text_encoder_layer_skip") == "text_encoder"
    assert part_of("text_encoder_2_layer_skip") == "text_encoder_2"  # the longest part name wins
    assert part_of("decoder_text_encoder.weight_dtype") == "decoder_text_encoder"
    assert part_of("optimizer.beta1") is None
    assert part_of("embedding.placeholder") is None
    assert part_of("learning_rate") is None


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_only_the_family_parts_are_shown(model_type):
    """Its parts, and the frozen modules beside them with a section of their own (Ideogram 4's
    unconditional transformer: its weight type)."""
    parts = FAMILIES[model_type].parts + (("unconditional_transformer",) if model_type.value == "IDEOGRAM_4" else ())
    assert shown_parts(model_type.value) == parts
    for part in model_parts():
        for path in (f"{part}.learning_rate", f"{part}.weight_dtype"):
            if part_field_shown(path):
                method = "FINE_TUNE_VAE" if part == "vae" else "LORA"  # the VAE's learning rate is that method's
                assert field_shown(path, "training", model_type.value, method) == (part in parts), path


def test_sd_and_pixart_and_cascade():
    assert field_shown("unet.learning_rate", "training", "STABLE_DIFFUSION_15", "LORA")
    assert not field_shown("unet.learning_rate", "training", "PIXART_ALPHA", "LORA")
    assert field_shown("transformer.learning_rate", "training", "PIXART_ALPHA", "LORA")
    assert field_shown("text_encoder_2.learning_rate", "training", "STABLE_DIFFUSION_XL_10_BASE", "LORA")
    assert not field_shown("text_encoder_2_layer_skip", "training", "STABLE_DIFFUSION_15", "LORA")
    assert field_shown("prior.learning_rate", "training", "STABLE_CASCADE_1", "FINE_TUNE")
    assert not field_shown("decoder_text_encoder.weight_dtype", "training", "STABLE_CASCADE_1", "LORA")
    assert field_shown("decoder_text_encoder.weight_dtype", "training", "WUERSTCHEN_2", "LORA")


def test_frozen_parts_show_only_how_they_load():
    assert part_field_shown("vae.weight_dtype")
    assert not part_field_shown("vae.train")
    assert part_field_shown("vae.learning_rate")  # FINE_TUNE_VAE's: shown under that method only
    assert not part_field_shown("vae.dropout_probability")
    assert not part_field_shown("decoder_vqgan.train")
    assert part_field_shown("unet.train")


@pytest.mark.parametrize("method", list(TrainingMethod))
def test_the_vae_settings_show_when_the_vae_trains(method):
    """FINE_TUNE_VAE trains the VAE's decoder alone: its learning rate and stop show, and the
    other parts' training settings (which it ignores) do not; every other method the reverse."""
    vae = method == TrainingMethod.FINE_TUNE_VAE
    for name in ("learning_rate", "stop_training_after", "stop_training_after_unit"):
        assert field_shown(f"vae.{name}", "training", "STABLE_DIFFUSION_15", method.value) == vae, name
    for path in ("unet.train", "unet.learning_rate", "text_encoder.train", "text_encoder.dropout_probability", "unet.gradient_checkpointing"):
        assert field_shown(path, "training", "STABLE_DIFFUSION_15", method.value) != vae, path
    assert field_shown("vae.weight_dtype", "training", "STABLE_DIFFUSION_15", method.value)
    assert not field_shown("vae.train", "training", "STABLE_DIFFUSION_15", method.value)


def test_caption_dropout_only_on_text_encoders():
    assert part_field_shown("text_encoder.dropout_probability")
    assert part_field_shown("text_encoder_2.dropout_probability")
    assert not part_field_shown("unet.dropout_probability")
    assert part_field_shown("dropout_probability")  # the LoRA tab's dropout is not a part's


def test_unknown_model_type_shows_every_part():
    assert shown_parts("NOT_A_MODEL") == model_parts()
    assert shown_parts(None) == model_parts()


@pytest.mark.parametrize("method", list(TrainingMethod))
def test_lora_and_embedding_tabs_follow_the_method(method):
    assert tab_shown("lora", method.value) == (method == TrainingMethod.LORA)
    assert tab_shown("embedding", method.value) == (method == TrainingMethod.EMBEDDING)
    assert tab_shown("training", method.value) and tab_shown("general", method.value)
    assert field_shown("lora_rank", "lora", "STABLE_DIFFUSION_15", method.value) == (method == TrainingMethod.LORA)


def test_the_page_hides_parts_and_tabs(page):
    """The page's visibility handler applies the rules to its accordions and tabs."""
    config = page.on_page_load()[page.config_state]
    by_part = {part: acc for acc, part in page.part_groups.items()}
    assert {"unet", "text_encoder", "vae"} <= set(by_part)
    out = page.visibility({**config, "model_type": "PIXART_ALPHA", "training_method": "EMBEDDING"})
    assert out[by_part["unet"]]["visible"] is False
    assert out[by_part["text_encoder"]]["visible"] is True
    assert out[page.tab_handles["lora"]]["visible"] is False
    assert out[page.tab_handles["embedding"]]["visible"] is True
    out = page.visibility({**config, "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA"})
    assert out[by_part["unet"]]["visible"] is True
    assert out[page.tab_handles["lora"]]["visible"] is True and out[page.tab_handles["embedding"]]["visible"] is False
    assert "vae.train" not in page.fields and "vae.weight_dtype" in page.fields
    assert out[page.fields["vae.learning_rate"].component]["visible"] is False
    assert out[page.fields["unet.learning_rate"].component]["visible"] is True
    out = page.visibility({**config, "model_type": "STABLE_DIFFUSION_15", "training_method": "FINE_TUNE_VAE"})
    assert out[page.fields["vae.learning_rate"].component]["visible"] is True
    assert out[page.fields["unet.learning_rate"].component]["visible"] is False
    assert out[page.fields["text_encoder.train"].component]["visible"] is False
    # editing the model type in the form applies them at once
    values = page.form_values(config)
    values[page.fields["model_type"].component] = "PIXART_ALPHA"
    assert page.on_edit(values)[by_part["unet"]]["visible"] is False


DDPM_ONLY = ("rescale_noise_scheduler_to_zero_terminal_snr", "force_v_prediction", "force_epsilon_prediction")


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_noise_schedule_options_only_where_they_apply(model_type):
    """Zero terminal SNR and forced v-/epsilon-prediction are DDPM options: hidden for the
    flow-matching families (SD 3, Flux, Qwen-Image...); the VB loss only where the denoiser
    learns its variance (PixArt); the transformer's attention mask only for Flux.1, SD 3 and HiDream."""
    from ot_gradio.ui.visibility import applies

    config = {"model_type": model_type.value}
    flow = FAMILIES[model_type].schedule == "flow_matching"
    assert all(applies(path, config) != flow for path in DDPM_ONLY), model_type
    # the resolution shift is the flow-matching schedule's, and replaces Timestep shift there (OneTrainer)
    assert applies("dynamic_timestep_shifting", config) == flow
    assert applies("timestep_shift", config) and applies("timestep_shift", {**config, "dynamic_timestep_shifting": True}) != flow
    assert applies("vb_loss_strength", config) == model_type.value.startswith("PIXART")
    # the padding mask: where OneTrainer reads it (its model setups and samplers)
    masks = model_type.value in ("FLUX_DEV_1", "FLUX_FILL_DEV_1", "STABLE_DIFFUSION_3", "STABLE_DIFFUSION_35", "HI_DREAM_FULL")
    assert applies("transformer.attention_mask", config) == masks
    assert applies("samples[].transformer_attention_mask", config) == masks
    # the text window: the families whose T5 / language model reads it (not CLIP's 77, Flux.1's and SD 3's own T5
    # options, HiDream's encoders, nor Qwen-Image-Edit's prompts read with the image)
    reads = FAMILIES[model_type].token_window is not None
    assert applies("text_encoder_sequence_length", config) == reads
    assert reads == (model_type.value.startswith(("PIXART", "WAN", "FLUX_2", "SANA", "HUNYUAN", "CHROMA", "Z_IMAGE", "ANIMA",
                                                  "KREA", "ERNIE", "IDEOGRAM", "LTX")) or model_type.value == "QWEN")


def test_the_page_hides_them_when_the_family_changes(page):
    values = page.form_values(page.on_page_load()[page.config_state])
    values[page.fields["model_type"].component] = "FLUX_DEV_1"
    out = page.on_edit(values)
    for path in (*DDPM_ONLY, "vb_loss_strength"):
        assert out[page.fields[path].component]["visible"] is False, path
    values[page.fields["model_type"].component] = "PIXART_ALPHA"
    out = page.on_edit(values)
    for path in (*DDPM_ONLY, "vb_loss_strength"):
        assert out[page.fields[path].component]["visible"] is True, path


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_the_method_dropdown_offers_the_model_types_methods(model_type):
    """Only the methods the family has (FINE_TUNE_VAE: SD 1.x/2.x), the ones the start check
    accepts, LoRA first; a type without the current method switches to LoRA."""
    from ot_gradio.config.doctor import method_problem
    from ot_gradio.ui.visibility import method_after_type_change, method_choices, offered_methods

    offered = offered_methods(model_type.value)
    assert offered[0] == "LORA"
    assert ("FINE_TUNE_VAE" in offered) == model_type.value.startswith(("STABLE_DIFFUSION_15", "STABLE_DIFFUSION_20", "STABLE_DIFFUSION_21"))
    for method in TrainingMethod:
        if FAMILIES[model_type].implemented:
            assert (method.value in offered) == (method_problem(model_type, method) is None), method
        kept = method.value in offered
        assert method_after_type_change(model_type.value, method.value) == (None if kept else "LORA")
        assert method_choices(model_type.value, method.value) == list(offered) + ([] if kept else [method.value])


def test_families_without_an_embedding_do_not_offer_one():
    from ot_gradio.ui.visibility import offered_methods

    assert "EMBEDDING" not in offered_methods("QWEN") and "EMBEDDING" in offered_methods("STABLE_DIFFUSION_XL_10_BASE")
    assert "FINE_TUNE_VAE" not in offered_methods("STABLE_DIFFUSION_XL_10_BASE")
    assert set(offered_methods(None)) == {m.value for m in TrainingMethod}  # a type the table does not know: every one


# FINE_TUNE_VAE's step (training/vae_method.py) encodes the images at every step and draws no noise nor timesteps
VAE_IGNORES = ("latent_caching", "offset_noise_weight", "generalized_offset_noise", "perturbation_noise_weight",
               "multires_noise_iterations", "multires_noise_discount", "offset_noise_random_strength", "adaptive_noise_scale",
               "perturbation_noise_random_strength",
               "timestep_distribution", "min_noising_strength", "max_noising_strength", "noising_weight", "noising_bias",
               "timestep_shift", "dynamic_timestep_shifting", "loss_weight_fn", "loss_weight_strength", "vb_loss_strength",
               "only_cache")
# ...and reads these (the loss, masked training, and for samples from a text prompt the schedule and clip skip)
VAE_READS = ("mse_strength", "mae_strength", "huber_strength", "log_cosh_strength", "masked_training", "learning_rate", "resolution",
             "train_dtype", "force_v_prediction", "rescale_noise_scheduler_to_zero_terminal_snr", "text_encoder_layer_skip",
             "clear_cache_before_training", "aspect_ratio_bucketing")


@pytest.mark.parametrize("method", list(TrainingMethod))
def test_fine_tune_vae_hides_what_its_step_ignores(method):
    vae = method == TrainingMethod.FINE_TUNE_VAE
    for path in VAE_IGNORES:
        assert field_shown(path, None, "STABLE_DIFFUSION_15", method.value) != vae, path
    for path in VAE_READS:
        assert field_shown(path, None, "STABLE_DIFFUSION_15", method.value), path
    assert field_shown("additional_embeddings", "embedding", "STABLE_DIFFUSION_15", method.value) == (method == TrainingMethod.EMBEDDING)


def test_the_page_offers_the_types_methods_and_hides_what_fine_tune_vae_ignores(page):
    from gradio.events import EventData

    from ot_gradio.ui.page import validate
    from ot_gradio.ui.state import load_ui_config

    method = page.fields["training_method"].component
    config = {**page.on_page_load()[page.config_state], "model_type": "STABLE_DIFFUSION_15", "training_method": "FINE_TUNE_VAE"}
    out = page.populate(config)
    assert out[method]["value"] == "FINE_TUNE_VAE" and "FINE_TUNE_VAE" in out[method]["choices"]
    for path in VAE_IGNORES:
        assert out[page.fields[path].component]["visible"] is False, path
    for path in ("force_v_prediction", "rescale_noise_scheduler_to_zero_terminal_snr"):  # a sample from a text prompt reads them
        assert out[page.fields[path].component]["visible"] is True, path
    timesteps = next(acc for acc, paths in page.method_groups.items() if "timestep_distribution" in paths)
    assert out[timesteps]["visible"] is False
    assert page.populate({**config, "training_method": "LORA"})[timesteps]["visible"] is True
    # SD 2.1 has the method: kept; Flux has not: LoRA, in the same update as the choices, and saved
    values = page.form_values(config)
    model_type = page.fields["model_type"].component
    values[model_type] = "STABLE_DIFFUSION_21"
    out = page.on_edit(values, EventData(model_type, None))
    assert out[page.config_state]["training_method"] == "FINE_TUNE_VAE" and "value" not in out[method]
    values = page.form_values(config)
    values[model_type] = "FLUX_DEV_1"
    out = page.on_edit(values, EventData(model_type, None))
    assert out[page.config_state]["training_method"] == "LORA" and out[method]["value"] == "LORA"
    assert "FINE_TUNE_VAE" not in out[method]["choices"] and out[method]["choices"][0] == "LORA"
    assert out[timesteps]["visible"] is True and out[page.fields["latent_caching"].component]["visible"] is True
    assert load_ui_config(page.workspace)["training_method"] == "LORA"
    # a loaded config whose type lacks its method: shown as it is, refused by the start check
    refused = {**config, "model_type": "FLUX_DEV_1"}
    out = page.populate(refused)
    assert out[method]["value"] == "FINE_TUNE_VAE" and "FINE_TUNE_VAE" in out[method]["choices"]
    assert any(p.startswith("training_method: FINE_TUNE_VAE is not available for model type FLUX_DEV_1") for p in validate(refused)[1])
    # GGUF: offered for the transformer of a family that reads .gguf files (the choices follow the model type)
    weights = page.fields["transformer.weight_dtype"].component
    gguf = {**config, "model_type": "Z_IMAGE", "training_method": "LORA", "transformer": {"weight_dtype": "GGUF", "model_name": "z.gguf"}}
    out = page.populate(gguf)
    assert out[weights]["value"] == "GGUF" and "GGUF" in out[weights]["choices"]
    values = page.form_values({**gguf, "transformer": {"weight_dtype": "FLOAT_8"}})
    values[model_type] = "STABLE_DIFFUSION_15"
    assert "GGUF" not in page.on_edit(values, EventData(model_type, None))[weights]["choices"]


def test_no_edit_but_the_methods_own_sends_the_method(page):
    """A model type change can drop the method from the choices while a second event of the same
    click waits in the queue: were the method among its inputs, Gradio would refuse the old one."""
    method, model_type = page.fields["training_method"].component, page.fields["model_type"].component
    for fn in page.blocks.fns.values():
        if fn.fn == page.on_edit:
            ids = {block_id for block_id, _ in fn.targets}
            assert (method in fn.inputs) == (ids == {method._id}), ids
            assert model_type._id not in ids or method not in fn.inputs
    # the event of a choice update's copy of the dropdown (an id of its own) still names the field
    import gradio as gr
    from gradio.events import EventData

    copy = gr.Dropdown(choices=["LORA", "FINE_TUNE_VAE"], elem_id=method.elem_id, render=False)
    assert copy._id != method._id
    values = {page.config_state: page.on_page_load()[page.config_state], method: "FINE_TUNE_VAE"}
    assert page.on_edit(values, EventData(copy, None))[page.config_state]["training_method"] == "FINE_TUNE_VAE"


def test_gguf_is_offered_for_the_transformer_of_the_families_that_read_gguf_files_only():
    from ot_gradio.config.fields import iter_fields
    from ot_gradio.config.gguf import GGUF_MODEL_TYPES
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.ui.visibility import transformer_weight_dtype_choices

    assert {m.value for m in GGUF_MODEL_TYPES} == {"FLUX_DEV_1", "CHROMA_1", "FLUX_2", "QWEN", "Z_IMAGE", "KREA_2", "ERNIE", "ANIMA",
                                                   "WAN_2_1", "WAN_2_2_TI2V_5B", "HUNYUAN_VIDEO", "QWEN_IMAGE_EDIT"}
    for model_type in FAMILIES:
        choices = transformer_weight_dtype_choices(model_type.value, "FLOAT_8")
        assert ("GGUF" in choices) == (model_type in GGUF_MODEL_TYPES) and "FLOAT_8" in choices
    assert transformer_weight_dtype_choices("LTX_2", "GGUF")[-1] == "GGUF"  # a loaded config keeps it, refused at the start
    # every other data type dropdown (the parts' weight types, train and output data types) leaves it out
    assert not [f.path for f in iter_fields(TrainConfig) if f.choices and "GGUF" in f.choices]
    assert "GGUF" in next(f.tooltip for f in iter_fields(TrainConfig) if f.path == "transformer.weight_dtype")


def test_the_attention_dropdown_offers_what_reaches_the_model_types_attention():
    from ot_gradio.config.enums import AttentionMechanism
    from ot_gradio.ui.visibility import attention_choices

    assert attention_choices("FLUX_DEV_1", "SDP") == ["SDP", "DEFAULT", "XFORMERS", "FLASH", "FLEX"]
    assert attention_choices("STABLE_DIFFUSION_15", "SDP") == ["SDP", "DEFAULT", "XFORMERS", "FLASH"]
    assert attention_choices("STABLE_DIFFUSION_3", "FLASH") == ["SDP", "DEFAULT", "FLASH"]  # a loaded config keeps it, refused at the start
    assert set(attention_choices(None, None)) == {m.value for m in AttentionMechanism}


def test_a_group_whose_fields_the_model_type_leaves_out_is_hidden_with_them(page):
    """The Training tab showed an empty Video clips heading for SD 1.5 (its fields apply to video models only)."""
    video = next(acc for acc, paths in page.method_groups.items() if "frames" in paths)
    config = {**page.on_page_load()[page.config_state], "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA"}
    assert page.populate(config)[video]["visible"] is False
    assert page.populate({**config, "model_type": "WAN_2_1"})[video]["visible"] is True


def test_include_is_shown_on_the_parts_the_model_type_may_leave_out(page):
    """OneTrainer's Include: the text encoders of SD 3, Flux.1, HiDream and HunyuanVideo, and Ideogram 4's
    unconditional transformer ("Include Unconditional Transformer"); no other part has the field."""
    config = {**page.on_page_load()[page.config_state], "training_method": "LORA"}
    assert {p for p in page.fields if p.endswith(".include")} == {
        "text_encoder.include", "text_encoder_2.include", "text_encoder_3.include", "text_encoder_4.include",
        "unconditional_transformer.include"}
    for model_type, shown in (("IDEOGRAM_4", {"unconditional_transformer.include"}), ("FLUX_DEV_1", {"text_encoder.include", "text_encoder_2.include"}),
                              ("STABLE_DIFFUSION_15", set())):
        out = page.visibility({**config, "model_type": model_type})
        assert {p for p, f in page.fields.items() if p.endswith(".include") and out[f.component]["visible"]} == shown, model_type


def test_a_left_out_parts_settings_are_hidden_and_the_part_says_why(page):
    """SD 3 with T5 left out (text_encoder_3.include off): its weight type, and every setting of it
    but Include and Train (refused while on), did nothing yet stayed on the page."""
    values = page.form_values({**page.on_page_load()[page.config_state], "model_type": "STABLE_DIFFUSION_3", "training_method": "LORA"})
    values[page.fields["text_encoder_3.train"].component] = False
    values[page.fields["text_encoder_3.include"].component] = False
    out = page.on_edit(values)
    visible = {p: out[f.component]["visible"] for p, f in page.fields.items() if f.component in out and "visible" in out[f.component]}
    for path in ("text_encoder_3.weight_dtype", "text_encoder_3.learning_rate", "text_encoder_3.offload_fraction",
                 "text_encoder_3.model_name", "text_encoder_3_layer_skip"):
        assert visible[path] is False, path
    for path in ("text_encoder_3.include", "text_encoder_3.train", "text_encoder_2.weight_dtype", "text_encoder_3_sequence_length"):
        assert visible[path] is True, path  # the zeros in T5's place are that many tokens long
    notes = {part: out[note]["visible"] for note, part in page.left_out_notes.items()}
    assert notes["text_encoder_3"] is True and notes["text_encoder_2"] is False
    values[page.fields["text_encoder_3.include"].component] = True
    out = page.on_edit(values)
    assert out[page.fields["text_encoder_3.weight_dtype"].component]["visible"] is True
    assert not any(out[note]["visible"] for note in page.left_out_notes)


def test_a_loaded_config_with_a_part_left_out_shows_it_so(page):
    """Ideogram 4 with its unconditional transformer left out: its weight type (the one setting of it
    the trainer reads) is hidden; on SD 1.5, where Include is ignored, the text encoder's stays."""
    base = {**page.on_page_load()[page.config_state], "training_method": "LORA"}
    out = page.populate({**base, "model_type": "IDEOGRAM_4", "unconditional_transformer": {"include": False, "weight_dtype": "NFLOAT_4"}})
    assert out[page.fields["unconditional_transformer.weight_dtype"].component]["visible"] is False
    assert [part for note, part in page.left_out_notes.items() if out[note]["visible"]] == ["unconditional_transformer"]
    out = page.populate({**base, "model_type": "STABLE_DIFFUSION_15", "text_encoder": {**base["text_encoder"], "include": False}})
    assert out[page.fields["text_encoder.weight_dtype"].component]["visible"] is True
    assert not any(out[note]["visible"] for note in page.left_out_notes)
