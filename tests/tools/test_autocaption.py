"""Automatic captions with tiny random BLIP, BLIP-2 and WD14 models saved in the real layouts
(save_pretrained folders; model.onnx + selected_tags.csv), loaded by the real code."""

import csv
import string
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ot_gradio.runner.jobs import JobSupervisor
from ot_gradio.tools.captions import backup_file
from ot_gradio.tools.jobs import Job, JobError, run_inline

SIZE = 32  # the tiny tagger's input size, read back from the ONNX input shape
TAGS = [  # name, category, weight on (R - G), weight on (B - G), bias  (channel means / 255)
    ("general", "9", 0, 0, 1.0), ("sensitive", "9", 0, 0, 0.0),
    ("red_hair", "0", 10, 0, -2.0), ("blue_sky", "0", 0, 10, -2.0), ("solo", "0", 0, 0, 3.0), ("^_^", "0", 0, 0, 2.0),
    ("hatsune_miku", "4", 10, 0, -1.0), ("unsure_(character)", "4", 0, 0, 0.0),
]


def build_blip(root: Path) -> Path:
    import torch
    from transformers import BertTokenizer, BlipConfig, BlipForConditionalGeneration, BlipImageProcessor, BlipProcessor

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]", "a", "photo", "of", "cat", "dog", "red", "blue", "on", "the", "table"]
    tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True, bos_token="[DEC]")
    text = dict(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, encoder_hidden_size=16,
                bos_token_id=5, pad_token_id=0, sep_token_id=3, eos_token_id=3, max_position_embeddings=64)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=SIZE, patch_size=16)
    torch.manual_seed(0)
    model = BlipForConditionalGeneration(BlipConfig(vision_config=vision, text_config=text, projection_dim=16)).eval()
    with torch.no_grad():  # a random model may end at once; this one never says [SEP], so captions are never empty
        model.text_decoder.cls.predictions.bias[3] = -1e4
    folder = root / "blip"
    model.save_pretrained(folder)
    BlipProcessor(image_processor=BlipImageProcessor(size={"height": SIZE, "width": SIZE}), tokenizer=tokenizer).save_pretrained(folder)
    return folder


def build_blip2(root: Path) -> Path:
    import torch
    from transformers import Blip2Config, Blip2ForConditionalGeneration, Blip2Processor, BlipImageProcessor, GPT2Tokenizer

    vocab = ["<s>", "<pad>", "</s>", "<unk>", *string.ascii_letters, "Ġ", ",", "."]
    tokenizer = GPT2Tokenizer(vocab={w: i for i, w in enumerate(vocab)}, merges=[], unk_token="<unk>", bos_token="</s>", eos_token="</s>", pad_token="<pad>")
    processor = Blip2Processor(image_processor=BlipImageProcessor(size={"height": SIZE, "width": SIZE}), tokenizer=tokenizer, num_query_tokens=2)
    image_token = processor.tokenizer.convert_tokens_to_ids("<image>")
    config = Blip2Config(
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=SIZE, patch_size=16),
        qformer_config=dict(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, encoder_hidden_size=16,
                            max_position_embeddings=32),
        text_config=dict(model_type="opt", vocab_size=len(processor.tokenizer), hidden_size=16, ffn_dim=32, num_hidden_layers=1, num_attention_heads=2,
                         word_embed_proj_dim=16, max_position_embeddings=64, bos_token_id=2, eos_token_id=2, pad_token_id=1),
        num_query_tokens=2, image_token_index=image_token)
    torch.manual_seed(0)
    model = Blip2ForConditionalGeneration(config).eval()
    with torch.no_grad():  # tied embeddings: a constant pull away from </s> so the caption never ends at once
        lm = model.language_model.model.decoder
        away = torch.randn(16)
        lm.final_layer_norm.bias.copy_(3 * away)
        lm.embed_tokens.weight[2] = -away
    folder = root / "blip2"
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def build_wd14(root: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    weights = np.zeros((3, len(TAGS)), np.float32)  # rows: B, G, R (the tagger sees BGR)
    for j, (_, _, red, blue, _) in enumerate(TAGS):
        weights[2, j] += red / 255
        weights[1, j] -= (red + blue) / 255
        weights[0, j] += blue / 255
    bias = np.array([t[4] for t in TAGS], np.float32)
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["input_1"], ["mean"], axes=[1, 2], keepdims=0),
         helper.make_node("MatMul", ["mean", "w"], ["logits0"]),
         helper.make_node("Add", ["logits0", "b"], ["logits"]),
         helper.make_node("Sigmoid", ["logits"], ["predictions_sigmoid"])],
        "tiny_tagger",
        [helper.make_tensor_value_info("input_1", TensorProto.FLOAT, ["N", SIZE, SIZE, 3])],
        [helper.make_tensor_value_info("predictions_sigmoid", TensorProto.FLOAT, ["N", len(TAGS)])],
        [helper.make_tensor("w", TensorProto.FLOAT, weights.shape, weights.flatten()), helper.make_tensor("b", TensorProto.FLOAT, bias.shape, bias)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    folder = root / "wd14"
    folder.mkdir()
    onnx.save(model, folder / "model.onnx")
    with open(folder / "selected_tags.csv", "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["tag_id", "name", "category", "count"])
        for i, (name, category, *_rest) in enumerate(TAGS):
            writer.writerow([i, name, category, 100])
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Only the tagger (no torch): most tests need no more."""
    return {"wd14": build_wd14(tmp_path_factory.mktemp("wd14"))}


@pytest.fixture(scope="module")
def blip_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("blip")
    return {"blip": build_blip(root), "blip2": build_blip2(root)}


@pytest.fixture
def dataset(tmp_path):
    folder = tmp_path / "data"
    (folder / "sub").mkdir(parents=True)
    Image.new("RGB", (40, 30), (200, 10, 10)).save(folder / "a_red.png")
    Image.new("RGB", (30, 40), (10, 10, 200)).save(folder / "b_blue.jpg")
    Image.new("RGB", (36, 36), (120, 120, 120)).save(folder / "c_grey.png")
    Image.new("RGB", (36, 36), (200, 10, 10)).save(folder / "sub" / "d_inner.png")
    return folder


def params(folder, model, model_path, **extra):
    return {"folder": str(folder), "model": model, "model_path": str(model_path), "mode": "replace", "device": "cpu", "max_new_tokens": 4, **extra}


def caption(folder: Path, stem: str) -> str:
    return (folder / f"{stem}.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("model", ["blip", "blip2"])
def test_blip_models_continue_the_initial_caption(blip_models, dataset, model):
    models = blip_models
    result = run_inline("autocaption", params(dataset, model, models[model], initial_caption="A photo of", prefix="<p> ", postfix=" ,<q>"))
    assert (result["written"], result["skipped"], result["failed"], result["total"]) == (3, 0, 0, 3)
    for stem in ("a_red", "b_blue", "c_grey"):
        text = caption(dataset, stem)
        assert text.startswith("<p> A photo of") and text.endswith(" ,<q>"), text
        assert len(text) > len("<p> A photo of ,<q>"), "the model added nothing to the prompt"
    assert not (dataset / "sub" / "d_inner.txt").exists()
    plain = run_inline("autocaption", params(dataset, model, models[model], include_subfolders=True))
    assert plain["written"] == 4 and caption(dataset, "sub/d_inner").strip()


def test_wd14_tags_thresholds_and_order(models, dataset):
    result = run_inline("autocaption", params(dataset, "wd14", models["wd14"], initial_caption="my style"))
    assert result["written"] == 3
    assert caption(dataset, "a_red") == "my style, general, hatsune miku, red hair, solo, ^_^"
    assert caption(dataset, "b_blue") == "my style, general, blue sky, solo, ^_^"
    assert caption(dataset, "c_grey") == "my style, general, solo, ^_^"
    run_inline("autocaption", params(dataset, "wd14", models["wd14"], general_threshold=0.9, character_threshold=0.4))
    assert caption(dataset, "a_red") == "general, hatsune miku, unsure (character), red hair, solo"


def test_modes_and_backups(models, dataset):
    wd = models["wd14"]
    (dataset / "a_red.txt").write_text("old red caption\n", encoding="utf-8")
    (dataset / "c_grey.txt").write_text("   \n", encoding="utf-8")  # empty: counts as missing
    result = run_inline("autocaption", params(dataset, "wd14", wd, mode="missing"))
    assert (result["written"], result["skipped"]) == (2, 1)
    assert caption(dataset, "a_red") == "old red caption\n"
    assert caption(dataset, "b_blue").startswith("general, blue sky")

    result = run_inline("autocaption", params(dataset, "wd14", wd, mode="add", prefix="tagged: "))
    assert result["written"] == 3
    assert caption(dataset, "a_red").splitlines() == ["old red caption", "tagged: general, hatsune miku, red hair, solo, ^_^"]
    assert backup_file(dataset / "a_red.txt").read_text(encoding="utf-8") == "old red caption\n"

    result = run_inline("autocaption", params(dataset, "wd14", wd, mode="replace"))
    assert caption(dataset, "a_red") == "general, hatsune miku, red hair, solo, ^_^"
    assert backup_file(dataset / "a_red.txt").read_text(encoding="utf-8").splitlines()[0] == "old red caption"


def test_an_image_captioned_by_the_folders_index_is_not_missing_a_caption(models, dataset):
    """captions.json / metadata.jsonl captions are captions: "missing" leaves such an image be, and
    "add" keeps them in the .txt it writes (which then wins)."""
    (dataset / "metadata.jsonl").write_text('{"file_name": "a_red.png", "text": "a red square"}\n')
    result = run_inline("autocaption", params(dataset, "wd14", models["wd14"], mode="missing"))
    assert (result["written"], result["skipped"]) == (2, 1) and not (dataset / "a_red.txt").exists()
    run_inline("autocaption", params(dataset, "wd14", models["wd14"], mode="add"))
    assert caption(dataset, "a_red").splitlines()[0] == "a red square"


def test_cancel_after_the_first_image_keeps_it(models, dataset):
    job = Job(is_cancelled=lambda: (dataset / "a_red.txt").exists())  # Cancel pressed while the first image was captioned
    result = run_inline("autocaption", params(dataset, "wd14", models["wd14"]), job)
    assert result["cancelled"] and result["written"] == 1
    assert caption(dataset, "a_red").startswith("general")
    assert not (dataset / "b_blue.txt").exists() and not (dataset / "c_grey.txt").exists()


def test_unreadable_image_is_named_and_the_rest_go_on(models, dataset):
    (dataset / "broken.png").write_bytes(b"not a png")
    result = run_inline("autocaption", params(dataset, "wd14", models["wd14"]))
    assert (result["written"], result["failed"], result["failed_files"]) == (3, 1, ["broken.png"])
    assert "broken.png" in result["message"]


@pytest.mark.parametrize("model,label,default", [("blip", "BLIP", "Salesforce/blip-image-captioning-large"), ("blip2", "BLIP-2", "Salesforce/blip2-opt-2.7b"),
                                                 ("wd14", "WD14", "SmilingWolf/wd-v1-4-vit-tagger-v2"),
                                                 ("joycaption", "JoyCaption", "fancyfeast/llama-joycaption-beta-one-hf-llava"),
                                                 ("qwen-vl", "Qwen2.5-VL", "Qwen/Qwen2.5-VL-7B-Instruct")])
def test_missing_weights_name_what_to_download(dataset, tmp_path, monkeypatch, model, label, default):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(JobError) as err:
        run_inline("autocaption", params(dataset, model, tmp_path / "no-such-folder"))
    assert f"{label}:" in str(err.value) and "does not exist" in str(err.value) and f"hf download {default} " in str(err.value)
    with pytest.raises(JobError) as err:
        run_inline("autocaption", params(dataset, model, "nobody-here/no-such-model"))
    assert "hf download nobody-here/no-such-model" in str(err.value) and "Model path" in str(err.value)
    assert not list(dataset.glob("*.txt"))


def test_wd14_folder_without_the_tags_file(models, dataset, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "model.onnx").write_bytes((models["wd14"] / "model.onnx").read_bytes())
    with pytest.raises(JobError, match="selected_tags.csv"):
        run_inline("autocaption", params(dataset, "wd14", partial / "model.onnx"))
    assert run_inline("autocaption", params(dataset, "wd14", models["wd14"] / "model.onnx"))["written"] == 3  # the file itself


def test_blip_folder_that_is_not_a_blip_model(models, dataset):
    with pytest.raises(JobError, match=r"BLIP: could not load .*hf download Salesforce/blip-image-captioning-large"):
        run_inline("autocaption", params(dataset, "blip", models["wd14"]))


def test_bad_params_are_named(dataset, tmp_path):
    with pytest.raises(JobError, match="folder:"):
        run_inline("autocaption", params(tmp_path / "nope", "wd14", ""))
    with pytest.raises(JobError, match="mode:"):
        run_inline("autocaption", params(dataset, "wd14", "", mode="overwrite"))
    with pytest.raises(JobError, match="model:"):
        run_inline("autocaption", params(dataset, "llava", ""))


def test_job_in_the_real_worker_process(models, dataset, tmp_path):
    jobs = JobSupervisor(tmp_path / "ws")
    job = jobs.start("autocaption", params(dataset, "wd14", models["wd14"], include_subfolders=True))
    assert jobs.wait(job, timeout=120) == 0
    state = jobs.state(job)
    assert state.status == "done", (state.message, job.log_tail(20))
    assert state.result["written"] == 4 and (state.done, state.total) == (4, 4)
    assert caption(dataset, "sub/d_inner").startswith("general, hatsune miku")


def test_command_line(models, dataset, capsys):
    from ot_gradio.cli import main

    assert main(["caption", "auto", str(dataset), "--model", "wd14", "--model-path", str(models["wd14"]), "--mode", "missing",
                 "--prefix", "x, ", "--device", "cpu"]) == 0
    assert caption(dataset, "a_red").startswith("x, general")
    assert "3 captions written" in capsys.readouterr().out
    assert main(["caption", "auto", str(dataset / "nope"), "--model", "wd14"]) == 2
    assert "folder:" in capsys.readouterr().err


def test_page_form_refuses_paths_outside_and_runs_the_job(models, dataset, tmp_path):
    import gradio as gr

    from ot_gradio.ui.tools_autocaption import AutoCaptionTool
    from ot_gradio.ui.tools_tab import ToolsContext

    with gr.Blocks():
        ctx = ToolsContext(tmp_path / "ws", JobSupervisor(tmp_path / "ws"), gr.State({}), lambda config: [dataset, models["wd14"]])
        tool = AutoCaptionTool(ctx)
    values = {tool.folder: str(dataset), tool.subfolders: False, tool.model: "wd14", tool.model_path: str(models["wd14"]), tool.device: "cpu",
              tool.mode: "missing", tool.initial: "", tool.prefix: "", tool.postfix: "", tool.general: 0.35, tool.character: 0.85,
              ctx.config_state: {}}
    refused = tool.on_start({**values, tool.folder: str(tmp_path)})
    assert refused[0] == "" and "Folder:" in refused[2] and "not started" in refused[2]
    named = {ctx.config_state: {"concepts": [{"name": "ft", "path": str(dataset), "text": {"captions_file": "meta_cap.json"}}]}}
    refused = tool.on_start({**values, **named})  # that concept would not train with the captions written
    assert "Folder: concept 'ft' trains with the captions of its Captions file meta_cap.json" in refused[2]
    assert "Model path:" in tool.on_start({**values, tool.model_path: "/etc"})[2]
    assert not list((tmp_path / "ws").glob("jobs/*"))
    assert tool.params({**values, tool.model_path: ""})["model_path"] == "SmilingWolf/wd-v1-4-vit-tagger-v2"
    assert tool.on_model("wd14")[0]["visible"] and not tool.on_model("blip")[0]["visible"]

    job_id = tool.on_start(values)[0]
    assert ctx.jobs.wait(ctx.jobs.get(job_id), timeout=120) == 0
    summary = tool.panel.poll(job_id)[-1]
    assert "3 captions written, 0 skipped, 0 failed" in summary, summary
    assert caption(dataset, "a_red").startswith("general, hatsune miku")


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "network"])
@pytest.mark.parametrize("model", ["blip", "blip2", "wd14"])
def test_without_network_a_hub_model_is_read_from_the_cache_only_so_it_fails_at_once(dataset, monkeypatch, model, network):
    """Without HF_HUB_OFFLINE and without network the hub client retries each file for minutes
    before the clear error; the captioner asks the cache only when the hub's host does not answer."""
    import socket

    import huggingface_hub
    import transformers
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    probes, asked = [], []

    class Closed:
        def close(self):
            pass

    def connect(address, timeout=None):
        probes.append((address, timeout))
        if not network:
            raise OSError("Network is unreachable")
        return Closed()

    def hub(*args, **kwargs):
        asked.append(kwargs.get("local_files_only", False))
        raise OSError("not in the cache" if kwargs.get("local_files_only") else "connection timed out")

    monkeypatch.setattr(socket, "create_connection", connect)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hub)
    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", hub)
    with pytest.raises(JobError, match="Model path"):
        run_inline("autocaption", params(dataset, model, "owner/a-model"))
    assert asked and set(asked) == {not network}
    assert len(probes) == 1 and probes[0][1] <= 5


def test_a_clip_is_captioned_by_its_middle_frame(models, dataset):
    """A clip that fades in from blue and is red from its middle on gets the red tags."""
    import av

    clip = dataset / "e_clip.mp4"
    with av.open(str(clip), "w") as out:
        stream = out.add_stream("mpeg4", rate=8)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for i in range(9):
            colour = (10, 10, 200) if i < 3 else (200, 10, 10)
            frame = np.full((32, 32, 3), colour, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    result = run_inline("autocaption", params(dataset, "wd14", models["wd14"]))
    assert (result["written"], result["failed"], result["total"]) == (4, 0, 4)
    assert caption(dataset, "e_clip") == caption(dataset, "a_red")  # the red frames', not the first (blue) one's
