"""Tools → Video → Download (ot_gradio/tools/video_download.py): yt-dlp's own code downloads from a
local web server standing in for a site (a video file's address, as yt-dlp's generic extractor
takes it; no site is reachable here). What comes down is cut by the video tool into clips the
trainer's clip reader reads."""

import functools
import http.server
import shutil
import threading
from pathlib import Path

import pytest

from ot_gradio.data.video import FrameSampling, probe_clip
from ot_gradio.tools.jobs import Job, JobError, run_inline
from ot_gradio.tools.video_download import LOCAL_OPT_IN, PARTIAL_DIR, format_sort, links_from
from tests.tools.test_video_extract import scene_frame, write_video


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """A file server that answers Range requests (as video sites' storage does) and records them."""

    ranges: list[str | None] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith("/members/") and "session=ok" not in (self.headers.get("Cookie") or ""):
            self.send_error(403, "sign in")  # a video behind a login
            return
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            return super().do_GET()
        data, wanted = path.read_bytes(), self.headers.get("Range")
        self.ranges.append(wanted)
        start = int(wanted.split("=")[1].split("-")[0]) if wanted else 0
        self.send_response(206 if wanted else 200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(data) - start))
        if wanted:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        self.wfile.write(data[start:])


@pytest.fixture(autouse=True)
def local_links(monkeypatch):
    """The stand-in site is on this machine: allowed as the command line allows it (by default
    the tool fetches public addresses only: test_video_download_addresses.py)."""
    monkeypatch.setenv(LOCAL_OPT_IN, "1")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A web server with a two-scene video and a 12 MB file, and its address."""
    root = tmp_path_factory.mktemp("site")
    write_video(root / "holiday film.mp4", [scene_frame(0, i) for i in range(15)] + [scene_frame(1, i) for i in range(15)])
    (root / "big.mp4").write_bytes(bytes(range(256)) * (12 * 4096))
    for name in ("a.mp4", "b.mp4"):
        shutil.copy(root / "holiday film.mp4", root / name)
    (root / "trip.html").write_text('<html><head><title>Trip</title></head><body><video src="a.mp4"></video>'
                                    '<video src="gone.mp4"></video><video src="b.mp4"></video></body></html>')
    (root / "members").mkdir()
    shutil.copy(root / "holiday film.mp4", root / "members" / "party.mp4")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(RangeHandler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {"url": f"http://127.0.0.1:{server.server_address[1]}", "root": root}
    server.shutdown()


def test_links_are_read_one_a_line_and_a_bad_one_is_named_by_its_line():
    text = "# my trip\nhttps://www.youtube.com/watch?v=abc&list=PL1\n\n  https://vimeo.com/1 https://vimeo.com/1\n"
    assert links_from(text) == ["https://www.youtube.com/watch?v=abc&list=PL1", "https://vimeo.com/1"]
    with pytest.raises(JobError, match="line 2 'file:///etc/passwd' is not a web address"):
        links_from("https://vimeo.com/1\nfile:///etc/passwd")
    with pytest.raises(JobError, match="Links: empty"):
        links_from("# nothing\n\n")


def test_the_highest_picture_chooses_yt_dlps_format_h264_among_equals():
    import yt_dlp

    def fmt(fid, vcodec, height, acodec="none"):
        return {"format_id": fid, "ext": "mp4", "vcodec": vcodec, "acodec": acodec, "height": height, "width": height * 16 // 9,
                "url": f"http://x/{fid}"}

    formats = [fmt("18", "avc1.42001E", 360, acodec="mp4a.40.2"), fmt("136", "avc1.4d401f", 720), fmt("137", "avc1.640028", 1080),
               fmt("248", "vp9", 1080), fmt("271", "vp9", 1440), fmt("401", "av01.0.12M.08", 2160),
               {"format_id": "140", "ext": "m4a", "vcodec": "none", "acodec": "mp4a.40.2", "url": "http://x/140"}]
    chosen = {}
    for height in (480, 720, 1080, 1440, 0):
        with yt_dlp.YoutubeDL({"format": "bv*/b", "format_sort": format_sort(height), "quiet": True}) as ydl:
            info = {"id": "abc", "title": "t", "formats": [dict(f) for f in formats], "extractor": "x", "extractor_key": "X",
                    "webpage_url": "http://x"}
            chosen[height] = ydl.process_ie_result(info, download=False)["format_id"]
    assert chosen == {480: "18", 720: "136", 1080: "137", 1440: "271", 0: "401"}


def test_downloads_then_keeps_then_the_video_tool_cuts_them(site, tmp_path):
    out = tmp_path / "videos"
    links = f"{site['url']}/holiday%20film.mp4\n{site['url']}/missing.mp4\n"
    first = run_inline("video-download", {"links": links, "output": str(out), "max_height": 1080})
    assert [p.split("/")[-1] for p in first["downloaded"]] == ["holiday_film [holiday_film].mp4"]
    assert len(first["failed"]) == 1 and first["failed"][0]["link"].endswith("missing.mp4") and "404" in first["failed"][0]["reason"]
    video = out / "holiday_film [holiday_film].mp4"
    assert video.read_bytes() == (site["root"] / "holiday film.mp4").read_bytes()
    assert sorted(p.name for p in out.iterdir()) == [video.name]  # no partial folder left behind

    again = run_inline("video-download", {"links": links, "output": str(out)})  # kept, not downloaded again
    assert again["downloaded"] == [] and again["already"] == [str(video)]

    clips = run_inline("video", {"source": str(out), "output": str(tmp_path / "concept"), "mode": "clips", "max_seconds": 5.0})
    assert clips["cuts"] == 1 and clips["written"] == 2
    assert [probe_clip(p, FrameSampling(frames=100, step=1, fps=100)).available for p in sorted(clips["files"])] == [15, 15]


def test_a_page_of_videos_downloads_each_and_names_the_one_that_failed(site, tmp_path):
    """A page (a playlist, to yt-dlp) whose second video is gone: the third still comes down."""
    result = run_inline("video-download", {"links": f"{site['url']}/trip.html", "output": str(tmp_path / "v")})
    assert sorted(Path(p).name for p in result["downloaded"]) == ["Trip_1 [trip-1].mp4", "Trip_3 [trip-3].mp4"]
    assert [f["link"] for f in result["failed"]] == [f"{site['url']}/trip.html"] and "404" in result["failed"][0]["reason"]


def test_cancel_keeps_the_partial_file_hidden_and_the_next_try_continues_it(site, tmp_path):
    out = tmp_path / "videos"
    asked = {"n": 0}

    def cancelled():
        asked["n"] += 1
        return asked["n"] > 3  # while the first file is coming down

    link = f"{site['url']}/big.mp4"
    result = run_inline("video-download", {"links": link, "output": str(out)}, Job(is_cancelled=cancelled))
    assert result.get("cancelled") and result["downloaded"] == []
    assert [p.name for p in out.iterdir()] == [PARTIAL_DIR]  # nothing in the folder but the hidden partial one
    [part] = (out / PARTIAL_DIR).iterdir()
    part_size = part.stat().st_size
    assert part.suffix == ".part" and 0 < part.stat().st_size < (site["root"] / "big.mp4").stat().st_size

    RangeHandler.ranges.clear()
    done = run_inline("video-download", {"links": link, "output": str(out)})
    assert len(done["downloaded"]) == 1
    assert f"bytes={part_size}-" in RangeHandler.ranges, RangeHandler.ranges  # continued where it stopped
    assert (out / "big [big].mp4").read_bytes() == (site["root"] / "big.mp4").read_bytes()
    assert not (out / PARTIAL_DIR).exists()


def test_a_video_behind_a_login_downloads_with_a_cookies_file_that_stays_as_it_was(site, tmp_path):
    link = f"{site['url']}/members/party.mp4"
    refused = run_inline("video-download", {"links": link, "output": str(tmp_path / "v")})
    assert refused["downloaded"] == [] and "403" in refused["failed"][0]["reason"]

    cookies = tmp_path / "cookies.txt"
    cookies.write_text("# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\tok\n", encoding="utf-8")
    before = cookies.read_bytes()
    done = run_inline("video-download", {"links": link, "output": str(tmp_path / "v"), "cookies": str(cookies)})
    assert [Path(p).name for p in done["downloaded"]] == ["party [party].mp4"] and done["failed"] == []
    assert cookies.read_bytes() == before  # yt-dlp wrote its jar to a copy, not to the user's export

    exported = tmp_path / "cookies.json"
    exported.write_text('[{"domain": "127.0.0.1", "name": "session", "value": "ok"}]', encoding="utf-8")
    with pytest.raises(JobError, match="Cookies file: cookies.json is a JSON export; yt-dlp reads the Netscape format"):
        run_inline("video-download", {"links": link, "output": str(tmp_path / "v"), "cookies": str(exported)})


def test_the_command_line_reads_a_list_of_links(site, tmp_path, capsys):
    from ot_gradio.cli import main

    listing = tmp_path / "links.txt"
    listing.write_text(f"# the trip\n{site['url']}/holiday%20film.mp4\n", encoding="utf-8")
    assert main(["video-download", str(listing), "--out", str(tmp_path / "videos")]) == 0
    assert "1 video(s) downloaded" in capsys.readouterr().err
    assert (tmp_path / "videos" / "holiday_film [holiday_film].mp4").is_file()
    assert main(["video-download", "ftp://example.com/a.mp4", "--out", str(tmp_path / "videos")]) == 2
    assert "line 1 'ftp://example.com/a.mp4' is not a web address" in capsys.readouterr().err


def test_the_page_form_is_checked_then_the_worker_downloads_and_fills_the_video_field(site, tmp_path):
    import gradio as gr

    from ot_gradio.runner.jobs import JobSupervisor
    from ot_gradio.ui.tools_tab import ToolsContext
    from ot_gradio.ui.tools_video import VideoTool
    from tests.tools.panel_wait import poll_to_end

    ws = tmp_path / "ws"
    ws.mkdir()
    config = {"concepts": []}
    with gr.Blocks():
        state = gr.State(config)
        ctx = ToolsContext(ws, JobSupervisor(ws), state, lambda c: [ws], config=config)
        tool = VideoTool(ctx)
    assert tool.download_folder.value == "videos" and tool.max_height.value == 1080 and tool.max_videos.value == 25
    form = {tool.links: f"{site['url']}/holiday%20film.mp4", tool.download_folder: str(ws / "videos"), tool.max_height: 720,
            tool.playlist: False, tool.max_videos: 25, ctx.config_state: config}
    refused = tool.on_download({**form, tool.download_folder: "/etc/videos"})
    assert refused[0] == "" and refused[2].startswith("**not started** Download folder: ")
    refused = tool.on_download({**form, tool.cookies: "/etc/cookies.txt"})
    assert refused[0] == "" and refused[2].startswith("**not started** Cookies file: ")
    refused = tool.on_download({**form, tool.links: "https://vimeo.com/1\nwww.youtube.com/watch?v=abc"})
    assert refused[0] == "" and "Links: line 2 'www.youtube.com/watch?v=abc' is not a web address" in refused[2]
    job_id, *_ = tool.on_download(form)
    assert job_id
    summary, source = poll_to_end(tool.download_panel, job_id)[-2:]
    assert summary.startswith(f"**1 video downloaded** into `{ws / 'videos'}`") and "holiday_film [holiday_film].mp4" in summary
    assert source["value"] == str(ws / "videos")  # ready for the video tool's Start
    from ot_gradio.ui.job_panel import job_bar

    assert job_bar(ctx.jobs.state(ctx.jobs.get(job_id))).endswith("</progress> 1/1</div>")  # links, not thousandths of one
    assert "concept" not in summary
    config["concepts"] = [{"name": "party", "path": str(ws / "videos")}]  # downloaded straight into a concept's folder
    job_id, *_ = tool.on_download({**form, ctx.config_state: config})
    summary, _ = poll_to_end(tool.download_panel, job_id)[-2:]
    assert "1 already there" in summary and "this is concept 'party''s folder: a video model trains on each video" in summary
