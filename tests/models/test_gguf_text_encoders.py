"""Text encoders from `.gguf` files as llama.cpp writes them (models/gguf_text_encoder.py): its
names, its Q8_0 / Q4_0 blocks, and for its `llama` architecture the query and key rows it
reorders. Each tiny family's encoder is written that way here, from transformers' names, and must
load back to its weights (within the quantization's rounding) and encode as they do."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from ot_gradio.models.common import ModelLoadError

# transformers' name (after the `model.` a causal LM's file has) -> llama.cpp's, as its converter writes them
T5_NAMES = [(r"^shared\.", "token_embd."), (r"^encoder\.final_layer_norm\.", "enc.output_norm."),
            (r"^encoder\.block\.(\d+)\.layer\.0\.SelfAttention\.relative_attention_bias\.", r"enc.blk.\1.attn_rel_b."),
            (r"^encoder\.block\.(\d+)\.layer\.0\.SelfAttention\.([qkvo])\.", r"enc.blk.\1.attn_\2."),
            (r"^encoder\.block\.(\d+)\.layer\.0\.layer_norm\.", r"enc.blk.\1.attn_norm."),
            (r"^encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.wi_0\.", r"enc.blk.\1.ffn_gate."),
            (r"^encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.wi_1\.", r"enc.blk.\1.ffn_up."),
            (r"^encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.wo\.", r"enc.blk.\1.ffn_down."),
            (r"^encoder\.block\.(\d+)\.layer\.1\.layer_norm\.", r"enc.blk.\1.ffn_norm.")]
DECODER_NAMES = [(r"^model\.embed_tokens\.", "token_embd."), (r"^model\.norm\.", "output_norm."), (r"^lm_head\.", "output."),
                 (r"^model\.layers\.(\d+)\.input_layernorm\.", r"blk.\1.attn_norm."),
                 (r"^model\.layers\.(\d+)\.post_attention_layernorm\.", r"blk.\1.ffn_norm."),
                 (r"^model\.layers\.(\d+)\.self_attn\.([qk])_norm\.", r"blk.\1.attn_\2_norm."),
                 (r"^model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.", r"blk.\1.attn_\2."),
                 (r"^model\.layers\.(\d+)\.self_attn\.o_proj\.", r"blk.\1.attn_output."),
                 (r"^model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.", r"blk.\1.ffn_\2.")]
ARCHS = {"T5EncoderModel": "t5encoder", "UMT5EncoderModel": "t5encoder", "Qwen3Model": "qwen3", "LlamaModel": "llama",
         "Qwen2_5_VLForConditionalGeneration": "qwen2vl", "Mistral3ForConditionalGeneration": "llama"}


def llama_cpp_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter for its `llama` architecture: each head's rows, the two rotary halves interleaved."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def gguf_names(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The encoder's weights (+0.5) under llama.cpp's names: the language model alone (no vision
    tower, as its .gguf files of Qwen2.5-VL and Mistral hold), no tied copy of an embedding."""
    kind = type(module).__name__
    tied = set(getattr(module, "all_tied_weights_keys", None) or ())
    table = T5_NAMES if "T5" in kind else DECODER_NAMES
    out = {}
    for key, value in module.state_dict().items():
        if key in tied or "vision_tower" in key or "multi_modal_projector" in key or "visual" in key or key.startswith("lm_head."):
            continue
        name = ("model." + key if kind in ("Qwen3Model", "LlamaModel") else key).replace("model.language_model.", "model.", 1)
        for pattern, repl in table:
            name, hits = re.subn(pattern, repl, name)
            if hits:
                break
        else:
            raise AssertionError(f"no llama.cpp name for {key}")
        out[name] = (value + 0.5).contiguous()
    return out


def write_gguf(module: torch.nn.Module, path, quant: str = "Q8_0", arch: str | None = None) -> None:
    """`quant`: the 2-D weights' type (BF16: the 1-D ones too); `arch`: another name llama.cpp
    writes for the same layout (`mistral3` for Mistral-Small-3 since March 2026)."""
    import gguf

    kind = type(module).__name__
    arch = arch or ARCHS[kind]
    config = getattr(module.config, "text_config", None) or module.config
    writer = gguf.GGUFWriter(str(path), arch)
    heads = kv = None
    if arch in ("llama", "mistral3"):
        heads, kv = config.num_attention_heads, config.num_key_value_heads
        writer.add_uint32(f"{arch}.attention.head_count", heads)
        writer.add_uint32(f"{arch}.attention.head_count_kv", kv)
        writer.add_tensor("rope_freqs.weight", np.ones(4, dtype=np.float32))  # Llama 3.1's: no weight of the encoder
    if arch == "t5":  # a whole T5's file: its decoder and output layer, which no encoder reads
        writer.add_tensor("dec.blk.0.attn_q.weight", np.ones((32, 32), dtype=np.float32))
        writer.add_tensor("output.weight", np.ones((32, 32), dtype=np.float32))
    qtype = getattr(gguf.GGMLQuantizationType, quant)
    for name, value in gguf_names(module).items():
        data = value.float().numpy()
        if heads and re.search(r"\.attn_q\.", name):
            data = llama_cpp_permute(data, heads)
        elif heads and re.search(r"\.attn_k\.", name):
            data = llama_cpp_permute(data, kv)
        if quant == "BF16":
            writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        elif data.ndim == 2 and data.shape[-1] % 32 == 0:
            writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        elif data.ndim == 2:
            writer.add_tensor(name, data.astype(np.float16))
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("model_type, tiny, part, quant, arch", [
    ("FLUX_DEV_1", "flux", "text_encoder_2", "Q8_0", None), ("WAN_2_1", "wan", "text_encoder", "Q8_0", "t5"),
    ("Z_IMAGE", "z-image", "text_encoder", "BF16", None), ("QWEN", "qwen-image", "text_encoder", "Q8_0", None),
    ("HUNYUAN_VIDEO", "hunyuan_video", "text_encoder", "Q8_0", None), ("FLUX_2", "flux2-dev", "text_encoder", "Q8_0", None),
    ("FLUX_2", "flux2-dev", "text_encoder", "Q8_0", "mistral3")])
def test_a_gguf_text_encoder_loads_back_to_its_weights_and_encodes_as_they_do(model_type, tiny, part, quant, arch, tmp_path):
    """Flux's T5 (`t5encoder`) and Wan's UMT5 (`t5`, a whole model's file with its decoder), Z-Image's Qwen3 (BF16, norms too), Qwen-Image's
    Qwen2.5-VL (its language model), HunyuanVideo's Llama and Flux.2 dev's Mistral (`llama`, and
    `mistral3` as newer files say: rows reordered)."""
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny

    family = get_family(model_type)
    folder = str(resolve_tiny(f"tiny:{tiny}").diffusers_dir)
    base = family.load(folder, offline=True)
    write_gguf(base.parts[part], tmp_path / "encoder-Q8_0.gguf", quant, arch)
    model = family.load(folder, offline=True, part_models={part: str(tmp_path / "encoder-Q8_0.gguf")})
    expected, got = base.parts[part].state_dict(), model.parts[part].state_dict()
    assert got.keys() == expected.keys()
    language = [k for k in got if not any(s in k for s in ("vision_tower", "multi_modal_projector", "visual", "lm_head"))]
    worst = max((got[k].float() - (expected[k].float() + 0.5)).abs().max().item() for k in language)
    assert worst < 0.02, worst  # Q8_0's rounding; a row order or name read wrong is off by far more
    whole = family.load(folder, offline=True)
    whole.parts[part].load_state_dict({k: v + 0.5 for k, v in base.parts[part].state_dict().items()})
    encoded, reference = model.encode_text(["a red fox"]), whole.encode_text(["a red fox"])
    key = next(k for k, v in reference.items() if isinstance(v, torch.Tensor) and v.is_floating_point())
    assert torch.allclose(encoded[key], reference[key], atol=0.05, rtol=0.05), (encoded[key] - reference[key]).abs().max()


def write_mmproj(encoder: torch.nn.Module, path, projector: str = "qwen2.5vl_merger") -> None:
    """The vision tower of a Qwen2.5-VL (+0.5) as llama.cpp's converter writes its mmproj file: gguf's
    own name table, each fused query / key / value split in three, the patch convolution's two
    frames as two tensors, float16."""
    import gguf

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, 64)
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_string("clip.projector_type", projector)
    for key, value in encoder.state_dict().items():
        if not key.startswith("model.visual."):
            continue
        name = key.removeprefix("model.")
        module, leaf = name.rsplit(".", 1)
        data = (value + 0.5).float().numpy()
        if module.endswith(".attn.qkv"):
            for part, rows in zip("qkv", np.split(data, 3, axis=0), strict=True):
                writer.add_tensor(f"{names.get_name(module[:-3] + part)}.{leaf}", rows.astype(np.float16))
        elif module.endswith("patch_embed.proj"):
            writer.add_tensor(f"{names.get_name(module)}.{leaf}", data[:, :, 0].astype(np.float16))
            writer.add_tensor(f"{names.get_name(module)}.{leaf}.1", data[:, :, 1].astype(np.float16))
        else:
            writer.add_tensor(f"{names.get_name(module)}.{leaf}", data.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_qwen_image_edit_reads_a_gguf_with_its_mmproj_beside_it(tmp_path):
    """Qwen-Image-Edit's Qwen2.5-VL from llama.cpp's two files, as ComfyUI-GGUF reads them: the
    language model's and, beside it, the vision tower's mmproj named after it (another mmproj in
    the folder is not taken); every weight back, the vision tower's query / key / value and patch
    frames in their places."""
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny

    edit = get_family("QWEN_IMAGE_EDIT")
    folder = str(resolve_tiny("tiny:qwen-image-edit").diffusers_dir)
    base = edit.load(folder, offline=True).text_encoder
    write_gguf(base, tmp_path / "Qwen2.5-VL-7B-Instruct-Q8_0.gguf")
    write_mmproj(base, tmp_path / "Qwen2.5-VL-7B-Instruct-mmproj-F16.gguf")
    write_mmproj(base, tmp_path / "Qwen2-VL-2B-mmproj-F16.gguf", projector="gemma3")  # someone else's: not read
    got = edit.load(folder, offline=True, part_models={"text_encoder": str(tmp_path / "Qwen2.5-VL-7B-Instruct-Q8_0.gguf")}).text_encoder
    expected, loaded = base.state_dict(), got.state_dict()
    vision = [k for k in expected if k.startswith("model.visual.")]
    assert vision and loaded.keys() == expected.keys()
    worst = max((loaded[k].float() - (expected[k].float() + 0.5)).abs().max().item() for k in vision)
    assert worst < 0.01, worst  # float16's rounding; a q/k/v or frame order read wrong is off by far more

    (tmp_path / "Qwen2.5-VL-7B-Instruct-mmproj-F16.gguf").unlink()  # only the other model's left: it is named
    with pytest.raises(ModelLoadError, match=r"Qwen2-VL-2B-mmproj-F16.gguf is not the vision tower of a Qwen2.5-VL \(its projector is gemma3\)"):
        edit.load(folder, offline=True, part_models={"text_encoder": str(tmp_path / "Qwen2.5-VL-7B-Instruct-Q8_0.gguf")})


def test_gguf_text_encoders_refused_by_name(tmp_path):
    """Qwen-Image-Edit's encoder reads the control image, and a .gguf of Qwen2.5-VL holds no vision
    tower: without its mmproj beside it, refused, as are an architecture not read here (Sana's Gemma 2) and a T5 file given for
    a Llama."""
    import gguf

    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny

    edit = get_family("QWEN_IMAGE_EDIT")
    folder = str(resolve_tiny("tiny:qwen-image-edit").diffusers_dir)
    write_gguf(edit.load(folder, offline=True).text_encoder, tmp_path / "qwen25vl.gguf")
    with pytest.raises(ModelLoadError, match=r"text_encoder.model_name: qwen25vl.gguf holds the language model alone \(no vision tower\) "
                                             r"and no mmproj file is beside it \(put its vision tower's .gguf, e.g. qwen25vl-mmproj-BF16.gguf"):
        edit.load(folder, offline=True, part_models={"text_encoder": str(tmp_path / "qwen25vl.gguf")})

    writer = gguf.GGUFWriter(str(tmp_path / "gemma.gguf"), "gemma2")
    writer.add_tensor("token_embd.weight", np.zeros((8, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    sana = get_family("SANA")
    sana_folder = str(resolve_tiny("tiny:sana").diffusers_dir)
    with pytest.raises(ModelLoadError, match=r"text_encoder.model_name: gemma.gguf is not read as a text encoder: its architecture "
                                             r"is gemma2; the .gguf text encoders read here are llama, mistral3, qwen2, qwen2vl, qwen3, t5"):
        sana.load(sana_folder, offline=True, part_models={"text_encoder": str(tmp_path / "gemma.gguf")})

    flux = get_family("FLUX_DEV_1")
    flux_folder = str(resolve_tiny("tiny:flux").diffusers_dir)
    write_gguf(flux.load(flux_folder, offline=True).text_encoder_2, tmp_path / "t5.gguf")
    hv = get_family("HUNYUAN_VIDEO")
    with pytest.raises(ModelLoadError, match=r"t5.gguf is not the LlamaModel this model's text_encoder is"):
        hv.load(str(resolve_tiny("tiny:hunyuan_video").diffusers_dir), offline=True, part_models={"text_encoder": str(tmp_path / "t5.gguf")})
