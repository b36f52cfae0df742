"""Text encoders from files of their own (`text_encoder*.model_name`, models/text_encoder_file.py),
as ComfyUI and kohya keep them beside a Flux.1 / Chroma transformer file: CLIP-L with
`text_model.` keys, T5 in half precision or ComfyUI's scaled FP8. Each loads through every path
(a diffusers folder, a BFL transformer file with its config folder, a hub repo), and from a hub
repo the part's weights are not downloaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ot_gradio.models.common import ModelLoadError
from tests.fake_hub import FakeHub


@pytest.fixture(scope="module")
def flux_paths(tiny_dir):
    from ot_gradio.models.tiny import resolve_tiny

    return resolve_tiny("tiny:flux")


@pytest.fixture(scope="module")
def base(flux_paths):
    from ot_gradio.models.flux import FluxDev1

    return FluxDev1.load(str(flux_paths.diffusers_dir), offline=True)


def comfy_files(base, folder: Path) -> dict[str, Path]:
    """The tiny model's CLIP-L (+0.5) and T5 (x2) written as ComfyUI's clip_l.safetensors (with
    CLIP's `text_model.` prefix and its logit scale) and t5xxl_fp16.safetensors (no tied copy of the
    embedding), so a load that ignored them would show."""
    folder.mkdir(parents=True, exist_ok=True)
    clip = {("" if k.startswith("text_model.") else "text_model.") + k: (v + 0.5).contiguous()
            for k, v in base.text_encoder.state_dict().items()}
    clip["logit_scale"] = torch.tensor(4.6)
    t5 = {k: (v * 2).half().contiguous() for k, v in base.text_encoder_2.state_dict().items() if k != "encoder.embed_tokens.weight"}
    save_file(clip, folder / "clip_l.safetensors")
    save_file(t5, folder / "t5xxl_fp16.safetensors")
    return {"text_encoder": folder / "clip_l.safetensors", "text_encoder_2": folder / "t5xxl_fp16.safetensors"}


def assert_from_files(model, base) -> None:
    clip, t5 = base.text_encoder.state_dict(), base.text_encoder_2.state_dict()
    assert all(torch.equal(v, clip[k] + 0.5) for k, v in model.text_encoder.state_dict().items())
    assert all(torch.equal(v, (t5[k] * 2).half().float()) for k, v in model.text_encoder_2.state_dict().items())
    assert model.text_encoder_2.encoder.embed_tokens.weight is model.text_encoder_2.shared.weight  # still tied
    assert not model.text_encoder.training and not model.text_encoder_2.training
    assert all(torch.equal(v, base.transformer.state_dict()[k]) for k, v in model.transformer.state_dict().items())


def test_comfyui_text_encoder_files_replace_the_folder_and_the_single_files_parts(base, flux_paths, tmp_path):
    from ot_gradio.models.flux import FluxDev1
    from ot_gradio.models.sd_single_file import vae_to_original

    files = {part: str(path) for part, path in comfy_files(base, tmp_path).items()}
    assert_from_files(FluxDev1.load(str(flux_paths.diffusers_dir), offline=True, part_models=files), base)
    # a ComfyUI user's four files: BFL's transformer as the base model, CLIP-L, T5 and BFL's ae.safetensors (LDM names)
    vae = {k: v + 0.1 for k, v in base.vae.state_dict().items()}
    save_file({k: v.contiguous() for k, v in vae_to_original(vae, base.vae.config).items()}, tmp_path / "ae.safetensors")
    single = FluxDev1.load(str(flux_paths.single_file), offline=True, config_dir=str(flux_paths.diffusers_dir),
                           part_models={**files, "vae": str(tmp_path / "ae.safetensors")})
    assert_from_files(single, base)
    assert all(torch.equal(v, vae[k]) for k, v in single.vae.state_dict().items())
    only_t5 = FluxDev1.load(str(flux_paths.diffusers_dir), offline=True, part_models={"text_encoder_2": files["text_encoder_2"]},
                            dtypes={"text_encoder_2": torch.bfloat16})
    assert only_t5.text_encoder_2.dtype == torch.bfloat16
    assert all(torch.equal(v, base.text_encoder.state_dict()[k]) for k, v in only_t5.text_encoder.state_dict().items())
    # in float16, T5's `wo` layers stay float32 as transformers loads them (T5 overflows in float16 there)
    half = {"text_encoder_2": torch.float16}
    dtypes = {k: v.dtype for k, v in FluxDev1.load(str(flux_paths.diffusers_dir), offline=True, dtypes=half).text_encoder_2.state_dict().items()}
    got = FluxDev1.load(str(flux_paths.diffusers_dir), offline=True, part_models=files, dtypes=half).text_encoder_2.state_dict()
    assert {k: v.dtype for k, v in got.items()} == dtypes and dtypes["encoder.block.0.layer.1.DenseReluDense.wo.weight"] == torch.float32
    wo = "encoder.block.0.layer.1.DenseReluDense.wo.weight"  # and from a float32 file, its float32 values, not float16's
    full = {k: (v * 2).contiguous() for k, v in base.text_encoder_2.state_dict().items() if k != "encoder.embed_tokens.weight"}
    save_file(full, tmp_path / "t5xxl_fp32.safetensors")
    got = FluxDev1.load(str(flux_paths.diffusers_dir), offline=True, part_models={"text_encoder_2": str(tmp_path / "t5xxl_fp32.safetensors")},
                        dtypes=half).text_encoder_2.state_dict()
    assert torch.equal(got[wo], full[wo]) and not torch.equal(full[wo].half().float(), full[wo])
    # a T5 file that holds the embedding under its tied copy's name only
    t5 = load_file(files["text_encoder_2"])
    t5["encoder.embed_tokens.weight"] = t5.pop("shared.weight")
    save_file(t5, tmp_path / "t5_embed_tokens.safetensors")
    tied = FluxDev1.load(str(flux_paths.diffusers_dir), offline=True, part_models={"text_encoder_2": str(tmp_path / "t5_embed_tokens.safetensors")})
    assert torch.equal(tied.text_encoder_2.shared.weight, t5["encoder.embed_tokens.weight"].float())


def test_a_scaled_fp8_t5_file_reads_back_to_its_values_and_chroma_reads_t5(base, tmp_path):
    from ot_gradio.models.chroma import Chroma1
    from ot_gradio.models.tiny import resolve_tiny

    chroma = Chroma1.load("tiny:chroma", offline=True)
    weights = chroma.text_encoder.state_dict()
    scaled: dict[str, torch.Tensor] = {"scaled_fp8": torch.zeros(0, dtype=torch.float8_e4m3fn)}
    for key, value in weights.items():
        if key == "encoder.embed_tokens.weight":
            continue
        if key.endswith(".weight") and value.ndim == 2 and key != "shared.weight":  # ComfyUI scales the Linear layers
            scale = value.abs().max() / 448
            scaled[key] = (value / scale).to(torch.float8_e4m3fn)
            scaled[key.removesuffix("weight") + "scale_weight"] = scale.reshape(())
        else:
            scaled[key] = value.clone()
    save_file(scaled, tmp_path / "t5xxl_fp8_e4m3fn_scaled.safetensors")
    folder = resolve_tiny("tiny:chroma").diffusers_dir
    model = Chroma1.load(str(folder), offline=True, part_models={"text_encoder": str(tmp_path / "t5xxl_fp8_e4m3fn_scaled.safetensors")})
    for key, value in model.text_encoder.state_dict().items():
        if key.removesuffix("weight") + "scale_weight" in scaled:
            expected = scaled[key].float() * scaled[key.removesuffix("weight") + "scale_weight"]
            assert torch.equal(value, expected), key
            assert torch.allclose(value, weights[key], rtol=0.07, atol=1e-3), key  # float8's own rounding only
        else:
            assert torch.equal(value, weights[key]), key


def test_comfyuis_mixed_precision_fp8_and_int8_files_read_back_to_their_values(tmp_path):
    """ComfyUI's newer layout: each quantized layer named with its format (a `comfy_quant` JSON
    entry, or the file's `_quantization_metadata`) beside its `weight_scale` (and `input_scale`):
    FP8 with one scale per tensor and INT8 with one per row are the weight times its scale; a
    block-scaled (nvfp4) or rotated (convrot) layer is refused, naming its format."""
    import json as _json

    from ot_gradio.models.chroma import Chroma1
    from ot_gradio.models.tiny import resolve_tiny

    folder = str(resolve_tiny("tiny:chroma").diffusers_dir)
    weights = Chroma1.load(folder, offline=True).text_encoder.state_dict()
    note = lambda spec: torch.tensor(list(_json.dumps(spec).encode()), dtype=torch.uint8)  # noqa: E731
    linear = [k for k, v in weights.items() if k.endswith(".weight") and v.ndim == 2 and k not in ("shared.weight", "encoder.embed_tokens.weight")]
    file, listed, expected = {}, {}, {}
    for number, key in enumerate(linear):
        layer, value = key.removesuffix(".weight"), weights[key]
        if number % 3 == 2:  # INT8, one scale per row
            scale = value.abs().amax(dim=1) / 127
            file[key] = torch.round(value / scale[:, None]).to(torch.int8)
            file[f"{layer}.weight_scale"] = scale
            file[f"{layer}.comfy_quant"] = note({"format": "int8_tensorwise"})
            expected[key] = file[key].float() * scale[:, None]
        else:  # FP8, one scale per tensor; every other one listed in the file's metadata instead
            scale = value.abs().max() / 448
            file[key] = (value / scale).to(torch.float8_e4m3fn)
            file[f"{layer}.weight_scale"] = scale.reshape(())
            file[f"{layer}.input_scale"] = torch.tensor(1.0)
            if number % 3 == 0:
                file[f"{layer}.comfy_quant"] = note({"format": "float8_e4m3fn"})
            else:
                listed[layer] = {"format": "float8_e4m3fn"}
            expected[key] = file[key].float() * scale
    for key, value in weights.items():
        if key not in file and key != "encoder.embed_tokens.weight":
            file[key] = value.clone()
    metadata = {"_quantization_metadata": _json.dumps({"format_version": "1.0", "layers": listed})}
    save_file(file, tmp_path / "t5xxl_fp8_mixed.safetensors", metadata=metadata)
    model = Chroma1.load(folder, offline=True, part_models={"text_encoder": str(tmp_path / "t5xxl_fp8_mixed.safetensors")})
    got = model.text_encoder.state_dict()
    for key, value in got.items():
        assert torch.equal(value, expected.get(key, weights[key])), key
    assert any(torch.equal(got[k], expected[k]) and not torch.equal(expected[k], weights[k]) for k in linear)  # dequantized, not the originals
    for spec, word in (({"format": "nvfp4"}, "nvfp4"), ({"format": "int8_tensorwise", "convrot": True}, "int8_tensorwise with convrot")):
        bad = dict(file)
        bad[f"{linear[0].removesuffix('.weight')}.comfy_quant"] = note(spec)
        save_file(bad, tmp_path / "t5_bad.safetensors", metadata=metadata)
        with pytest.raises(ModelLoadError, match=rf"text_encoder.model_name: t5_bad.safetensors holds weights quantized in a layout not read here \(.* is quantized as {word}\)"):
            Chroma1.load(folder, offline=True, part_models={"text_encoder": str(tmp_path / "t5_bad.safetensors")})


def test_a_file_of_another_encoder_is_refused_naming_the_field(base, flux_paths, tmp_path):
    from ot_gradio.models.flux import FluxDev1

    files = comfy_files(base, tmp_path)
    folder = str(flux_paths.diffusers_dir)
    with pytest.raises(ModelLoadError, match=r"text_encoder.model_name: t5xxl_fp16.safetensors is not the CLIPTextModel .*: (\d+) of the \1 weights it needs are not in it"):
        FluxDev1.load(folder, offline=True, part_models={"text_encoder": str(files["text_encoder_2"])})
    wide = {k: torch.cat([v, v], dim=-1) if v.ndim == 2 else v for k, v in base.text_encoder.state_dict().items()}
    save_file({k: v.contiguous() for k, v in wide.items()}, tmp_path / "clip_g.safetensors")
    with pytest.raises(ModelLoadError, match=r"text_encoder.model_name: clip_g.safetensors is not the CLIPTextModel .* other shapes"):
        FluxDev1.load(folder, offline=True, part_models={"text_encoder": str(tmp_path / "clip_g.safetensors")})
    half = dict(list(base.text_encoder_2.state_dict().items())[:5])
    save_file({k: v.clone() for k, v in half.items()}, tmp_path / "t5_part.safetensors")
    with pytest.raises(ModelLoadError, match=r"text_encoder_2.model_name: t5_part.safetensors .* weights it needs are not in it"):
        FluxDev1.load(folder, offline=True, part_models={"text_encoder_2": str(tmp_path / "t5_part.safetensors")})
    newer = {k: v.clone() for k, v in base.text_encoder_2.state_dict().items() if k != "encoder.embed_tokens.weight"}
    newer["encoder.block.0.layer.0.SelfAttention.q.weight_scale"] = torch.tensor(0.01)  # ComfyUI's newer quantized layout
    save_file(newer, tmp_path / "t5_quant.safetensors")
    with pytest.raises(ModelLoadError, match=r"text_encoder_2.model_name: t5_quant.safetensors holds weights quantized in a layout not read"):
        FluxDev1.load(folder, offline=True, part_models={"text_encoder_2": str(tmp_path / "t5_quant.safetensors")})
    (tmp_path / "t5.gguf").write_bytes(b"GGUF")  # cut short
    with pytest.raises(ModelLoadError, match=r"text_encoder_2.model_name: t5.gguf could not be read as a .gguf file"):
        FluxDev1.load(folder, offline=True, part_models={"text_encoder_2": str(tmp_path / "t5.gguf")})
    (tmp_path / "t5.bin").write_bytes(b"\0" * 8)
    with pytest.raises(ModelLoadError, match=r"text_encoder_2.model_name: t5.bin is not a .safetensors or .gguf file"):
        FluxDev1.load(folder, offline=True, part_models={"text_encoder_2": str(tmp_path / "t5.bin")})


LOAD = """
import json, sys
from ot_gradio.models.registry import get_family
model = get_family(sys.argv[1]).load(sys.argv[2], cache_dir=sys.argv[3], offline=False, part_models=json.loads(sys.argv[4]))
print("RESULT " + json.dumps({part: float(model.parts[part].state_dict()[key].sum()) for part, key in json.loads(sys.argv[5]).items()}))
"""


@pytest.mark.parametrize("model_type, tiny", [("FLUX_DEV_1", "flux"), ("STABLE_DIFFUSION_35", "sd35")])
def test_from_a_hub_repo_the_parts_given_as_files_are_not_downloaded(model_type, tiny, tmp_path):
    """The text encoders' and the VAE's files: none of those parts' weights are fetched."""
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.sd_single_file import vae_to_original
    from ot_gradio.models.tiny import resolve_tiny

    folder = resolve_tiny(f"tiny:{tiny}").diffusers_dir
    base = get_family(model_type).load(str(folder), offline=True)
    written = comfy_files(base, tmp_path / "files") if tiny == "flux" else sd3_files(base, tmp_path / "files")
    files = {part: str(path) for part, path in written.items()}
    vae = {k: (v + 0.1).contiguous() for k, v in vae_to_original(base.vae.state_dict(), base.vae.config).items()}
    save_file(vae, tmp_path / "files" / "ae.safetensors")  # the VAE in its original (LDM) names, as BFL's ae.safetensors
    files["vae"] = str(tmp_path / "files" / "ae.safetensors")
    probe = {part: next(iter(base.parts[part].state_dict())) for part in files}
    with FakeHub({f"owner/{tiny}": folder}) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0",
               "HF_HOME": str(tmp_path / "home"), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        out = subprocess.run([sys.executable, "-c", LOAD, model_type, f"owner/{tiny}", str(tmp_path / "hf"), json.dumps(files),
                              json.dumps(probe)], env=env, capture_output=True, text=True, timeout=600)
    result = [json.loads(line.removeprefix("RESULT ")) for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert result, out.stderr[-3000:]
    for part, key in probe.items():  # each part holds its file's weights
        if part == "vae":
            assert result[0][part] == pytest.approx(float((base.vae.state_dict()[key] + 0.1).sum()), rel=1e-5)
            continue
        stored = load_file(files[part])
        value = stored.get(key, stored.get(key.removeprefix("text_model."), stored.get("text_model." + key)))
        assert result[0][part] == pytest.approx(float(value.float().sum()), rel=1e-5), part
    fetched = {path for method, path in hub.requests if method == "GET" and "/resolve/" in path}
    assert any("/transformer/" in p and p.endswith(".safetensors") for p in fetched), sorted(fetched)
    assert all(any(p.endswith(f"/{part}/config.json") for p in fetched) for part in files), sorted(fetched)
    assert not any(p.endswith(".safetensors") and p.split("/")[-2] in files for p in fetched), sorted(fetched)


def test_the_field_shows_for_the_families_that_read_it():
    from ot_gradio.config.conditions import READS_TEXT_ENCODER_FILES
    from ot_gradio.config.enums import ModelType
    from ot_gradio.config.families import family_info

    shown = sorted(t.value for t in ModelType if family_info(t) is not None and READS_TEXT_ENCODER_FILES({"model_type": t.value}))
    assert shown == ["ANIMA", "CHROMA_1", "FLUX_2", "FLUX_DEV_1", "FLUX_FILL_DEV_1", "HI_DREAM_FULL", "HUNYUAN_VIDEO", "QWEN",
                     "QWEN_IMAGE_EDIT", "SANA", "STABLE_DIFFUSION_3", "STABLE_DIFFUSION_35", "WAN_2_1", "WAN_2_1_I2V", "WAN_2_2_I2V_A14B",
                     "WAN_2_2_T2V_A14B", "WAN_2_2_TI2V_5B", "Z_IMAGE"]


def sd3_files(model, folder: Path) -> dict[str, Path]:
    """SD 3's three text encoders (+0.25) as ComfyUI's clip_l, clip_g and t5xxl files."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for part, name in (("text_encoder", "clip_l"), ("text_encoder_2", "clip_g"), ("text_encoder_3", "t5xxl_fp16")):
        weights = {k: (v + 0.25).contiguous() for k, v in model.parts[part].state_dict().items() if k != "encoder.embed_tokens.weight"}
        save_file(weights, folder / f"{name}.safetensors")
        out[part] = folder / f"{name}.safetensors"
    return out


def test_sd3_reads_its_three_text_encoders_from_files_through_each_path(tmp_path):
    """A diffusers folder, SAI's file without text encoders (sd3.5_large.safetensors) and one with
    them (the `incl_clips` files: it loads by itself too, and the files replace its encoders)."""
    from safetensors import safe_open

    from ot_gradio.models.sd3 import StableDiffusion35
    from ot_gradio.models.tiny import resolve_tiny

    folder = resolve_tiny("tiny:sd35").diffusers_dir
    base = StableDiffusion35.load(str(folder), offline=True)
    files = {part: str(path) for part, path in sd3_files(base, tmp_path / "files").items()}
    bare = base.save_single_file(tmp_path / "sd3.5_large.safetensors", None)
    with safe_open(str(bare), "pt") as f:
        weights = {k: f.get_tensor(k) for k in f.keys()}
    for part, name in (("text_encoder", "clip_l"), ("text_encoder_2", "clip_g"), ("text_encoder_3", "t5xxl")):  # SAI's names
        weights |= {f"text_encoders.{name}.transformer.{k}": v.clone() for k, v in base.parts[part].state_dict().items()}
    incl = tmp_path / "sd3.5_large_incl_clips_t5xxlfp16.safetensors"
    save_file(weights, incl)
    whole = StableDiffusion35.load(str(incl), offline=True, config_dir=str(folder))
    for part in ("transformer", "text_encoder_2", "text_encoder_3", "vae"):  # (diffusers gives CLIP-L its own projection)
        expected, got = base.parts[part].state_dict(), whole.parts[part].state_dict()
        assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in got), part
    for name, config_dir in ((str(folder), None), (str(bare), str(folder)), (str(incl), str(folder))):
        model = StableDiffusion35.load(name, offline=True, config_dir=config_dir, part_models=files)
        for part in files:
            expected, got = base.parts[part].state_dict(), model.parts[part].state_dict()
            assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k] + 0.25) for k in got), (name, part)


def test_the_start_check_wants_the_base_models_part_beside_a_text_encoder_file(tmp_path):
    """A text encoder file is read with the config of the base model's part: a base folder without
    T5 (its model_index.json lists none) is refused with a T5 file too, and names no field to set."""
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.runner.startcheck import folder_family_problem

    folder = tmp_path / "no-t5"
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline", "transformer": ["diffusers", "x"],
                                                         "text_encoder": ["transformers", "x"], "text_encoder_2": [None, None]}))
    for config in (TrainConfig(model_type="FLUX_DEV_1"), TrainConfig(model_type="FLUX_DEV_1", text_encoder_2={"model_name": "t5.safetensors"})):
        problem = folder_family_problem(config, str(folder))
        assert "which has no text_encoder_2" in problem and problem.endswith("the model type that matches this folder"), problem
VISION = ("model.vision_tower.", "model.multi_modal_projector.")  # not in ComfyUI's Mistral for Flux.2


def comfy_layout(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """An encoder's weights (+0.5) under the names ComfyUI's file of it has: a causal LM's `model.`
    around an LLM's, Qwen2.5-VL's older layout (`model.layers`, `visual.`) without its output layer,
    Flux.2 dev's Mistral as its language model alone (`model.layers`, no vision tower, the tokenizer
    in `tekken_model`), CLIP's `text_model.`, T5 / UMT5 as they are; no tied copy of an embedding."""
    tied = set(getattr(module, "all_tied_weights_keys", None) or ())
    kind = type(module).__name__
    out = {}
    for key, value in module.state_dict().items():
        if key in tied or key.startswith("lm_head.") or (kind == "Mistral3ForConditionalGeneration" and key.startswith(VISION)):
            continue
        if kind in ("Qwen3Model", "LlamaModel", "Gemma2Model"):
            name = f"model.{key}"
        elif kind == "Qwen2_5_VLForConditionalGeneration":
            name = key.replace("model.language_model.", "model.", 1).replace("model.visual.", "visual.", 1)
        elif kind == "Mistral3ForConditionalGeneration":
            name = key.replace("model.language_model.", "model.", 1)
        elif "CLIP" in kind and not key.startswith("text_model."):
            name = f"text_model.{key}"
        else:
            name = key
        out[name] = (value + 0.5).contiguous()
    if kind == "Mistral3ForConditionalGeneration":
        out["tekken_model"] = torch.arange(16, dtype=torch.uint8)
    return out


@pytest.mark.parametrize("model_type, tiny", [("Z_IMAGE", "z-image"), ("WAN_2_1", "wan"), ("WAN_2_1_I2V", "wan21-i2v"),
                                              ("HUNYUAN_VIDEO", "hunyuan_video"), ("QWEN", "qwen-image"),
                                              ("QWEN_IMAGE_EDIT", "qwen-image-edit"), ("HI_DREAM_FULL", "hidream"),
                                              ("FLUX_2", "flux2-dev"), ("FLUX_2", "flux2-klein"), ("ANIMA", "anima"), ("SANA", "sana")])
def test_comfyui_text_encoder_files_of_the_other_families(model_type, tiny, tmp_path):
    """Z-Image's qwen_3_4b, Wan's umt5_xxl, HunyuanVideo's llava_llama3 and clip_l, Qwen-Image's
    qwen_2.5_vl_7b (Qwen2.5-VL's original layout, no output layer), HiDream's CLIPs and T5, Flux.2
    dev's mistral_3_small_flux2 and Klein's qwen_3_4b, Anima's qwen_3_06b_base, Sana's gemma_2_2b,
    as ComfyUI ships them."""
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny

    family = get_family(model_type)
    folder = str(resolve_tiny(f"tiny:{tiny}").diffusers_dir)
    base = family.load(folder, offline=True)
    files = {}
    for part in family.text_encoder_names:
        if part == "text_encoder_4":  # HiDream's Llama: a model of its own (Text encoder 4's Llama model), not a file
            continue
        save_file(comfy_layout(base.parts[part]), tmp_path / f"{part}.safetensors")
        files[part] = str(tmp_path / f"{part}.safetensors")
    model = family.load(folder, offline=True, part_models=files)
    for part in files:
        expected, got = base.parts[part].state_dict(), model.parts[part].state_dict()
        assert got.keys() == expected.keys(), part
        assert all(torch.equal(got[k], expected[k] + 0.5) for k in got if not k.startswith(("lm_head.", *VISION))), part
    if tiny == "flux2-dev":  # the prompt encodes as from the whole model's weights (+0.5) would
        whole = family.load(folder, offline=True)
        whole.text_encoder.load_state_dict({k: v + 0.5 for k, v in base.text_encoder.state_dict().items()})
        assert torch.equal(model.encode_text(["a red fox"])["encoder_hidden_states"], whole.encode_text(["a red fox"])["encoder_hidden_states"])


def test_a_pruned_mistral_reads_as_the_whole_models_layers_it_holds(tmp_path):
    """ComfyUI's pruned Mistral for Flux.2 dev holds the first 30 of 40 layers, all that dev's
    encoding reads (hidden states 10, 20 and 30): it loads as 30 layers whose hidden state 30 is
    the whole model's (not through the final norm). A file with fewer layers than that is refused."""
    from ot_gradio.models.text_encoder_file import load_text_encoder
    from ot_gradio.models.tiny.flux2 import tiny_mistral3_encoder, tiny_mistral_tokenizer

    tokenizer = tiny_mistral_tokenizer()
    whole = tiny_mistral3_encoder(tokenizer, layers=32).eval()
    whole.save_pretrained(tmp_path / "base" / "text_encoder")
    weights = comfy_layout(whole)
    pruned = {k: v for k, v in weights.items() if not any(f"layers.{i}." in k for i in (30, 31))}
    save_file(pruned, tmp_path / "pruned.safetensors")
    hub = {"local_files_only": True}
    model = load_text_encoder(tmp_path / "pruned.safetensors", "Mistral3ForConditionalGeneration", tmp_path / "base", "text_encoder",
                              hub, torch.float32, layers_read=30)
    assert model.config.text_config.num_hidden_layers == 30
    whole.load_state_dict({k: v + 0.5 for k, v in whole.state_dict().items()})
    ids = torch.tensor([tokenizer("a red fox")["input_ids"]])
    with torch.no_grad():
        expected = whole(input_ids=ids, output_hidden_states=True).hidden_states
        got = model(input_ids=ids, output_hidden_states=True).hidden_states
    assert len(got) == 31 and all(torch.allclose(got[i], expected[i], atol=1e-6) for i in (10, 20, 30))
    assert not torch.allclose(expected[30], whole.model.language_model.norm(expected[30]))  # the norm would show
    short = {k: v for k, v in weights.items() if not any(f"layers.{i}." in k for i in range(20, 32))}
    save_file(short, tmp_path / "short.safetensors")
    with pytest.raises(ModelLoadError, match=r"text_encoder.model_name: short.safetensors holds 20 of the 32 layers .* reads its first 30"):
        load_text_encoder(tmp_path / "short.safetensors", "Mistral3ForConditionalGeneration", tmp_path / "base", "text_encoder",
                          hub, torch.float32, layers_read=30)
    with pytest.raises(ModelLoadError, match=r"pruned.safetensors is not the Mistral3ForConditionalGeneration .* not in it"):
        load_text_encoder(tmp_path / "pruned.safetensors", "Mistral3ForConditionalGeneration", tmp_path / "base", "text_encoder",
                          hub, torch.float32)  # a family that reads every layer wants them all


def test_a_text_encoder_folder_in_transformers_layout_loads(tmp_path):
    """A local folder of the encoder as transformers saves it (kijai's llava-llama-3-8b-text-encoder-tokenizer
    for HunyuanVideo, sharded): its .safetensors files together, read with the base model's config."""
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny

    family = get_family("HUNYUAN_VIDEO")
    folder = str(resolve_tiny("tiny:hunyuan_video").diffusers_dir)
    base = family.load(folder, offline=True)
    changed = {k: v + 0.5 for k, v in base.text_encoder.state_dict().items()}
    base.text_encoder.load_state_dict(changed)
    base.text_encoder.save_pretrained(tmp_path / "llava-llama-3", max_shard_size="50KB")
    assert len(list((tmp_path / "llava-llama-3").glob("*.safetensors"))) > 1  # sharded
    model = family.load(folder, offline=True, part_models={"text_encoder": str(tmp_path / "llava-llama-3")})
    assert all(torch.equal(v, changed[k]) for k, v in model.text_encoder.state_dict().items())
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="text_encoder.model_name: the folder empty holds no .safetensors weights"):
        family.load(folder, offline=True, part_models={"text_encoder": str(tmp_path / "empty")})
