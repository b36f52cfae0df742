"""Tools → Video in the browser: the tool builds when its tab opens, Clips splits a video at its
cut into the typed folder (made there) and shows the clips; switching to Images shows its own
fields and takes frames into the same folder, numbered after the clips' names."""

import time

import pytest

from tests.browser.page_helpers import open_page
from tests.browser.test_tools_automask import wait_text
from tests.tools.test_video_extract import scene_frame, write_video

pytestmark = pytest.mark.browser


def test_clips_then_images_from_a_video(app, browser_page):
    page = browser_page
    page.set_default_timeout(120_000)
    videos = app["cwd"] / "workspace" / "videos"
    videos.mkdir(parents=True)
    write_video(videos / "trip.mp4", [scene_frame(0, i) for i in range(15)] + [scene_frame(1, i) for i in range(15)])
    out = app["cwd"] / "workspace" / "datasets" / "trip"

    open_page(page, app["url"])
    page.get_by_role("tab", name="Tools", exact=True).click()
    page.get_by_role("tab", name="Video", exact=True).click()
    page.locator("#video-source textarea, #video-source input").first.fill(str(videos / "trip.mp4"))
    box = page.locator("#video-output input").first
    for _ in range(3):  # the first concept's folder may arrive after the tool is built (test_tools_automask)
        box.fill(str(out))
        box.press("Enter")
        time.sleep(1.0)
        if box.input_value() == str(out):
            break
    assert not page.locator("#video-per-second").is_visible()
    page.locator("#video-start-button").click()
    wait_text(page, "#video-summary", r"(?s)2 clips.*cuts found: 1")
    page.locator("#video-gallery video, #video-gallery img").first.wait_for(timeout=30_000)
    assert sorted(p.name for p in out.iterdir()) == ["trip_0001.mp4", "trip_0002.mp4"]

    page.get_by_label("Images, for image models").check()
    page.locator("#video-per-second").wait_for(state="visible")
    assert not page.locator("#video-max-seconds").is_visible()
    page.locator("#video-blur-drop input[type=number]").first.fill("0")
    page.locator("#video-blur-drop input[type=number]").first.press("Enter")
    page.locator("#video-start-button").click()
    wait_text(page, "#video-summary", r"3 images")
    assert sorted(p.name for p in out.iterdir()) == ["trip_0001.jpg", "trip_0001.mp4", "trip_0002.jpg", "trip_0002.mp4",
                                                     "trip_0003.jpg"]
