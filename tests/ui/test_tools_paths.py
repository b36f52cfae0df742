"""Every path typed into a tool goes through ToolsContext: inside the page's folders only."""

import os

import gradio as gr
import pytest

from ot_gradio.runner.jobs import JobSupervisor
from ot_gradio.ui.tools_tab import ToolInputError, ToolsContext


@pytest.fixture
def ctx(tmp_path):
    data = tmp_path / "data"
    (data / "cat").mkdir(parents=True)
    (data / "cat" / "a.png").write_bytes(b"x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("key")
    os.symlink(outside, data / "link-out")
    with gr.Blocks():
        state = gr.State({})
    return ToolsContext(tmp_path / "ws", JobSupervisor(tmp_path / "ws"), state, lambda config: [data])


def test_paths_inside_are_resolved(ctx, tmp_path):
    assert ctx.folder("Folder", str(tmp_path / "data" / "cat"), {}) == tmp_path / "data" / "cat"
    assert ctx.file("Image", str(tmp_path / "data" / "cat" / "a.png"), {}).name == "a.png"
    assert ctx.output("Output", str(tmp_path / "data" / "new.safetensors"), {}).name == "new.safetensors"


@pytest.mark.parametrize("value", ["{d}/cat/../../outside", "/etc", "{d}/link-out", "{d}/link-out/secret.txt", ""])
def test_paths_outside_are_refused_naming_the_field(ctx, tmp_path, value):
    with pytest.raises(ToolInputError, match="^Folder: "):
        ctx.file("Folder", value.format(d=tmp_path / "data"), {})


def test_missing_paths_are_named(ctx, tmp_path):
    with pytest.raises(ToolInputError, match="Folder: folder .* does not exist"):
        ctx.folder("Folder", str(tmp_path / "data" / "dog"), {})
    with pytest.raises(ToolInputError, match="Output: the folder of"):
        ctx.output("Output", str(tmp_path / "data" / "no" / "x.safetensors"), {})


@pytest.mark.parametrize("module, cls", [("tools_automask", "AutoMaskTool"), ("tools_autocaption", "AutoCaptionTool")])
def test_folder_starts_on_the_first_concept_of_the_session(tmp_path, module, cls):
    # tools are built when a session opens them, with its config: the folder is there from the
    # start (it once came from a later config update, which could overwrite a folder just typed)
    import importlib

    config = {"concepts": [{"path": str(tmp_path / "cats")}, {"path": str(tmp_path / "dogs")}]}
    with gr.Blocks():
        ctx = ToolsContext(tmp_path / "ws", JobSupervisor(tmp_path / "ws"), gr.State({}), lambda c: [tmp_path], config=config)
        tool = getattr(importlib.import_module(f"ot_gradio.ui.{module}"), cls)(ctx)
    assert tool.folder.value == str(tmp_path / "cats")
    assert [value for _, value in tool.folder.choices] == [str(tmp_path / "cats"), str(tmp_path / "dogs")]


def test_the_masks_folder_follows_the_concepts_when_its_tab_is_shown(page, tmp_path):
    """The Masks tool is built at start-up, so it showed the start-up config's concept folder
    even after that folder was gone and the concept pointed elsewhere."""
    masks = next(t for t in page.tools.values() if hasattr(t, "follow_concepts"))
    (handler,) = [fn for fn in page.blocks.fns.values() if getattr(fn.fn, "__func__", None) is type(masks).on_shown]
    assert handler.outputs == [masks.folder]
    now = tmp_path / "my-cats"
    now.mkdir()
    config = {"concepts": [{"path": str(now)}]}
    assert masks.on_shown(masks.prefilled, config) == str(now)  # the start-up value: replaced
    assert masks.on_shown(str(tmp_path / "gone"), config) == str(now)  # a folder that no longer exists
    assert masks.on_shown("", config) == str(now)
    typed = tmp_path / "typed"
    typed.mkdir()
    assert masks.on_shown(str(typed), config) == gr.skip()  # what the user typed stays
    assert masks.on_shown(str(now), config) == gr.skip()


def test_the_caption_tool_plays_the_clips_a_browser_plays_and_shows_the_others_by_their_frame(tmp_path):
    from ot_gradio.ui.tools_captions import CaptionsTool

    with gr.Blocks():
        ctx = ToolsContext(tmp_path / "ws", JobSupervisor(tmp_path / "ws"), gr.State({}), lambda c: [tmp_path])
        tool = CaptionsTool(ctx)
    for name, played in [("a.mp4", True), ("b.WEBM", True), ("c.mkv", False), ("d.avi", False), ("e.png", False)]:
        (tmp_path / name).write_bytes(b"x")
        update = tool._clip_update(tmp_path / name)
        assert update["visible"] is played, name
        assert (update["value"] is not None) is played, name
