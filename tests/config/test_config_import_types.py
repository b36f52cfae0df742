"""Values of the wrong type or an unusable file name in a OneTrainer config are reported as
`field: what is allowed`, never as a traceback from the import's conversions (the
three tracebacks of `validate`)."""

import json

import pytest

from ot_gradio.cli import main as cli_main
from ot_gradio.config.io import ConfigError, load_config

CASES = [
    # (raw values of a OneTrainer config, what the one-line error must say)
    ({"concept_file_name": "a" * 5000}, r"concept_file_name: 'a{60}\.\.\. \(5000 characters\)' is not a usable file name \(File name too long\)"),
    ({"concept_file_name": {"a": 1}}, r"concept_file_name: must be text \(got \{'a': 1\}\)"),
    ({"sample_definition_file_name": ["x"]}, r"sample_definition_file_name: must be text"),
    ({"timestep_distribution": {"a": 1}}, r"timestep_distribution: must be one of UNIFORM, .* \(got \{'a': 1\}\)"),
    ({"timestep_distribution": ["PARABOLA"]}, r"timestep_distribution: must be one of"),
    ({"__version": 0, "embedding_model_names": True}, r"embedding.model_name: must be text \(got true\)"),  # a number is its text, as in OneTrainer
    ({"__version": 0, "embedding_model_names": [{"a": 1}]}, r"embedding.model_name: must be text"),
    ({"__version": 2, "noising_weight": 1.0, "noising_bias": "x"}, r"noising_bias: must be a number \(got 'x'\)"),
    ({"__version": 1, "min_snr_gamma": "z"}, r"loss_weight_strength: must be a number"),
]


def ot_config(values: dict) -> dict:
    return {"__version": 11, "model_type": "STABLE_DIFFUSION_15", "concepts": None, **values}


@pytest.mark.parametrize(("values", "message"), CASES)
def test_bad_raw_values_are_named_not_tracebacks(tmp_path, values, message):
    with pytest.raises(ConfigError, match=message):
        load_config(ot_config(values), base_dir=tmp_path)


@pytest.mark.parametrize(("values", "message"), CASES[:4])
def test_validate_prints_one_line(tmp_path, capsys, values, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(ot_config(values)))
    assert cli_main(["validate", "--config", str(path)]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert len(lines[0]) < 400  # the 5000-character name is shortened


def test_good_values_still_convert(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps([{"name": "cat", "path": str(tmp_path)}]))
    loaded = load_config(ot_config({"concept_file_name": "c.json", "timestep_distribution": "PARABOLA"}), base_dir=tmp_path)
    assert loaded.config.timestep_distribution.value == "INVERTED_PARABOLA"
    assert [c.name for c in loaded.config.concepts] == ["cat"]
    old = load_config({"__version": 0, "model_type": "STABLE_DIFFUSION_15", "embedding_model_names": ["e.pt"],
                       "noising_weight": 0.5, "noising_bias": 0.75, "concepts": []})
    assert old.config.embedding.model_name == "e.pt"
    assert old.config.noising_bias == pytest.approx(0.25)


@pytest.mark.parametrize("theirs", ["INT_W8A8", "FLOAT_W8A8"])
def test_w8a8_weight_types_import_as_they_are(theirs):
    loaded = load_config(ot_config({"unet": {"weight_dtype": theirs}}))
    assert loaded.config.unet.weight_dtype.value == theirs
    assert not [w for w in loaded.warnings if "weight_dtype" in w], loaded.warnings


@pytest.mark.parametrize(("theirs", "ours"), [("INT_W8A8_COMPRESSED", "INT_W8A8"), ("FLOAT_W8A8_COMPRESSED", "FLOAT_W8A8")])
def test_compressed_w8a8_weight_types_import_uncompressed_saying_so_once(theirs, ours):
    loaded = load_config(ot_config({"unet": {"weight_dtype": theirs}, "text_encoder": {"weight_dtype": theirs}}))
    assert loaded.config.unet.weight_dtype.value == ours and loaded.config.text_encoder.weight_dtype.value == ours
    said = [w for w in loaded.warnings if "weight_dtype" in w]
    assert len(said) == 1 and f"unet.weight_dtype {theirs} -> {ours}; text_encoder.weight_dtype {theirs} -> {ours}" in said[0], said
    assert "nvCOMP weight compression is not supported" in said[0]
    # Ideogram 4's unconditional transformer, which OneTrainer's page offers them for too
    loaded = load_config(ot_config({"model_type": "IDEOGRAM_4", "unconditional_transformer": {"weight_dtype": theirs}}))
    assert loaded.config.unconditional_transformer.weight_dtype.value == ours


@pytest.mark.parametrize(("model_type", "theirs", "ours"), [
    ("FLUX_DEV_1", "FLEX", "FLEX"), ("WAN_2_1", "FLASH", "FLASH"), ("KREA_2", "CUDNN", "SDP"), ("STABLE_DIFFUSION_15", "FLASH", "FLASH"),
    ("STABLE_DIFFUSION_15", "FLEX", "SDP"), ("STABLE_DIFFUSION_3", "FLASH", "SDP"), ("HI_DREAM_FULL", "FLEX", "SDP")])
def test_attention_mechanisms_of_newer_onetrainer_import_as_they_run(model_type, theirs, ours):
    """OneTrainer 12 added FLEX (and CUDNN, which is SDP); it sets diffusers' attention backend,
    which the classic UNet processors and SD 3's / HiDream's own ignore: there its FLEX / FLASH ran
    as SDP, and imports so, said once. Where the mechanism reaches the attention it stays."""
    loaded = load_config(ot_config({"model_type": model_type, "attention_mechanism": theirs}))
    assert loaded.config.attention_mechanism.value == ours
    said = [w for w in loaded.warnings if "attention_mechanism" in w]
    changed = theirs != ours and theirs != "CUDNN"
    assert said == ([f"attention_mechanism {theirs} -> SDP: {model_type}'s attention does not go through diffusers' attention backends, "
                     f"so OneTrainer's {theirs} ran as SDP there too."] if changed else []), said


def test_orthogonal_gradient_modes_of_newer_onetrainer_import_and_other_text_is_refused():
    """adv-optm 2.5 made OrthoGrad a mode ("disabled", "flattened", "iterative"); any other text is
    refused by name, never read as on."""
    def ortho(value):
        return load_config(ot_config({"optimizer": {"optimizer": "ADAMW_ADV", "orthogonal_gradient": value}})).config.optimizer.orthogonal_gradient

    assert [ortho(v) for v in ("disabled", "flattened", "iterative", False, True)] == [False, True, True, False, True]
    with pytest.raises(ConfigError, match=r"optimizer.orthogonal_gradient: must be true or false \(got 'maybe'\)"):
        ortho("maybe")


@pytest.mark.parametrize("theirs", ["GGUF", "GGUF_A8_FLOAT", "GGUF_A8_INT"])
def test_gguf_weight_types_import_unchanged(theirs):
    """OneTrainer's GGUF presets (a .gguf transformer file under a LoRA) import as they are, the A8
    forms too (their 8-bit matmuls: tests/models/test_gguf_transformer.py); without the file, or on
    another part, each is refused by name."""
    from ot_gradio.config.doctor import errors

    loaded = load_config(ot_config({"model_type": "Z_IMAGE", "training_method": "LORA", "text_encoder": {"train": False},
                                    "transformer": {"weight_dtype": theirs, "model_name": "z_image-Q8_0.gguf"}}))
    assert loaded.config.transformer.weight_dtype.value == theirs
    assert not [w for w in loaded.warnings if "weight_dtype" in w], loaded.warnings
    assert not [e for e in errors(loaded.config) if "GGUF" in e or "gguf" in e]
    no_file = load_config({"config_version": 1, "model_type": "Z_IMAGE", "training_method": "LORA", "transformer": {"weight_dtype": theirs},
                           "text_encoder": {"weight_dtype": theirs}}).config
    assert [e for e in errors(no_file) if "GGUF" in e] == [
        f"text_encoder.weight_dtype: {theirs} is a weight type of the transformer (from a .gguf transformer file); choose another one "
        "for the text_encoder",
        f"transformer.model_name: {theirs} weights (transformer.weight_dtype) come from a .gguf transformer file; give its path or "
        "Hugging Face file address here, or choose another weight type."]


@pytest.mark.parametrize(("model_type", "expected"), [
    ("FLUX_DEV_1", (1024, 1024, 30, 3.5, "DDIM")), ("STABLE_DIFFUSION_XL_10_BASE", (1024, 1024, 30, 7.5, "EULER_A")),
    ("STABLE_DIFFUSION_15", (512, 512, 30, 7.5, "EULER_A")), ("HUNYUAN_VIDEO", (848, 480, 30, 6.0, "DDIM"))])
def test_a_sample_that_leaves_fields_out_takes_onetrainers_defaults_for_the_model(tmp_path, model_type, expected):
    """OneTrainer reads a samples file with the model type's defaults (SampleConfig.default_values);
    what a sample sets stays, and Chroma's default negative prompt comes along."""
    (tmp_path / "samples.json").write_text(json.dumps([{"prompt": "a cat"}, {"prompt": "a dog", "width": 640, "cfg_scale": 2.0}]))
    config = load_config(ot_config({"model_type": model_type, "samples": None, "sample_definition_file_name": "samples.json"}),
                         base_dir=tmp_path).config
    first, second = config.samples
    assert (first.width, first.height, first.diffusion_steps, first.cfg_scale, first.noise_scheduler.value) == expected
    assert (second.width, second.cfg_scale, second.height) == (640, 2.0, expected[1])
    chroma = load_config(ot_config({"model_type": "CHROMA_1", "samples": [{"prompt": "a cat"}]})).config.samples[0]
    assert chroma.negative_prompt.startswith("This low-quality, greyscale, unfinished sketch")
