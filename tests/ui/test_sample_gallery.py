"""The run's sample gallery (ui/samples.samples_html): images as <img>, a video family's .mp4
samples as a playable <video>."""

from ot_gradio.ui.samples import samples_html


def test_mp4_samples_play_as_video_and_images_stay_images():
    html = samples_html([("/runs/a/samples/step2-0.mp4", "step 2: a cat"), ("/runs/a/samples/step1-0.png", "step 1: a <dog>")],
                        lambda path: "gradio_api/file=" + path)
    video, image = html.split("<figure>")[1:]
    assert '<video src="gradio_api/file=/runs/a/samples/step2-0.mp4"' in video
    assert all(word in video.split(">")[0] for word in ("controls", "muted", "loop"))
    assert "<img" not in video and "step 2: a cat" in video
    assert '<img src="gradio_api/file=/runs/a/samples/step1-0.png"' in image and "<video" not in image
    assert "a &lt;dog&gt;" in image
