"""The Concepts tab's statistics: clips counted for a video model type (frames at the run's
sampling, length), images for an image one; no torch in the page."""

from __future__ import annotations

from PIL import Image

from ot_gradio.data.buckets import Bucketing
from ot_gradio.ui.concepts import concept_stats, run_frame_sampling
from tests.video_clips import write_clip


def _concept(folder) -> dict:
    return {"name": "clips", "path": str(folder)}


def test_a_folder_of_clips_counts_clips_frames_and_length(tmp_path):
    folder = tmp_path / "clips"
    write_clip(folder / "a.mp4", frames=9)  # 9 frames at 24 fps: 0.375 s
    write_clip(folder / "b.webm", frames=24, codec="libvpx-vp9")  # 1 s, trains with 9 at Frames 9
    (folder / "a.txt").write_text("a moving square")
    Image.new("RGB", (48, 32)).save(folder / "still.png")
    config = {"model_type": "WAN_2_1", "frames": "9", "frame_rate": 24.0, "clip_start": 0.0}
    sampling = run_frame_sampling(config)
    assert (sampling.frames, sampling.step) == (9, 4)
    text, rows = concept_stats(_concept(folder), "64", Bucketing(), sampling)
    assert "**2 clips, 1 images**" in text and "1 with captions, 2 without" in text
    assert "18 frames in all at 9 frames, 24 fps" in text
    assert "1.4 s of video in all" in text  # 0.375 + 1.0 seconds
    assert sum(n for _, n in rows) == 3
    spread, _ = concept_stats({**_concept(folder), "image": {"clip_spread": True}}, "64", Bucketing(), sampling)
    assert "18 frames in all at 9 frames, spread over each clip" in spread
    clips, _ = concept_stats({**_concept(folder), "image": {"media": "CLIPS"}}, "64", Bucketing(), sampling)
    assert "**2 clips, 0 images**" in clips and "1 images of the folder are left out (Files trained: CLIPS)" in clips


def test_clips_alone_are_not_no_images_for_a_video_model(tmp_path):
    folder = tmp_path / "clips"
    write_clip(folder / "only.mp4", frames=5)
    text, _ = concept_stats(_concept(folder), "64", Bucketing(), run_frame_sampling({"model_type": "WAN_2_1", "frames": "25"}))
    assert text.startswith("**1 clips, 0 images**") and "5 frames in all" in text
    # an image model type reads no clips, and says the folder has no images
    assert run_frame_sampling({"model_type": "STABLE_DIFFUSION_15"}) is None
    text, rows = concept_stats(_concept(folder), "64", Bucketing(), None)
    assert "no images" in text and "It holds video clips: set Model type (Model tab)" in text and rows == []


def test_bad_frames_name_the_field():
    try:
        run_frame_sampling({"model_type": "WAN_2_1", "frames": "many"})
    except ValueError as err:
        assert "Frames" in str(err)
    else:
        raise AssertionError("no error for Frames 'many'")


def test_an_editing_model_type_counts_pairs_and_names_images_without_a_control_image(tmp_path):
    folder = tmp_path / "pairs"
    folder.mkdir()
    for name in ("a.png", "a-control.png", "b.jpg", "b-control.jpg", "c.png"):
        Image.new("RGB", (64, 64)).save(folder / name)
    text, rows = concept_stats(_concept(folder), "64", Bucketing(), None, control=True)
    assert text.startswith("**2 pairs**, 1 image without a control image") and "**without a control image:** c.png" in text
    assert sum(n for _, n in rows) == 2
    assert concept_stats(_concept(folder), "64", Bucketing(), None)[0].startswith("**5 images**")  # another model type: all are images


def test_a_depth_model_type_counts_the_depth_maps_beside_images_and_those_it_estimates(tmp_path):
    folder = tmp_path / "depth"
    folder.mkdir()
    for name in ("a.png", "a-depth.png", "b.jpg", "c.png"):
        Image.new("RGB", (64, 64)).save(folder / name)
    text, rows = concept_stats(_concept(folder), "64", Bucketing(), None, depth=True)
    assert text.startswith("**3 images**") and "1 images with a depth map beside them (`<name>-depth.<ext>`), 2 estimated" in text
    assert sum(n for _, n in rows) == 3
    assert "depth map" not in concept_stats(_concept(folder), "64", Bucketing(), None)[0]  # another model type: 4 images


def test_an_inpainting_model_with_custom_conditioning_images_counts_the_condlabel_images(tmp_path):
    from ot_gradio.ui.concepts import ConceptsTab

    folder = tmp_path / "inpaint"
    folder.mkdir()
    for name in ("a.png", "a-condlabel.png", "b.png", "c.jpg", "c-condlabel.png"):
        Image.new("RGB", (64, 64)).save(folder / name)
    config = {"model_type": "STABLE_DIFFUSION_15_INPAINTING", "custom_conditioning_image": True, "concepts": [_concept(folder)]}
    text, _ = ConceptsTab.statistics(None, config, 0)  # the page's handler: the model type and the option pick the count
    assert text.startswith("**3 images**")
    assert "2 images with a conditioning image beside them (`<name>-condlabel.<ext>`), 1 conditioned on their masked image" in text
    for other in ({**config, "custom_conditioning_image": False}, {**config, "model_type": "STABLE_DIFFUSION_15"}):
        text, _ = ConceptsTab.statistics(None, other, 0)
        assert text.startswith("**3 images**") and "condlabel" not in text  # the option is off, or the model does not inpaint


def test_rotate_and_crop_buckets_the_cut_around_each_mask_as_the_run_does(tmp_path):
    """A wide image whose mask is a small square: the run buckets the cut around the mask (near
    square), not the wide image; the page's chart shows the same bucket as the run's plan."""
    from ot_gradio.config.concept import ConceptConfig
    from ot_gradio.config.resolution import parse_resolutions
    from ot_gradio.data.planning import PreparedConcept
    from ot_gradio.data.scan import scan_concept

    folder = tmp_path / "masked"
    folder.mkdir()
    Image.new("RGB", (256, 64), "red").save(folder / "wide.png")
    mask = Image.new("L", (256, 64))
    mask.paste(255, (100, 16, 132, 48))
    mask.save(folder / "wide-masklabel.png")
    Image.new("RGB", (64, 64)).save(folder / "plain.png")  # no mask: bucketed whole
    concept = {**_concept(folder), "image": {"enable_random_mask_rotate_crop": True}}
    text, rows = concept_stats(concept, "64", Bucketing(), None, masked=True)
    assert "1 images bucketed by the cut around their mask" in text
    scan = scan_concept(ConceptConfig(**concept))
    plan = PreparedConcept(config=ConceptConfig(**concept), scan=scan, resolutions=parse_resolutions("64"), masked=True)
    index = next(n for n, item in enumerate(scan.items) if item.path.name == "wide.png")
    bh, bw = plan.bucket(index, (64, 64), plan.cached_mask_draw(index, 0))
    assert (f"{bw}x{bh}", 1) in rows and bw / bh < 2  # the cut's bucket, not the 4:1 image's
    whole, whole_rows = concept_stats(concept, "64", Bucketing(), None, masked=False)  # masked training off: whole images
    assert "cut around" not in whole and whole_rows != rows


def test_start_takes_a_folder_of_clips_alone_for_a_video_model(tmp_path):
    """The start check refused a video model's folder of clips as having no images."""
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.runner.startcheck import concept_problems

    (tmp_path / "clips").mkdir()
    (tmp_path / "clips" / "only.mkv").write_bytes(b"x")  # the check goes by names, as the scan does
    (tmp_path / "empty").mkdir()

    def problems(model_type, folder):
        return concept_problems(TrainConfig.model_validate({"model_type": model_type, "concepts": [{"path": str(tmp_path / folder)}]}))

    assert problems("WAN_2_1", "clips") == problems("HUNYUAN_VIDEO", "clips") == []
    assert "has no images; " in problems("STABLE_DIFFUSION_15", "clips")[0]
    assert "has no images or clips; " in problems("WAN_2_1", "empty")[0]
    (tmp_path / "empty" / "more").mkdir()  # subfolders are named only where there are some
    assert "has no images or clips (subfolders are not read: turn on Include subfolders); " in problems("WAN_2_1", "empty")[0]


def test_start_names_photos_in_a_format_that_is_not_read(tmp_path):
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.runner.startcheck import concept_problems

    (tmp_path / "iphone").mkdir()
    (tmp_path / "iphone" / "IMG_0001.JXL").write_bytes(b"x")
    config = TrainConfig.model_validate({"concepts": [{"path": str(tmp_path / "iphone")}]})
    assert concept_problems(config)[0].endswith("has no images; it holds .jxl "
                                                "files, a format that is not read: convert them to PNG or JPG")


def test_a_mask_on_a_transparent_layer_cuts_as_its_black_and_white_twin_and_cut_outs_are_counted(tmp_path):
    """Transparent in a mask is black (not trained): rotate and crop cuts around the painted square
    alone, as for the same mask in black and white; a transparent training image is named as
    training on white."""
    rows = {}
    for kind in ("L", "RGBA"):
        folder = tmp_path / kind
        folder.mkdir()
        Image.new("RGB", (256, 64), "red").save(folder / "wide.png")
        mask = Image.new(kind, (256, 64))  # RGBA: transparent black
        mask.paste(255 if kind == "L" else (255, 255, 255, 255), (100, 16, 132, 48))
        mask.save(folder / "wide-masklabel.png")
        Image.new("RGBA", (64, 64), (0, 0, 0, 0)).save(folder / "cut-out.png")
        concept = {**_concept(folder), "image": {"enable_random_mask_rotate_crop": True}}
        text, rows[kind] = concept_stats(concept, "64", Bucketing(), None, masked=True)
        assert "1 images bucketed by the cut around their mask" in text
        assert "1 images have transparent pixels; they train on a white background" in text
    assert rows["RGBA"] == rows["L"] and ("64x64", 1) in rows["L"] and len(rows["L"]) == 2
    alpha = {**_concept(tmp_path / "L"), "image": {"alpha_mask": True}}  # the cut-out's alpha channel is its mask
    text, _ = concept_stats(alpha, "64", Bucketing(), None, masked=True)
    assert text.startswith("**2 images**, 0 with captions, 2 without, 2 masks (1 from their alpha channel: Alpha as mask)")
    assert "transparent pixels" not in text


def test_a_kohya_folder_is_named_in_the_statistics_with_the_balancing_it_needs(tmp_path):
    folder = tmp_path / "20_sks dog"
    folder.mkdir()
    for name in ("a", "b"):
        Image.new("RGB", (64, 64), "red").save(folder / f"{name}.png")
    (folder / "a.caption").write_text("sks dog on grass\nin the sun")  # a wrapped sentence: two captions here
    text, _ = concept_stats(_concept(folder), "64", Bucketing(), None)
    assert "1 caption files hold several lines: each line is a caption of its own" in text
    assert "1 with captions, 1 without" in text
    assert "**kohya folder:** folder '20_sks dog' is named as kohya's" in text and "Balancing to 20" in text
    assert "('sks dog')" in text
    text, _ = concept_stats({**_concept(folder), "balancing": 20}, "64", Bucketing(), None)
    assert "kohya folder" not in text


def test_the_chart_buckets_at_the_model_types_step_as_the_run_does(tmp_path):
    """The chart of a 700x500 image shows the model type's bucket (the run's): OneTrainer rounds Flux's
    bucket sides to 64 px and SD's to 8, which here give different aspect ratios."""
    from ot_gradio.ui.concepts import ConceptsTab

    folder = tmp_path / "wide"
    folder.mkdir()
    Image.new("RGB", (700, 500)).save(folder / "a.png")
    flux = {"model_type": "FLUX_DEV_1", "resolution": "512", "concepts": [_concept(folder)]}
    buckets = {}
    for config in (flux, {**flux, "model_type": "STABLE_DIFFUSION_15"}):
        _, chart = ConceptsTab.statistics(None, config, 0)
        buckets[config["model_type"]] = list(chart["value"]["bucket"])
    assert buckets == {"FLUX_DEV_1": ["640x448"], "STABLE_DIFFUSION_15": ["624x416"]}
    override = {**flux, "concepts": [{**_concept(folder), "image": {"enable_resolution_override": True, "resolution_override": "256"}}]}
    assert list(ConceptsTab.statistics(None, override, 0)[1]["value"]["bucket"]) == ["320x192"]  # the concept's own resolution
    text, chart = ConceptsTab.statistics(None, {**flux, "bucket_resolution_step": 12}, 0)  # a step the run refuses too
    assert text.startswith("**Cannot bucket this concept:** bucket step 12 must be a multiple of 8") and chart is None  # cleared, never an empty frame
    assert Bucketing.from_config(flux, 16).assign(700, 500, 512) == (448, 640)  # what training buckets it at for Flux


def test_the_folders_caption_index_is_counted_in_the_statistics(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    for name in ("a", "b"):
        Image.new("RGB", (64, 64), "red").save(folder / f"{name}.png")
    (folder / "metadata.jsonl").write_text('{"file_name": "a.png", "text": "a red square"}\n{"file_name": "z.png", "text": "gone"}\n')
    text, _ = concept_stats(_concept(folder), "64", Bucketing(), None)
    assert "1 with captions, 1 without" in text
    assert "1 images captioned by the folder's `metadata.jsonl` (a caption file beside an image wins; 1 of its entries name no image here)" in text
    meta = tmp_path / "meta_cap.json"  # a Captions file: it names the images that train
    meta.write_text('{"a": {"caption": "a red square", "tags": "red"}}')
    text, _ = concept_stats({**_concept(folder), "text": {"captions_file": str(meta)}}, "64", Bucketing(), None)
    assert "**1 images**, 1 with captions, 0 without" in text
    assert (f"1 images captioned by its Captions file `{meta}`, which names the images that train (caption files beside them "
            "are not read; 1 files of the folder it does not name are left out)") in text


def test_the_demo_concepts_statistics_show_its_images_before_any_run(tmp_path):
    """A new user's first look: the demo preset's folder is drawn when a run starts, and before that
    its statistics said the folder does not exist. Now they draw it too: 10 images, every one
    trained at the demo's batch size, in a square, a wide and a tall bucket."""
    from pathlib import Path

    from ot_gradio.ui.concepts import ConceptsTab
    from ot_gradio.ui.state import preset_config

    config = preset_config("demo", tmp_path)
    folder = Path(config["concepts"][0]["path"])
    assert not folder.exists()
    text, chart = ConceptsTab.statistics(None, config, 0)
    assert "Cannot read" not in text and "10 image" in text, text
    assert len(set(chart["value"]["bucket"])) == 3 and sum(chart["value"]["images"]) == 10
    assert len(list(folder.glob("*.png"))) == 10
