"""Automatic masks: the real ClipSeg (transformers) and u2net (onnxruntime) code paths on tiny
random models saved locally, by colour on synthetic images, every mode's arithmetic, preview,
cancel, the worker subprocess and the command line."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from ot_gradio.cli import main as cli_main
from ot_gradio.data.images import mask_path_for
from ot_gradio.data.scan import list_image_files
from ot_gradio.runner.jobs import JobSupervisor
from ot_gradio.tools import automask
from ot_gradio.tools.automask import U2NET_FILE, combine, postprocess
from ot_gradio.tools.jobs import Job, JobError, run_inline

RED = (255, 0, 0)


def red_square(path, size=(64, 48), box=(10, 8, 30, 28), stray=None):
    image = Image.new("RGB", size, (255, 255, 255))
    image.paste(RED, box)
    if stray is not None:
        image.putpixel(stray, RED)
    image.save(path)
    return path


def read_mask(image_path) -> np.ndarray:
    with Image.open(mask_path_for(image_path)) as mask:
        assert mask.mode == "L"
        return np.asarray(mask)


def colour_params(folder, **extra):
    return {"folder": str(folder), "model": "colour", "colour": "#ff0000", "threshold": 0.3, "smoothing": 0,
            "expansion": 0, "mode": "replace", **extra}


@pytest.fixture(scope="session")
def clipseg_dir(tmp_path_factory):
    import torch
    from transformers import CLIPSegConfig, CLIPSegForImageSegmentation, CLIPSegProcessor, ViTImageProcessor

    from ot_gradio.models.tiny.sd15 import tiny_clip_tokenizer

    tokenizer = tiny_clip_tokenizer()
    vocab = len(tokenizer)
    config = CLIPSegConfig(
        text_config=dict(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                         max_position_embeddings=77, bos_token_id=vocab - 2, eos_token_id=vocab - 1, pad_token_id=vocab - 1),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8),
        projection_dim=16, extract_layers=[0, 1], reduce_dim=8, decoder_num_attention_heads=2, decoder_intermediate_size=16,
    )
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("clipseg")
    CLIPSegForImageSegmentation(config).save_pretrained(folder)
    image_processor = ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
    CLIPSegProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(folder)
    return folder


@pytest.fixture
def u2net_home(tmp_path, monkeypatch):
    """A u2net-shaped ONNX model (1x1 conv on the green channel, sigmoid) in a temp U2NET_HOME."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.array([0.0, 1.0, 0.0], dtype=np.float32).reshape(1, 3, 1, 1), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input.1", "w"], ["logits"]), helper.make_node("Sigmoid", ["logits"], ["d0"])],
        "u2net_tiny",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, 320, 320])],
        [helper.make_tensor_value_info("d0", TensorProto.FLOAT, [1, 1, 320, 320])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    home = tmp_path / "u2net"
    home.mkdir()
    onnx.save(model, str(home / U2NET_FILE))
    monkeypatch.setenv("U2NET_HOME", str(home))
    return home


def test_clipseg_writes_binary_masks_at_each_image_size(tmp_path, clipseg_dir):
    data = tmp_path / "data"
    data.mkdir()
    red_square(data / "wide.png", size=(70, 40))
    Image.new("RGB", (33, 57), (10, 200, 30)).save(data / "tall.jpg")
    result = run_inline("automask", {"folder": str(data), "model": "clipseg", "model_path": str(clipseg_dir),
                                     "prompt": "a red square, a cat", "threshold": 0.3, "smoothing": 1, "expansion": 1,
                                     "mode": "replace", "device": "cpu"})
    assert result["written"] == 2 and result["failed"] == []
    for name, size in (("wide.png", (70, 40)), ("tall.jpg", (33, 57))):
        mask = read_mask(data / name)
        assert mask.shape == (size[1], size[0])
        assert set(np.unique(mask)) <= {0, 255}


def test_clipseg_prompts_take_the_max(clipseg_dir):
    masker = automask.load_clipseg(str(clipseg_dir), "cpu")
    image = Image.new("RGB", (32, 32), (120, 30, 200))  # the tiny model's output size: no resize
    one, two = masker.predict(image, "cat"), masker.predict(image, "dog")
    both = masker.predict(image, "cat, dog")
    assert both.shape == (32, 32)
    np.testing.assert_allclose(both, np.maximum(one, two), atol=1e-5)
    assert not np.allclose(one, two)  # the prompt reaches the model


def test_rembg_human_runs_the_onnx_model_from_u2net_home(tmp_path, u2net_home):
    data = tmp_path / "data"
    data.mkdir()
    red_square(data / "a.png", size=(80, 60), box=(0, 0, 40, 60))  # left half red (no green), right half white
    result = run_inline("automask", {"folder": str(data), "model": "rembg_human", "threshold": 0.5, "smoothing": 0,
                                     "expansion": 0, "mode": "replace"})
    assert result["written"] == 1
    mask = read_mask(data / "a.png")
    assert mask.shape == (60, 80)
    assert (mask[:, :36] == 0).all() and (mask[:, 44:] == 255).all()
    blue = automask.load_rembg_human("", "cpu").predict(Image.new("RGB", (20, 10), (0, 0, 255)), "")
    assert blue.shape == (10, 20) and float(blue.max()) == 0.0  # min-max of a flat map is zero


def test_missing_models_name_what_to_download_and_where(tmp_path, monkeypatch):
    red_square(tmp_path / "a.png")
    monkeypatch.setenv("U2NET_HOME", str(tmp_path / "empty-home"))
    with pytest.raises(JobError, match=rf"{U2NET_FILE}.*github.com/danielgatis/rembg.*empty-home"):
        run_inline("automask", {"folder": str(tmp_path), "model": "rembg_human", "mode": "replace"})
    with pytest.raises(JobError, match="CIDAS/clipseg-rd64-refined"):
        run_inline("automask", {"folder": str(tmp_path), "model": "clipseg", "prompt": "person", "mode": "replace"})
    with pytest.raises(JobError, match="Model path: .*not a ClipSeg folder"):
        run_inline("automask", {"folder": str(tmp_path), "model": "clipseg", "prompt": "x", "model_path": str(tmp_path)})
    with pytest.raises(JobError, match="Prompt:"):
        run_inline("automask", {"folder": str(tmp_path), "model": "clipseg", "prompt": " , "})
    assert not mask_path_for(tmp_path / "a.png").exists()


def test_colour_threshold_keeps_exactly_the_square(tmp_path):
    red_square(tmp_path / "a.png", box=(10, 8, 30, 28))
    run_inline("automask", colour_params(tmp_path))
    expected = np.zeros((48, 64), dtype=np.uint8)
    expected[8:28, 10:30] = 255
    np.testing.assert_array_equal(read_mask(tmp_path / "a.png"), expected)


def test_colour_expansion_grows_by_n_pixels_and_smoothing_drops_specks(tmp_path):
    red_square(tmp_path / "a.png", box=(10, 8, 30, 28), stray=(50, 40))
    run_inline("automask", colour_params(tmp_path, expansion=3))
    expected = np.zeros((48, 64), dtype=np.uint8)
    expected[5:31, 7:33] = 255
    expected[37:44, 47:54] = 255  # the stray pixel grows too
    np.testing.assert_array_equal(read_mask(tmp_path / "a.png"), expected)

    run_inline("automask", colour_params(tmp_path, smoothing=2))
    mask = read_mask(tmp_path / "a.png")
    assert mask[40, 50] == 0 and mask[18, 20] == 255  # speck gone, square kept
    assert mask[8, 10] == 0  # the corner is rounded off by the blur


def test_postprocess_threshold_is_strict_and_expansion_is_square():
    score = np.zeros((9, 9), dtype=np.float32)
    score[4, 4] = 0.5
    assert postprocess(score, 0.5).sum() == 0
    grown = postprocess(score, 0.4, expand=2)
    assert grown.sum() == 25 and grown[2:7, 2:7].all()


OLD = np.array([[0.0, 1.0], [0.0, 1.0]], dtype=np.float32)
NEW = np.array([[0.0, 0.0], [1.0, 1.0]], dtype=np.float32)


@pytest.mark.parametrize(("mode", "alpha", "expected"), [
    ("replace", 1.0, [[0, 0], [1, 1]]),
    ("replace", 0.5, [[0, 0], [0.5, 0.5]]),
    ("fill", 1.0, [[0, 0], [1, 1]]),
    ("add", 1.0, [[0, 1], [1, 1]]),
    ("add", 0.5, [[0, 1], [0.5, 1]]),
    ("subtract", 1.0, [[0, 1], [0, 0]]),
    ("subtract", 0.5, [[0, 1], [0, 0.5]]),
    ("blend", 1.0, [[0, 0.5], [0.5, 1]]),
    ("blend", 0.25, [[0, 0.8], [0.2, 1]]),
])
def test_combine_modes(mode, alpha, expected):
    np.testing.assert_allclose(combine(OLD.copy(), NEW, mode, alpha), expected, atol=1e-6)


def test_combine_without_an_existing_mask():
    np.testing.assert_allclose(combine(None, NEW, "add", 0.5), [[0, 0], [0.5, 0.5]])
    np.testing.assert_allclose(combine(None, NEW, "subtract", 1.0), [[1, 1], [0, 0]])  # missing mask = all trained
    np.testing.assert_allclose(combine(None, NEW, "blend", 1.0), [[0, 0], [1, 1]])


@pytest.mark.parametrize(("mode", "left", "right"), [
    ("replace", 0, 255), ("fill", 255, 0), ("add", 255, 255), ("subtract", 255, 0), ("blend", 128, 128),
])
def test_modes_against_an_existing_mask_on_disk(tmp_path, mode, left, right):
    image = Image.new("RGB", (20, 10), (255, 255, 255))
    image.paste(RED, (10, 0, 20, 10))  # right half red
    image.save(tmp_path / "a.png")
    old = np.zeros((10, 20), dtype=np.uint8)
    old[:, :10] = 255  # left half masked in
    Image.fromarray(old, "L").save(mask_path_for(tmp_path / "a.png"))
    result = run_inline("automask", colour_params(tmp_path, mode=mode))
    mask = read_mask(tmp_path / "a.png")
    assert (mask[:, :10] == left).all() and (mask[:, 10:] == right).all(), mask
    backup = tmp_path / "a-masklabel.png.bak"
    if mode == "fill":
        assert result["skipped"] == 1 and not backup.exists()
    else:
        np.testing.assert_array_equal(np.asarray(Image.open(backup)), old)
        assert [p.name for p in list_image_files(tmp_path, True)] == ["a.png"]  # neither mask nor backup is an image


def test_preview_writes_nothing_in_the_dataset(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for i in range(6):
        red_square(data / f"{i}.png")
    before = sorted(p.name for p in data.iterdir())
    items = automask.preview(colour_params(data))
    assert len(items) == 4 and items[0].mask.size == items[0].image.size == items[0].overlay.size
    result = run_inline("automask", {**colour_params(data), "preview": True, "preview_dir": str(tmp_path / "ws" / "prev")})
    assert len(result["preview"]) == 4 and all((tmp_path / "ws" / "prev").joinpath(p).is_file() for p in result["preview"])
    assert sorted(p.name for p in data.iterdir()) == before
    with pytest.raises(JobError, match="Preview folder: .*inside the dataset"):
        run_inline("automask", {**colour_params(data), "preview": True, "preview_dir": str(data / "prev")})


def test_cancel_keeps_finished_masks_and_bad_files_are_listed(tmp_path):
    for name in ("a.png", "b.png", "c.png"):
        red_square(tmp_path / name)
    (tmp_path / "b.png").write_bytes(b"not a png")
    seen = []
    job = Job(on_progress=lambda done, total, msg: seen.append(done), is_cancelled=lambda: len(seen) >= 2)
    result = run_inline("automask", colour_params(tmp_path), job)
    assert result["cancelled"] and result["written"] == 1 and result["failed"] == ["b.png"]
    assert mask_path_for(tmp_path / "a.png").exists() and not mask_path_for(tmp_path / "c.png").exists()


def test_job_runs_in_the_worker_process(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    red_square(data / "a.png")
    supervisor = JobSupervisor(tmp_path / "ws")
    job = supervisor.start("automask", colour_params(data))
    assert supervisor.wait(job, timeout=60) == 0
    state = supervisor.state(job)
    assert state.status == "done", (state.message, job.log_tail(20))
    assert state.result["written"] == 1 and read_mask(data / "a.png").max() == 255


def test_cli_mask_and_preview(tmp_path, capsys):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    red_square(data / "sub" / "a.png")
    code = cli_main(["mask", str(data), "--model", "colour", "--colour", "255,0,0", "--mode", "replace", "--subfolders",
                     "--smoothing", "0", "--expansion", "1", "--preview-dir", str(tmp_path / "prev")])
    assert code == 0 and not mask_path_for(data / "sub" / "a.png").exists()
    assert (tmp_path / "prev" / "00-a-overlay.png").is_file()
    assert cli_main(["mask", str(data), "--model", "colour", "--colour", "red", "--subfolders", "--expansion", "0"]) == 0
    assert read_mask(data / "sub" / "a.png").max() == 255
    assert cli_main(["mask", str(data), "--model", "colour", "--colour", "nope"]) == 2
    assert "Colour: 'nope'" in capsys.readouterr().err


def test_ui_refuses_bad_fields_and_previews_through_a_job(tmp_path):
    import gradio as gr

    from ot_gradio.ui.tools_automask import AutoMaskTool
    from ot_gradio.ui.tools_tab import ToolsContext

    data = tmp_path / "data"
    data.mkdir()
    red_square(data / "a.png")
    with gr.Blocks():
        ctx = ToolsContext(tmp_path / "ws", JobSupervisor(tmp_path / "ws"), gr.State({}), lambda config: [tmp_path])
        tool = AutoMaskTool(ctx)
    values = {tool.folder: str(data), tool.subfolders: False, tool.model: "colour", tool.model_path: "", tool.device: "cpu",
              tool.prompt: "", tool.colour: "#ff0000", tool.threshold: 0.3, tool.smoothing: 0, tool.expansion: 0,
              tool.alpha: 1.0, tool.mode: "replace", tool.invert: False, tool.download: False, ctx.config_state: {}}
    refused = tool.on_start({**values, tool.folder: "/etc"})
    assert refused[0] == "" and "Folder:" in refused[2]
    assert "Colour:" in tool.on_start({**values, tool.colour: "nope"})[2]
    assert "Model path:" in tool.on_start({**values, tool.model_path: "/etc/passwd"})[2]

    job_id = tool.on_preview(values)[0]
    job = ctx.jobs.get(job_id)
    assert ctx.jobs.wait(job, timeout=60) == 0
    gallery, message = tool.panel.poll(job_id)[4:]
    paths = [path for path, _ in gallery["value"]]
    assert len(paths) == 1 and paths[0].startswith(str(tmp_path / "ws")) and "nothing written" in message
    assert not mask_path_for(data / "a.png").exists()


def test_a_clip_is_masked_on_its_first_frame(tmp_path):
    from tests.video_clips import write_clip

    clip = write_clip(tmp_path / "walk.mp4", frames=5, size=(64, 48))  # frame 0: a yellow square at x 0-8, y 12-20
    run_inline("automask", colour_params(tmp_path, colour="#f0c828", threshold=0.25))
    mask = read_mask(clip) > 127
    assert mask.shape == (48, 64)
    assert mask[13:19, 1:7].mean() > 0.9 and mask[24:, 16:].mean() < 0.02
