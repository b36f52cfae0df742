"""Embedding files as the other tools read them: SD 1.x/2.x's `emp_params` (OneTrainer's key),
the `t5xxl` copy ComfyUI's T5 tokenizers look up, and HiDream's Llama in an output embedding
(zeros, as OneTrainer)."""

import importlib

import pytest
import torch
from safetensors.torch import load_file, save_file

from ot_gradio.config.parts import EmbeddingConfig
from ot_gradio.training.embedding_method import EmbeddingMethod
from ot_gradio.training.embeddings import Embeddings
from tests.training.test_embeddings import CPU, config, tiny_model, train_steps

TINY = {"flux": ("flux", "FluxDev1"), "sd3": ("sd3", "StableDiffusion3"), "hidream": ("hidream", "HiDream"),
        "chroma": ("chroma", "Chroma1"), "pixart": ("pixart", "PixArtAlpha")}


def load_tiny(name):
    module, cls = TINY[name]
    return getattr(importlib.import_module(f"ot_gradio.models.{module}"), cls).load(f"tiny:{name}", offline=True)


def onetrainer_reads(state, key):
    """OneTrainer's Base*Setup._setup_embeddings: `state.get("<key>_out", state.get("<key>"))`."""
    return state.get(f"{key}_out", state.get(key))


def comfy_reads(embed, embed_key):
    """ComfyUI's sd1_clip.load_embed for a .safetensors: the tokenizer's embedding_key, else the
    file's first tensor (ComfyUI then ignores a tensor of the wrong width)."""
    return embed[embed_key] if embed_key in embed else next(iter(embed.values()))


def add(model, **settings):
    embeddings = Embeddings(model, CPU)
    embedding = embeddings.add(EmbeddingConfig(placeholder="<e>", **settings), field="embedding", train=True,
                               train_parts=frozenset(model.text_encoder_names))
    return embeddings, embedding


# --- SD 1.x/2.x: emp_params ---------------------------------------------------------------------


def test_sd_file_holds_onetrainers_key_and_loads_in_diffusers(tmp_path):
    from diffusers.loaders import TextualInversionLoaderMixin

    model = tiny_model()
    method = EmbeddingMethod()
    cfg = config(embedding={"token_count": 2, "placeholder": "<me>"})
    train_steps(model, cfg, method, steps=1, captions=("<me>",))
    saved = load_file(str(method.save(model, cfg, tmp_path / "me.safetensors", {})))
    assert list(saved) == ["emp_params"]  # one tensor, under the key OneTrainer writes and reads
    assert torch.equal(onetrainer_reads(saved, "emp_params"), method.main.vectors["text_encoder"].detach())

    class Pipe(TextualInversionLoaderMixin):  # diffusers' loader on the plain tokenizer and text encoder
        hf_device_map, components = None, {}

    plain = tiny_model()
    pipe = Pipe()
    pipe.tokenizer, pipe.text_encoder = plain.tokenizer, plain.text_encoder
    pipe.load_textual_inversion(str(tmp_path / "me.safetensors"), token="<x>")
    ids = plain.tokenizer.convert_tokens_to_ids(["<x>", "<x>_1"])
    assert torch.equal(plain.text_encoder.get_input_embeddings().weight[ids].detach(), saved["emp_params"])


def test_sd_files_of_earlier_versions_still_continue(tmp_path):
    vectors = torch.randn(2, tiny_model().text_encoder.config.hidden_size)
    save_file({"emb_params": vectors}, str(tmp_path / "old.safetensors"))  # what this trainer wrote before
    _, embedding = add(tiny_model(), model_name=str(tmp_path / "old.safetensors"))
    assert torch.equal(embedding.vectors["text_encoder"].detach(), vectors)


def test_sd_bundle_and_output_keys_stay():
    from ot_gradio.training.embeddings import bundle_key, bundle_output_key, output_key

    for key in ("emp_params", "emb_params"):
        assert bundle_key("t", key) == "bundle_emb.t.string_to_param.*"
        assert output_key(key) == "emp_params_out" and bundle_output_key("t", key) == "bundle_emb.t.clip_l_out"


# --- the t5xxl copy for ComfyUI ----------------------------------------------------------------


@pytest.mark.parametrize("tiny", ["flux", "sd3", "hidream"])
def test_t5_vectors_are_also_under_comfyuis_key(tiny, tiny_dir, tmp_path):
    model = load_tiny(tiny)
    embeddings, embedding = add(model, token_count=2)
    path = embeddings.save(embedding, tmp_path / "e.safetensors", torch.float32)
    saved = load_file(str(path))
    keys = dict(embeddings.keys)
    t5_part = next(p for p, k in keys.items() if k == "t5")
    assert set(saved) == {*keys.values(), "t5xxl"} and torch.equal(saved["t5xxl"], saved["t5"])
    # ComfyUI: each tokenizer finds its own vectors (the T5 one under t5xxl, no longer the first tensor)
    comfy = {"t5": "t5xxl", "clip_l": "clip_l", "clip_g": "clip_g", "llama": "llama"}
    for part, key in keys.items():
        assert torch.equal(comfy_reads(saved, comfy[key]), embedding.vectors[part].detach()), key
        assert torch.equal(onetrainer_reads(saved, key), embedding.vectors[part].detach()), key  # OneTrainer too
    # a LoRA bundle keeps OneTrainer's keys only (ComfyUI's LoRA loader skips bundle_emb.*)
    assert not any(k.endswith("t5xxl") for k in embeddings.bundle_tensors([embedding], torch.float32))

    # read back here: the same vectors, the duplicate neither read as another encoder's nor refused
    again = type(model).load(f"tiny:{tiny}", offline=True)
    _, read = add(again, model_name=str(path))
    assert all(torch.equal(read.vectors[p].detach(), embedding.vectors[p].detach()) for p in keys)
    # a file made for ComfyUI, its T5 vectors only under t5xxl, reads too
    save_file({k: v for k, v in saved.items() if k != "t5"}, str(tmp_path / "comfy.safetensors"))
    _, comfy_file = add(type(model).load(f"tiny:{tiny}", offline=True), model_name=str(tmp_path / "comfy.safetensors"))
    assert torch.equal(comfy_file.vectors[t5_part].detach(), embedding.vectors[t5_part].detach())


def test_single_t5_files_stay_single_and_t5xxl_is_read(tiny_dir, tmp_path):
    chroma = load_tiny("chroma")
    embeddings, embedding = add(chroma, token_count=2)
    assert set(embeddings.file_tensors(embedding, torch.float32)) == {"t5"}  # ComfyUI takes a lone tensor as is
    width = chroma.text_encoder.get_input_embeddings().embedding_dim
    vectors = torch.randn(2, width)
    save_file({"t5xxl": vectors}, str(tmp_path / "comfy.safetensors"))
    _, read = add(load_tiny("chroma"), model_name=str(tmp_path / "comfy.safetensors"))
    assert torch.equal(read.vectors["text_encoder"].detach(), vectors)
    flux = load_tiny("flux")  # a Flux file's T5 vectors (clip_l, t5, t5xxl) into a T5-only family
    flux_embeddings, flux_embedding = add(flux, token_count=2)
    path = flux_embeddings.save(flux_embedding, tmp_path / "flux.safetensors", torch.float32)
    _, from_flux = add(load_tiny("chroma"), model_name=str(path))
    assert torch.equal(from_flux.vectors["text_encoder"].detach(), flux_embedding.vectors["text_encoder_2"].detach())


# --- HiDream's Llama in an output embedding ------------------------------------------------------


def test_hidream_output_embedding_gives_llama_zeros_as_onetrainer(tiny_dir, tmp_path):
    model = load_tiny("hidream")
    embeddings, embedding = add(model, token_count=2, initial_embedding_text="a", is_output_embedding=True)
    llama = embedding.vectors["text_encoder_4"]
    assert set(embedding.outputs) == {"text_encoder_3"}  # OneTrainer applies no Llama output vectors either
    assert torch.count_nonzero(llama) == 0 and not llama.requires_grad
    assert torch.count_nonzero(embedding.initial["text_encoder_4"]) == 0
    for part in ("text_encoder", "text_encoder_2"):  # the CLIPs: the initial text's vectors
        assert torch.count_nonzero(embedding.vectors[part]) > 0
    saved = embeddings.file_tensors(embedding, torch.float32)
    assert set(saved) == {"clip_l", "clip_g", "t5_out", "llama"} and torch.count_nonzero(saved["llama"]) == 0

    # a file with the initial text's Llama vectors (as this trainer wrote them before) continues
    # with zeros too, as OneTrainer continues it (an output embedding's input vectors are zeros)
    save_file({**saved, "llama": torch.randn(saved["llama"].shape)}, str(tmp_path / "older.safetensors"))
    _, read = add(load_tiny("hidream"), model_name=str(tmp_path / "older.safetensors"))
    assert torch.count_nonzero(read.vectors["text_encoder_4"]) == 0
    assert torch.equal(read.outputs["text_encoder_3"].detach(), saved["t5_out"])
