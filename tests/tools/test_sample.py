"""The sampling tool on a tiny SD 1.5 saved in real layouts: sizes, seeds, a LoRA and an
embedding written by our own writers, a run's last backup written by the real backup writer,
Cancel, errors, the worker process and the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from ot_gradio.tools.jobs import Job, JobError, run_inline

PROMPT = {"prompt": "a red circle", "width": 64, "height": 64, "steps": 2, "cfg_scale": 7.0, "seed": 1}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from ot_gradio.models.tiny.sd15 import save_tiny_sd15

    return save_tiny_sd15(tmp_path_factory.mktemp("tiny-sd15"))


@pytest.fixture(scope="module")
def base_image(tiny, tmp_path_factory):
    """PROMPT with the plain base model, the image every LoRA/embedding/run is compared with."""
    return _pixels(_sample(tmp_path_factory.mktemp("base"), tiny, [PROMPT])["paths"][0])


def _sample(tmp_path, tiny, prompts, name="out", **params):
    params = {"base_model": str(tiny.diffusers_dir), "device": "cpu", "output_dir": str(tmp_path / name),
              "prompts": prompts, **params}
    return run_inline("sample", params)


def _pixels(path) -> np.ndarray:
    return np.asarray(Image.open(path)).astype(int)


def _load(tiny):
    from ot_gradio.models.sd15 import StableDiffusion15

    return StableDiffusion15.load(str(tiny.diffusers_dir))


def _randomize(tensors, seed=0):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in tensors:
            t.copy_(torch.randn(t.shape, generator=gen) * 0.5)


def test_sizes_seeds_and_png_metadata(tmp_path, tiny):
    prompts = [PROMPT, PROMPT, {**PROMPT, "seed": 2}, {**PROMPT, "width": 48, "height": 32, "sampler": "EULER_A"}]
    result = _sample(tmp_path, tiny, prompts)
    paths = result["paths"]
    assert len(paths) == 4 and all(p.endswith(".png") for p in paths)
    assert [Image.open(p).size for p in paths] == [(64, 64), (64, 64), (64, 64), (48, 32)]
    first, again, other = (_pixels(p) for p in paths[:3])
    assert np.array_equal(first, again)  # same seed, same image
    assert np.abs(first - other).max() > 0  # another seed, another image
    text = Image.open(paths[0]).text
    assert text["prompt"] == "a red circle" and json.loads(text["seed"]) == 1
    assert "Seed: 1" in text["parameters"] and "Sampler: DDIM" in text["parameters"]
    assert Image.open(paths[3]).text["sampler"] == "EULER_A"


def test_single_file_gives_the_same_image_as_the_folder(tmp_path, tiny):
    folder = _sample(tmp_path, tiny, [PROMPT], "a")["paths"][0]
    single = _sample(tmp_path, tiny, [PROMPT], "b", base_model=str(tiny.single_file), config_dir=str(tiny.diffusers_dir))["paths"][0]
    # the same weights; the single file's layout (conv-shaped attention projections) may round the
    # last bit differently on some CPUs (seen: 1/255 on one pixel channel)
    assert np.abs(_pixels(folder) - _pixels(single)).max() <= 1


def test_lora_changes_the_image_and_weight_zero_is_the_base(tmp_path, tiny, base_image):
    from ot_gradio.training.lora import add_lora, lora_layers
    from ot_gradio.training.lora_format import save_lora

    model = _load(tiny)
    add_lora(model.unet, kind="unet", rank=4, alpha=4, dropout=0.0, layer_preset="attn-mlp")
    add_lora(model.text_encoder, kind="text_encoder", rank=4, alpha=4, dropout=0.0, layer_preset="full")
    _randomize([layer.lora_B["default"].weight for m in (model.unet, model.text_encoder) for layer in lora_layers(m).values()])
    kohya = save_lora(tmp_path / "kohya.safetensors", unet=model.unet, text_encoder=model.text_encoder, lora_format="kohya")
    peft = save_lora(tmp_path / "peft.safetensors", unet=model.unet, text_encoder=model.text_encoder, lora_format="diffusers")

    base = base_image
    with_kohya = _pixels(_sample(tmp_path, tiny, [PROMPT], "k", lora=str(kohya))["paths"][0])
    with_peft = _pixels(_sample(tmp_path, tiny, [PROMPT], "p", lora=str(peft), lora_weight=1.0)["paths"][0])
    off = _pixels(_sample(tmp_path, tiny, [PROMPT], "off", lora=str(kohya), lora_weight=0)["paths"][0])
    assert np.abs(with_kohya - base).max() > 10
    assert np.abs(with_kohya - with_peft).max() <= 1  # both formats read to the same layers
    assert np.array_equal(off, base)

    # the same file shared on Civitai: its address downloads it (with the workspace's key) and samples the same
    from ot_gradio.models import civitai_download
    from ot_gradio.secrets import write_secrets
    from tests.fake_civitai import FakeCivitai, Version

    write_secrets(tmp_path / "ws", civitai_token="civitai-key")
    with pytest.MonkeyPatch.context() as mp, FakeCivitai([Version(55, 5, {"style.safetensors": kohya}, model_type="LORA")],
                                                         key="civitai-key") as civitai:
        mp.setenv("CIVITAI_ENDPOINT", civitai.url)
        mp.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
        shared = _sample(tmp_path, tiny, [PROMPT], "c", lora="https://civitai.com/models/5?modelVersionId=55", offline=False,
                         workspace=str(tmp_path / "ws"), cache_dir=str(tmp_path / "hf"))
        civitai_download.use_token(None)
    assert np.array_equal(_pixels(shared["paths"][0]), with_kohya)
    assert (tmp_path / "hf" / "civitai" / "55" / "style.safetensors").read_bytes() == kohya.read_bytes()


def test_oft_file_changes_the_image_at_weight_one_only(tmp_path, tiny, base_image):
    """An OFT v2 file (Scaled OFT, blocks of 8 that conv_in's 36 inputs turn into 9) is rebuilt from
    its entries alone; it rotates the weights, so a weight other than 1 is refused, naming the field."""
    from ot_gradio.training.lora import add_lora, lora_layers
    from ot_gradio.training.lora_format import save_lora
    from ot_gradio.training.lora_variants import AdapterSpec

    model = _load(tiny)
    spec = AdapterSpec(peft_type="OFT_2", oft_block_size=8, oft_scaled=True)
    add_lora(model.unet, kind="unet", rank=1, alpha=1.0, dropout=0.0, layer_preset="full", spec=spec)
    _randomize([layer.oft_R["default"].weight for layer in lora_layers(model.unet).values()])
    path = save_lora(tmp_path / "oft.safetensors", unet=model.unet)
    assert np.abs(_pixels(_sample(tmp_path, tiny, [PROMPT], "o", lora=str(path))["paths"][0]) - base_image).max() > 10
    with pytest.raises(JobError, match="^lora_weight: .*OFT v2"):
        _sample(tmp_path, tiny, [PROMPT], "half", lora=str(path), lora_weight=0.5)


def _applies_as_trained(model, path, tiny):
    """The LoRA file applied by the Sample tool to a fresh model: its UNet computes what `model`'s did."""
    from ot_gradio.tools.sample import apply_lora

    fresh = _load(tiny)
    assert apply_lora(fresh, str(path), 1.0)[0] > 0
    g = torch.Generator().manual_seed(0)
    latents, hidden = torch.randn(1, 4, 8, 8, generator=g), torch.randn(1, 77, 32, generator=g)
    with torch.no_grad():
        ours, theirs = (m.unet(latents, torch.tensor([500]), encoder_hidden_states=hidden).sample for m in (model, fresh))
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)


def test_lokr_dora_full_matrix_file_is_put_back_as_trained(tmp_path, tiny):
    """A LoKr file with OneTrainer's switches (DoRA's dora_scale, whole w2) is rebuilt from its
    entries: the sampled UNet computes what the trained one did."""
    from ot_gradio.training.lora import add_lora, lora_state_dict
    from ot_gradio.training.lora_format import save_lora
    from ot_gradio.training.lora_variants import AdapterSpec

    model = _load(tiny)
    spec = AdapterSpec(peft_type="LOKR", lokr_decompose=True, lokr_dora_output=False, lokr_full_matrix=True)
    add_lora(model.unet, kind="unet", rank=1, alpha=1.0, dropout=0.0, layer_preset="full", spec=spec)
    _randomize([t for k, t in lora_state_dict(model.unet).items() if ".lokr_" in k])
    path = save_lora(tmp_path / "lokr.safetensors", unet=model.unet)
    _applies_as_trained(model, path, tiny)


def test_lokr_file_with_a_whole_w2_beside_products_is_put_back_as_trained(tmp_path, tiny):
    """LyCORIS stores w2 whole where the rank is large for the layer, products elsewhere: one layer's
    w2 multiplied out in the file (the same delta) is built whole, and the sampled UNet computes what
    the trained one did (peft built a product there and the file's w2 did not fit)."""
    from safetensors.torch import load_file, save_file

    from ot_gradio.training.lora import add_lora, lora_state_dict
    from ot_gradio.training.lora_format import save_lora
    from ot_gradio.training.lora_variants import AdapterSpec

    model = _load(tiny)
    add_lora(model.unet, kind="unet", rank=1, alpha=1.0, dropout=0.0, layer_preset="full", spec=AdapterSpec(peft_type="LOKR"))
    _randomize([t for k, t in lora_state_dict(model.unet).items() if ".lokr_" in k])
    path = save_lora(tmp_path / "lokr.safetensors", unet=model.unet)
    tensors = load_file(path)
    layer = next(k.removesuffix(".lokr_w2_a") for k in sorted(tensors) if k.endswith("to_q.lokr_w2_a"))  # a Linear
    tensors[f"{layer}.lokr_w2"] = tensors.pop(f"{layer}.lokr_w2_a") @ tensors.pop(f"{layer}.lokr_w2_b")
    tensors.pop(f"{layer}.alpha", None)  # LyCORIS scales a layer with no product by 1
    save_file(tensors, path)
    _applies_as_trained(model, path, tiny)


def test_lora_that_matches_nothing_and_missing_files_are_named(tmp_path, tiny):
    foreign = tmp_path / "foreign.safetensors"
    save_file({"lora_unet_no_such_block_proj.lora_down.weight": torch.ones(4, 8),
               "lora_unet_no_such_block_proj.lora_up.weight": torch.ones(8, 4),
               "lora_unet_no_such_block_proj.alpha": torch.tensor(4.0)}, str(foreign))
    with pytest.raises(JobError, match="matches no layer"):
        _sample(tmp_path, tiny, [PROMPT], lora=str(foreign))
    with pytest.raises(JobError, match="lora: .*missing.safetensors' does not exist"):
        _sample(tmp_path, tiny, [PROMPT], lora=str(tmp_path / "missing.safetensors"))
    with pytest.raises(JobError, match="base_model: .*no-model"):
        _sample(tmp_path, tiny, [PROMPT], base_model=str(tmp_path / "no-model"))
    with pytest.raises(JobError, match="run: .*nowhere"):
        _sample(tmp_path, tiny, [PROMPT], run="nowhere", workspace=str(tmp_path / "ws"))
    with pytest.raises(JobError, match="sampler"):
        _sample(tmp_path, tiny, [{**PROMPT, "sampler": "MAGIC"}])


def test_embedding_changes_the_image_through_its_token(tmp_path, tiny):
    from ot_gradio.config.parts import EmbeddingConfig
    from ot_gradio.training.embeddings import Embeddings

    model = _load(tiny)
    embeddings = Embeddings(model, "cpu")
    item = embeddings.add(EmbeddingConfig(placeholder="<zz>", token_count=2, initial_embedding_text="dog"),
                          field="embedding", train=True, train_parts={"text_encoder"})
    _randomize(item.vectors.values(), seed=3)
    path = embeddings.save(item, tmp_path / "zz.safetensors", torch.float32)
    prompt = {**PROMPT, "prompt": "a photo of <zz>"}

    plain = _pixels(_sample(tmp_path, tiny, [prompt], "plain")["paths"][0])
    used = _pixels(_sample(tmp_path, tiny, [prompt], "emb", embedding=str(path), embedding_token="<zz>")["paths"][0])
    default_token = _pixels(_sample(tmp_path, tiny, [prompt], "emb2", embedding=str(path))["paths"][0])
    assert np.abs(used - plain).max() > 10
    assert np.array_equal(used, default_token)  # the placeholder it was trained with is the default trigger

    # the same file shared on Civitai as a Textual Inversion: its address downloads it once and samples the same
    from ot_gradio.models import civitai_download
    from tests.fake_civitai import FakeCivitai, Version

    with pytest.MonkeyPatch.context() as mp, FakeCivitai([Version(66, 6, {"zz.safetensors": path}, model_type="TextualInversion")],
                                                         key="civitai-key") as civitai:
        mp.setenv("CIVITAI_ENDPOINT", civitai.url)
        mp.setenv("CIVITAI_TOKEN", "civitai-key")
        mp.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
        shared = _sample(tmp_path, tiny, [prompt], "c", embedding="https://civitai.com/models/6?modelVersionId=66", offline=False,
                         cache_dir=str(tmp_path / "hf"))
        civitai_download.use_token(None)
    assert np.array_equal(_pixels(shared["paths"][0]), used)


def _make_run(tmp_path, tiny):
    """A run folder whose last backup holds a LoRA with random non-zero weights (the real
    backup writer), and the same LoRA saved as a file by the method's own save."""
    from ot_gradio.config.io import config_to_dict, load_config
    from ot_gradio.runner.rundir import create_run
    from ot_gradio.training.backup import Counters, write_backup
    from ot_gradio.training.methods import get_method

    cfg = load_config({"model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "base_model_name": str(tiny.diffusers_dir),
                       "lora_rank": 4, "lora_alpha": 2, "text_encoder": {"train": True}, "unet": {"train": True},
                       "output_model_format": "KOHYA_LORA"}).config
    model = _load(tiny)
    method = get_method(cfg.training_method)
    groups = method.setup(model, cfg, torch.device("cpu"))
    with torch.no_grad():
        gen = torch.Generator().manual_seed(5)
        for g in groups:
            for p in g.params:
                p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    run = create_run(tmp_path / "ws", config_to_dict(cfg))
    write_backup(run.backup, method.trainable_state(model), {}, config_to_dict(cfg), Counters(global_step=7))
    lora = method.save(model, cfg, tmp_path / "run-lora.safetensors", {"ss_steps": "7"})
    return run, lora


def test_run_samples_its_last_backup(tmp_path, tiny, base_image):
    run, lora = _make_run(tmp_path, tiny)
    base = base_image
    result = _sample(tmp_path, tiny, [PROMPT], "run", run=run.run_id, workspace=str(tmp_path / "ws"), base_model="")
    assert result["run_info"]["global_step"] == 7
    from_run = _pixels(result["paths"][0])
    from_file = _pixels(_sample(tmp_path, tiny, [PROMPT], "file", lora=str(lora))["paths"][0])
    assert np.abs(from_run - base).max() > 10
    assert np.abs(from_run - from_file).max() <= 1  # the backup is the LoRA the run would save


def test_cancel_after_the_first_image_keeps_it(tmp_path, tiny):
    seen = []
    job = Job(on_progress=lambda done, total, message: seen.append(done), is_cancelled=lambda: max(seen, default=0) >= 1)
    params = {"base_model": str(tiny.diffusers_dir), "device": "cpu", "output_dir": str(tmp_path / "c"), "prompts": [PROMPT] * 3}
    result = run_inline("sample", params, job)
    assert len(result["paths"]) == 1 and sorted(p.name for p in (tmp_path / "c").glob("*.png")) == [result["paths"][0].split("/")[-1]]
    assert result["cancelled"] and any("cancelled after 1 of 3" in m for m in job.messages)


def test_default_output_folder_is_in_the_workspace(tmp_path, tiny):
    result = run_inline("sample", {"base_model": str(tiny.diffusers_dir), "device": "cpu", "workspace": str(tmp_path / "ws"),
                                   "prompts": [{**PROMPT, "prompt": "a blue square"}]})
    assert result["output_dir"].startswith(str(tmp_path / "ws" / "tool-samples"))


@pytest.mark.slow  # a fresh process imports torch and diffusers
def test_worker_process_runs_the_job(tmp_path, tiny):
    from ot_gradio.runner.jobs import JobSupervisor

    jobs = JobSupervisor(tmp_path)
    job = jobs.start("sample", {"base_model": str(tiny.diffusers_dir), "device": "cpu", "output_dir": str(tmp_path / "w"),
                                "prompts": [PROMPT, {**PROMPT, "seed": 9}]})
    assert jobs.wait(job, timeout=240) == 0, job.log_tail()
    state = jobs.state(job)
    assert state.status == "done", (state.message, job.log_tail())
    assert state.done == state.total == 2
    assert [Image.open(p).size for p in state.result["paths"]] == [(64, 64), (64, 64)]


def test_command_line(tmp_path, tiny, capsys):
    from ot_gradio.cli import main

    code = main(["sample", "--base-model", str(tiny.diffusers_dir), "--prompt", "a red circle", "--prompt", "a blue square",
                 "--width", "64", "--height", "48", "--steps", "2", "--seed", "3", "--device", "cpu",
                 "--output-dir", str(tmp_path / "cli")])
    assert code == 0
    paths = capsys.readouterr().out.split()
    assert len(paths) == 2 and all(Image.open(p).size == (64, 48) for p in paths)
    assert main(["sample", "--base-model", str(tmp_path / "nothing"), "--prompt", "x", "--device", "cpu"]) == 2
    assert "base_model" in capsys.readouterr().err


def test_form_checks_fields_and_lists_runs_with_a_backup(tmp_path, tiny):
    import gradio as gr

    from ot_gradio.runner.jobs import JobSupervisor
    from ot_gradio.runner.rundir import create_run
    from ot_gradio.ui.tools_sample import SampleTool, runs_with_backup
    from ot_gradio.ui.tools_tab import ToolInputError, ToolsContext

    workspace = tmp_path / "ws"
    no_backup = create_run(workspace, {"model_type": "STABLE_DIFFUSION_15"})
    backed = create_run(workspace, {"model_type": "STABLE_DIFFUSION_15"})
    (backed.backup / "20260101-000000-step3").mkdir(parents=True)
    (backed.backup / "20260101-000000-step3" / "COMPLETE").write_text("{}")
    assert [path for _, path in runs_with_backup(workspace)] == [str(backed.path)]
    assert str(no_backup.path) not in str(runs_with_backup(workspace))

    config = {"model_type": "STABLE_DIFFUSION_15", "base_model_name": str(tiny.diffusers_dir)}
    with gr.Blocks():
        state = gr.State(config)
        tool = SampleTool(ToolsContext(workspace, JobSupervisor(workspace), state, lambda c: [tmp_path, tiny.diffusers_dir.parent], config=config))
    values = {state: config, tool.model_type: "STABLE_DIFFUSION_15", tool.base_model: str(tiny.diffusers_dir), tool.lora: "",
              tool.lora_weight: 0.5, tool.embedding: "", tool.token: "", tool.run: "", tool.prompts: "a cat\n\n a dog ",
              tool.negative: "blurry", tool.control: "", tool.width: 64, tool.height: 64, tool.steps: 2, tool.cfg: 7, tool.seed: 5, tool.sampler: "EULER"}
    params = tool.params(values)
    assert [p["prompt"] for p in params["prompts"]] == ["a cat", "a dog"] and params["prompts"][0]["sampler"] == "EULER"
    assert params["base_model"] == str(tiny.diffusers_dir) and "lora" not in params
    assert tool.params({**values, tool.base_model: "some-org/some-model"})["base_model"] == "some-org/some-model"
    with pytest.raises(ToolInputError, match="Base model"):
        tool.params({**values, tool.base_model: "/etc/passwd"})
    with pytest.raises(ToolInputError, match="LoRA file"):
        tool.params({**values, tool.lora: str(tmp_path / "missing.safetensors")})
    for address in ("https://civitai.com/models/5?modelVersionId=55", "https://huggingface.co/a/b/blob/main/style.safetensors"):
        assert tool.params({**values, tool.lora: address})["lora"] == address  # downloaded by the job
    with pytest.raises(ToolInputError, match="LoRA file"):
        tool.params({**values, tool.lora: "https://example.com/style.safetensors"})
    for address in ("https://civitai.com/models/6?modelVersionId=66", "https://huggingface.co/a/b/blob/main/ti.pt"):
        assert tool.params({**values, tool.embedding: address})["embedding"] == address  # downloaded by the job
    with pytest.raises(ToolInputError, match="Embedding file"):
        tool.params({**values, tool.embedding: "https://example.com/ti.pt"})
    with pytest.raises(ToolInputError, match="Width"):
        tool.params({**values, tool.width: 5})
    with pytest.raises(ToolInputError, match="Prompts"):
        tool.params({**values, tool.prompts: "  \n"})
    assert tool.params({**values, tool.run: str(backed.path), tool.base_model: ""})["run"] == str(backed.path)
    with pytest.raises(ToolInputError, match="Run"):
        tool.params({**values, tool.run: str(no_backup.path)})
    assert tool.on_generate({**values, tool.prompts: ""})[2].startswith("**not started** Prompts")
    # the control image: a file inside the page's folders, for the model types that read one only
    (tmp_path / "start.png").write_bytes(b"png")
    with pytest.raises(ToolInputError, match="Control image: STABLE_DIFFUSION_15 samples from a prompt alone"):
        tool.params({**values, tool.control: str(tmp_path / "start.png")})
    for model_type in ("WAN_2_2_I2V_A14B", "WAN_2_2_TI2V_5B", "LTX_2"):  # TI2V 5B and LTX-2: image-to-video when given one
        i2v = tool.params({**values, tool.model_type: model_type, tool.control: str(tmp_path / "start.png")})
        assert all(p["control_image"] == str(tmp_path / "start.png") for p in i2v["prompts"])
    with pytest.raises(ToolInputError, match="Control image"):
        tool.params({**values, tool.model_type: "QWEN_IMAGE_EDIT", tool.control: "/etc/passwd"})
    gallery, = tool.render_result({"images": [{"path": "/x/a.png", "prompt": "a cat", "seed": 5}]})
    assert gallery == [("/x/a.png", "a cat (seed 5)")]


# ---------------------------------------------------------------- Flux.1 (dev and Fill), Chroma, SD 3 and PixArt-Σ

NEW_FAMILIES = {  # model type -> its tiny builder (module, function)
    "FLUX_DEV_1": ("ot_gradio.models.tiny.flux", "save_tiny_flux"),
    "CHROMA_1": ("ot_gradio.models.tiny.chroma", "save_tiny_chroma"),
    "STABLE_DIFFUSION_3": ("ot_gradio.models.tiny.sd3", "save_tiny_sd3"),
    "PIXART_SIGMA": ("ot_gradio.models.tiny.pixart_sigma", "save_tiny_pixart_sigma"),
}


@pytest.mark.parametrize("model_type", NEW_FAMILIES)
def test_new_families_sample_a_lora_a_run_and_an_embedding(model_type, tmp_path):
    """Flux.1, Chroma, SD 3 and PixArt-Σ: a kohya LoRA file and the run's backup it was saved
    from draw the same image, unlike the base model; an embedding in every text encoder changes
    the image through its token."""
    import importlib

    from ot_gradio.config.io import config_to_dict, load_config
    from ot_gradio.config.parts import EmbeddingConfig
    from ot_gradio.models.registry import get_family
    from ot_gradio.runner.rundir import create_run
    from ot_gradio.training.backup import Counters, write_backup
    from ot_gradio.training.embeddings import Embeddings
    from ot_gradio.training.methods import get_method

    module, builder = NEW_FAMILIES[model_type]
    base = str(getattr(importlib.import_module(module), builder)(tmp_path / "tiny").diffusers_dir)
    family = get_family(model_type)
    # a run samples with its config's T5 window, a base model with the pipeline's (512): the same here
    window = {"text_encoder_2_sequence_length": 512} if model_type == "FLUX_DEV_1" else {}
    cfg = load_config({"model_type": model_type, "training_method": "LORA", "base_model_name": base, "lora_rank": 4, "lora_alpha": 4,
                       "output_model_format": "KOHYA_LORA", **window}).config
    model, method = family.load(base), get_method(cfg.training_method)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in (p for g in method.setup(model, cfg, torch.device("cpu")) for p in g.params):
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    run = create_run(tmp_path / "ws", config_to_dict(cfg))
    write_backup(run.backup, method.trainable_state(model), {}, config_to_dict(cfg), Counters(global_step=3))
    lora = method.save(model, cfg, tmp_path / "lora.safetensors", {})

    model = family.load(base)
    embeddings = Embeddings(model, "cpu")
    item = embeddings.add(EmbeddingConfig(placeholder="<zz>", token_count=2, initial_embedding_text="dog"), field="embedding", train=True,
                          train_parts=set(model.text_encoder_names))
    assert set(item.vectors) == set(model.text_encoder_names)
    _randomize(item.vectors.values(), seed=3)
    embedding = embeddings.save(item, tmp_path / "zz.safetensors", torch.float32)

    prompt = {**PROMPT, "prompt": "a photo of <zz>", "cfg_scale": 3.5}
    params = {"model_type": model_type, "base_model": base}

    def draw(name, **extra):
        return _pixels(run_inline("sample", {"device": "cpu", "output_dir": str(tmp_path / name), "prompts": [prompt], **params,
                                             **extra})["paths"][0])

    plain = draw("plain")
    from_file = draw("file", lora=str(lora))
    from_run = draw("run", run=str(run.path), base_model="")
    assert np.abs(from_file - plain).max() > 2
    assert np.abs(from_run - from_file).max() <= 1  # the backup is the LoRA the run saves
    assert np.abs(draw("emb", embedding=str(embedding)) - plain).max() > 0  # the tiny PixArt-Σ's T5 moves it by ~2/255


# ---------------------------------------------------------------- the families with language-model text encoders

LLM_FAMILIES = {"Z_IMAGE": "tiny:z-image", "FLUX_2": "tiny:flux2-klein", "SANA": "tiny:sana", "QWEN": "tiny:qwen-image",
                "ANIMA": "tiny:anima"}


@pytest.mark.parametrize("model_type", LLM_FAMILIES)
def test_llm_encoder_families_sample_a_lora_file_and_a_run(model_type, tmp_path):
    """Z-Image, Flux.2 Klein, Sana, Qwen-Image and Anima in the sample tool: a kohya LoRA file and the
    run's backup it was saved from draw the same image, unlike the base model."""
    from ot_gradio.config.io import config_to_dict, load_config
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny
    from ot_gradio.runner.rundir import create_run
    from ot_gradio.training.backup import Counters, write_backup
    from ot_gradio.training.methods import get_method

    base = str(resolve_tiny(LLM_FAMILIES[model_type]).diffusers_dir)
    cfg = load_config({"model_type": model_type, "training_method": "LORA", "base_model_name": base, "lora_rank": 4, "lora_alpha": 4,
                       "output_model_format": "KOHYA_LORA", "layer_filter_preset": "full",
                       "text_encoder": {"train": False}}).config
    model, method = get_family(model_type).load(base), get_method(cfg.training_method)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in (p for g in method.setup(model, cfg, torch.device("cpu")) for p in g.params):
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    run = create_run(tmp_path / "ws", config_to_dict(cfg))
    write_backup(run.backup, method.trainable_state(model), {}, config_to_dict(cfg), Counters(global_step=3))
    lora = method.save(model, cfg, tmp_path / "lora.safetensors", {})
    params = {"model_type": model_type, "base_model": base}

    def draw(name, **extra):
        return _pixels(run_inline("sample", {"device": "cpu", "output_dir": str(tmp_path / name), "prompts": [PROMPT], **params,
                                             **extra})["paths"][0])

    plain = draw("plain")
    from_file = draw("file", lora=str(lora))
    assert np.abs(from_file - plain).max() > 2
    assert np.abs(draw("run", run=str(run.path), base_model="") - from_file).max() <= 1  # the backup is the LoRA the run saves


@pytest.mark.parametrize(("model_type", "tiny"), [("WAN_2_1", "wan"), ("WAN_2_2_I2V_A14B", "wan22-i2v-a14b")])
def test_a_video_family_samples_a_short_mp4(tmp_path, model_type, tiny):
    """Wan 2.1 in the sample tool: a clip of 5 frames (the tool's default) written as an .mp4; Wan 2.2
    I2V's starts from the control image given."""
    from ot_gradio.data.video import FrameSampling, probe_clip
    from ot_gradio.models.tiny import resolve_tiny

    base = str(resolve_tiny(f"tiny:{tiny}").diffusers_dir)
    start = {}
    if model_type == "WAN_2_2_I2V_A14B":
        Image.new("RGB", (80, 48), (240, 200, 40)).save(tmp_path / "start.png")
        start = {"control_image": str(tmp_path / "start.png")}
    [path] = run_inline("sample", {"model_type": model_type, "base_model": base, "device": "cpu", "output_dir": str(tmp_path / "out"),
                                   "prompts": [{**PROMPT, "cfg_scale": 2.0, **start}]})["paths"]
    assert path.endswith("-seed1.mp4")
    info = probe_clip(path, FrameSampling(frames=100, step=1, fps=1000.0))
    assert (info.width, info.height, info.available) == (64, 64, 5)


def test_the_workspace_token_reaches_the_base_model_load(tmp_path, monkeypatch):
    """A gated base model (Flux.1-dev) sampled from the Tools tab: the token the page keeps in the
    workspace's secrets.json is handed to the loader (it was not: only training read it)."""
    from ot_gradio.secrets import write_secrets
    from ot_gradio.tools import sample

    write_secrets(tmp_path, huggingface_token="hf_SAMPLETOKEN")
    seen = {}

    def load(model_type, base_model, device, dtype, extra=None, move=True):
        seen.update(extra or {})
        raise JobError("stop here")

    monkeypatch.setattr(sample, "load_base", load)
    with pytest.raises(JobError, match="stop here"):
        sample.run_job({"workspace": str(tmp_path), "base_model": "someone/gated", "prompts": [{"prompt": "a"}], "device": "cpu"},
                       Job())
    assert seen["token"] == "hf_SAMPLETOKEN"


def test_a_base_model_that_downloads_says_how_much_has_arrived(tmp_path, monkeypatch):
    """Tools → Sample with a base model not yet in the hub cache: the job's progress reports the
    download while the model loads (models/download_watch.py), as a training run's status does."""
    import time

    from ot_gradio.models import download_watch
    from ot_gradio.tools import sample

    monkeypatch.setattr(download_watch, "EVERY_S", 0.05)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)

    def downloading(model_type, base, device, dtype, extra):
        (tmp_path / "hf" / "blob.incomplete").write_bytes(b"x" * 2 * 1024 * 1024)
        time.sleep(0.5)
        raise JobError("stopped here: the test loads no model")

    monkeypatch.setattr(sample, "load_base", downloading)
    (tmp_path / "hf").mkdir()
    said = []
    with pytest.raises(JobError, match="stopped here"):
        run_inline("sample", {"base_model": "someone/model", "device": "cpu", "cache_dir": str(tmp_path / "hf"), "prompts": ["x"],
                              "output_dir": str(tmp_path / "out")}, Job(on_progress=lambda done, total, message: said.append(message)))
    assert any(m.startswith("loading someone/model: 2.0 MB downloaded, ") for m in said), said


def test_a_runs_output_file_fills_in_the_form(tmp_path):
    """A run's saved LoRA, embedding or fine-tuned model is one pick away, with its model type and
    base model; a file its events name outside the workspace (not its output path) is not offered."""
    import gradio as gr

    from ot_gradio.runner.jobs import JobSupervisor
    from ot_gradio.runner.rundir import EventWriter, create_run
    from ot_gradio.ui.tools_sample import NO_RUN, SampleTool, trained_choices, trained_fields
    from ot_gradio.ui.tools_tab import ToolsContext

    workspace = tmp_path / "ws"
    outside = tmp_path / "elsewhere" / "secret.safetensors"
    outside.parent.mkdir()
    outside.write_bytes(b"x")
    runs = {}
    for name, method, output in (("lora", "LORA", workspace / "models" / "ohwx.safetensors"),
                                 ("ti", "EMBEDDING", workspace / "models" / "ohwx-ti.safetensors"),
                                 ("full", "FINE_TUNE", workspace / "models" / "full.safetensors"),
                                 ("tampered", "LORA", outside), ("unsaved", "LORA", workspace / "models" / "none.safetensors")):
        config = {"model_type": "STABLE_DIFFUSION_XL_10_BASE", "training_method": method, "base_model_name": "org/base",
                  "output_model_destination": str(workspace / "models" / f"{name}-configured.safetensors")}
        run = runs[name] = create_run(workspace, config, prefix=name)
        if name != "unsaved":
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_bytes(b"x")
            EventWriter(run).emit("saved", path=str(output), kind="model")
    offered = {path for _, path in trained_choices(workspace)}
    assert offered == {NO_RUN, *(str(runs[n].path) for n in ("lora", "ti", "full"))}
    assert trained_fields(workspace, str(runs["lora"].path)) == {
        "model_type": "STABLE_DIFFUSION_XL_10_BASE", "base_model": "org/base", "lora": str((workspace / "models" / "ohwx.safetensors").resolve()),
        "embedding": ""}
    assert trained_fields(workspace, str(runs["ti"].path))["embedding"].endswith("ohwx-ti.safetensors")
    assert trained_fields(workspace, str(runs["full"].path))["base_model"].endswith("full.safetensors")
    assert trained_fields(workspace, str(runs["tampered"].path)) is None and trained_fields(workspace, "/etc") is None

    with gr.Blocks():
        state = gr.State({})
        tool = SampleTool(ToolsContext(workspace, JobSupervisor(workspace), state, lambda c: [workspace], config={}))
    model_type, base, lora, embedding, run = tool.on_trained(str(runs["lora"].path))
    assert (model_type["value"], base, embedding, run) == ("STABLE_DIFFUSION_XL_10_BASE", "org/base", "", NO_RUN)
    assert lora.endswith("ohwx.safetensors")
