"""Tools → Video → Download fetches public addresses only (ot_gradio/tools/video_download.py): the
security review had the page download its own cloud credentials (a link to the metadata service,
saved as `gpu-role [gpu-role].unknown_video` and served back by the page). A link to this machine or
its network is refused by name, by its number or by a name resolving there; so is every connection
yt-dlp makes meanwhile (a redirect, a name that resolves elsewhere the second time); and what is not
a video is not kept. The stand-in servers listen on 127.0.0.1, so each test says which addresses
count as public for it."""

import http.server
import re
import socket
import threading

import pytest

from ot_gradio.tools import video_download
from ot_gradio.tools.jobs import JobError, run_inline
from ot_gradio.tools.video_download import LOCAL_OPT_IN, PUBLIC_ONLY, links_from

CREDENTIALS = b'{"AccessKeyId": "ASIAEXAMPLEKEY", "SecretAccessKey": "wJalrXUtnFEMI"}'


class MetadataHandler(http.server.BaseHTTPRequestHandler):
    """A cloud metadata service (credentials as JSON) that also redirects /go to `target`."""

    seen: list[str] = []
    target = ""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.seen.append(self.path)
        if self.path == "/go":
            self.send_response(302)
            self.send_header("Location", self.target)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(CREDENTIALS)))
        self.end_headers()
        self.wfile.write(CREDENTIALS)


@pytest.fixture
def metadata(monkeypatch):
    monkeypatch.delenv(LOCAL_OPT_IN, raising=False)
    MetadataHandler.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MetadataHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def resolving(monkeypatch, *answers: str) -> None:
    """`video.example` resolves to `answers` in turn (the last one from then on)."""
    real, left = socket.getaddrinfo, list(answers)

    def fake(host, port, *args, **kwargs):
        if host != "video.example":
            return real(host, port, *args, **kwargs)
        address = left.pop(0) if len(left) > 1 else left[0]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port or 0))]

    monkeypatch.setattr(socket, "getaddrinfo", fake)


@pytest.mark.parametrize("link", [
    "http://127.0.0.1:8123/latest/meta-data/iam/security-credentials/gpu-role", "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.5/a.mp4", "http://172.16.3.4/a.mp4", "http://192.168.1.20:8080/a.mp4", "http://[::1]/a.mp4",
    "http://[fd00::1]/a.mp4", "http://[fe80::1%25eth0]/a.mp4", "http://0.0.0.0:8000/", "http://224.0.0.1/a.mp4",
    "http://[::ffff:169.254.169.254]/", "http://2130706433/a.mp4", "http://127.1/a.mp4", "http://LOCALHOST:7860/file=x",
    "http://api.localhost./a.mp4",
])
def test_a_link_to_this_machine_or_its_network_is_refused_by_name(link, monkeypatch):
    monkeypatch.delenv(LOCAL_OPT_IN, raising=False)
    with pytest.raises(JobError, match=f"Links: line 2 '{re.escape(link[:30])}.*{PUBLIC_ONLY}"):
        links_from(f"https://vimeo.com/1\n{link}")
    monkeypatch.setenv(LOCAL_OPT_IN, "1")  # the command line's opt-in (whoever starts it): the user's own network
    assert links_from(link) == [link]


def test_public_links_are_taken():
    assert links_from("https://vimeo.com/1\nhttp://93.184.216.34/a.mp4\nhttps://[2606:4700::1]/a.mp4") == [
        "https://vimeo.com/1", "http://93.184.216.34/a.mp4", "https://[2606:4700::1]/a.mp4"]


def test_the_page_refuses_the_reviews_link_before_starting(tmp_path, monkeypatch):
    import gradio as gr

    from ot_gradio.runner.jobs import JobSupervisor
    from ot_gradio.ui.tools_tab import ToolsContext
    from ot_gradio.ui.tools_video import VideoTool

    monkeypatch.delenv(LOCAL_OPT_IN, raising=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    with gr.Blocks():
        ctx = ToolsContext(ws, JobSupervisor(ws), gr.State({}), lambda c: [ws], config={})
        tool = VideoTool(ctx)
    link = "http://127.0.0.1:8123/latest/meta-data/iam/security-credentials/gpu-role"
    refused = tool.on_download({tool.links: link, tool.download_folder: str(ws / "videos"), tool.max_height: 1080,
                                tool.playlist: False, tool.max_videos: 25, ctx.config_state: {}})
    assert refused[0] == "" and "**not started** Links: line 1" in refused[2] and "127.0.0.1 is a loopback address" in refused[2]
    assert not (ws / "videos").exists() and not (ws / "jobs").exists()


def test_a_name_that_resolves_to_this_machine_is_refused_and_nothing_is_fetched(metadata, monkeypatch, tmp_path):
    resolving(monkeypatch, "127.0.0.1")
    result = run_inline("video-download", {"links": f"http://video.example:{metadata}/latest/meta-data/", "output": str(tmp_path / "v")})
    assert result["downloaded"] == [] and MetadataHandler.seen == []
    assert result["failed"][0]["reason"] == f"video.example resolves to a loopback address (127.0.0.1): {PUBLIC_ONLY}"


def test_a_name_resolving_elsewhere_when_connecting_is_refused_there(metadata, monkeypatch, tmp_path):
    """DNS rebinding: public when checked, this machine when yt-dlp connects."""
    resolving(monkeypatch, "93.184.216.34", "127.0.0.1")
    result = run_inline("video-download", {"links": f"http://video.example:{metadata}/a.mp4", "output": str(tmp_path / "v")})
    assert result["downloaded"] == [] and MetadataHandler.seen == []
    assert f"video.example resolves to a loopback address (127.0.0.1): {PUBLIC_ONLY}" in result["failed"][0]["reason"]
    assert socket.getaddrinfo.__name__ == "fake"  # the guard is gone once the job ends


def test_a_redirect_to_this_machine_is_refused(metadata, monkeypatch, tmp_path):
    real = video_download.refused_address
    monkeypatch.setattr(video_download, "refused_address", lambda ip: "" if ip == "127.0.0.1" else real(ip))  # the "public" site
    MetadataHandler.target = f"http://127.0.0.2:{metadata}/latest/meta-data/"
    result = run_inline("video-download", {"links": f"http://127.0.0.1:{metadata}/go", "output": str(tmp_path / "v")})
    assert MetadataHandler.seen == ["/go"] and result["downloaded"] == []
    assert f"127.0.0.2 is a loopback address (127.0.0.2): {PUBLIC_ONLY}" in result["failed"][0]["reason"]
    assert not [p for p in (tmp_path / "v").rglob("*") if p.is_file()]


def test_what_is_not_a_video_is_not_kept(metadata, monkeypatch, tmp_path):
    """Allowed (the opt-in), a page that is no video is named and never left in the folder: not
    downloaded (yt-dlp's answer says so), or deleted when it came down all the same."""
    import yt_dlp

    monkeypatch.setenv(LOCAL_OPT_IN, "1")
    link = f"http://127.0.0.1:{metadata}/latest/meta-data/iam/security-credentials/gpu-role"
    result = run_inline("video-download", {"links": link, "output": str(tmp_path / "v")})
    assert result["downloaded"] == [] and [f["link"] for f in result["failed"]] == [link]
    assert "gpu-role is not a video (yt-dlp found no video there" in result["failed"][0]["reason"]
    assert not [p for p in (tmp_path / "v").rglob("*") if p.is_file()]

    monkeypatch.setattr(yt_dlp.YoutubeDL, "_match_entry", lambda self, info, incomplete=False, silent=False: None)  # no filter
    result = run_inline("video-download", {"links": link, "output": str(tmp_path / "v")})
    assert result["downloaded"] == [] and result["failed"][0]["reason"].endswith(".unknown_video is not a video (yt-dlp found no "
                                                                                  "video there: a page or a file of another kind): deleted")
    assert not [p for p in (tmp_path / "v").rglob("*") if p.is_file()]
