"""Tools → Video → Download: videos from their links into a folder, with yt-dlp (YouTube, Vimeo,
Twitch, Instagram and the other sites it knows, and a video file's own address), as OneTrainer's
video tool downloads them. Then the video tool cuts them into clips or takes frames as images.

Only the picture is downloaded (the trainer reads no sound), so no ffmpeg program is needed to
merge streams: the best video stream up to a height, H.264 first among equals (every decoder
reads it); a site with no separate video stream gives its file with sound.
Files are named as yt-dlp names them, ``title [id].ext`` (in safe characters); one already there
is kept and counted, never downloaded again or overwritten. Partial files wait in a hidden folder
inside the output folder (a second try continues them) and only whole files take their names.
Live streams are skipped (they never end). One link that fails does not stop the others.
YouTube's pages need a script solved, which yt-dlp runs in deno (a requirement; yt-dlp finds it in
the environment's scripts folder).

Public addresses only: the page is used through a share link, and a link to this machine or its
network (a local service, the cloud's metadata address 169.254.169.254 and its credentials) would
be fetched by the server and handed back as a "video". A link whose host is such an address, by
its number or by a name that resolves to one, is refused by name; and while yt-dlp works, every
connection it makes (its pages, each redirect, a playlist's entries, the file, its fragments) is
checked on the address it connects to, where yt-dlp's request handlers resolve it
(`socket.getaddrinfo`), so a redirect or a name that resolves differently the second time is
refused too. Whoever starts the command line (or the page) can allow them with
OT_GRADIO_DOWNLOAD_LOCAL=1 (no setting on the page). What is not a video (yt-dlp's generic
extractor saves any page or file as `.unknown_video`; an extension the trainer does not read) is
not downloaded, or deleted when it was, and named.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..config.media_files import VIDEO_EXTENSIONS
from .jobs import Job, JobError

HEIGHTS = (480, 720, 1080, 1440, 2160)  # the page's choices for the highest picture; 0: the best there is
MAX_LINKS = 500
PARTIAL_DIR = ".ot-download"  # hidden: the dataset scanner and the video tool skip it
TEMPLATE = "%(title).80B [%(id).40B].%(ext)s"  # yt-dlp's own default name, its parts cut short
LOCAL_OPT_IN = "OT_GRADIO_DOWNLOAD_LOCAL"  # =1 in the environment: links to this machine and its network are fetched too
PUBLIC_ONLY = "the download tool fetches public addresses only"


def local_allowed() -> bool:
    return os.environ.get(LOCAL_OPT_IN, "") == "1"


def refused_address(ip: str) -> str:
    """Why the download tool does not connect to address `ip` ("": it does): loopback, private
    (RFC 1918, fc00::/7), link-local (169.254.0.0/16 with the cloud's metadata address, fe80::/10),
    unspecified, multicast, or another that is not public; an IPv4 address inside an IPv6 one is
    read as that IPv4 address."""
    try:
        address = ipaddress.ip_address(str(ip).split("%", 1)[0])  # an IPv6 zone (fe80::1%eth0)
    except ValueError:
        return "not an IP address"
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour or (address.teredo or (None, None))[1]
        if inner is None and address in ipaddress.ip_network("64:ff9b::/96"):  # NAT64
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        address = inner or address
    kinds = (("loopback", address.is_loopback), ("link-local", address.is_link_local), ("unspecified", address.is_unspecified),
             ("multicast", address.is_multicast), ("private", address.is_private), ("non-public", not address.is_global))
    kind = next((name for name, found in kinds if found), "")
    return f"a {kind} address ({address})" if kind else ""


def _literal_address(host: str) -> str | None:
    """The IP address a host is written as (also IPv4's short forms, 127.1 and 2130706433, which
    the resolver reads as numbers), or None for a name."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return socket.inet_ntoa(socket.inet_aton(host)) if re.fullmatch(r"[0-9a-fA-FxX.]+", host) else None
    except OSError:
        return None


def host_refused(url: str, resolve: bool = False) -> str:
    """Why the link's host is not fetched ("": it is): an address that is not public, written as one
    or (with `resolve`: a DNS lookup) a name that resolves to one; a name that does not resolve is
    left to yt-dlp to report."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return f"{host} is this machine: {PUBLIC_ONLY}"
    literal = _literal_address(host)
    if literal is not None:
        why = refused_address(literal)
        return f"{host} is {why}: {PUBLIC_ONLY}" if why else ""
    if not resolve:
        return ""
    try:
        answers = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM)
    except AddressRefused as err:  # (resolved while public_addresses_only is open)
        return str(err)
    except (OSError, UnicodeError):
        return ""
    return _refused_answer(host, answers)


def _refused_answer(host: str, answers: list) -> str:
    why = next((w for *_, sockaddr in answers if (w := refused_address(sockaddr[0]))), "")
    if not why:
        return ""
    return f"{host} {'is' if _literal_address(host) is not None else 'resolves to'} {why}: {PUBLIC_ONLY}"


class AddressRefused(OSError):
    """A connection yt-dlp was about to make to an address that is not public."""


@contextlib.contextmanager
def public_addresses_only() -> Iterator[None]:
    """While open, every host name resolved in this process (yt-dlp's urllib and requests handlers
    resolve with socket.getaddrinfo just before they connect, for each redirect too) must resolve
    to public addresses only, else AddressRefused. Jobs run in a worker process of their own (the
    page's) or alone (the command line)."""
    real = socket.getaddrinfo

    def checked(host, port, *args, **kwargs):
        answers = real(host, port, *args, **kwargs)
        why = _refused_answer(host.decode(errors="replace") if isinstance(host, bytes) else str(host), answers)
        if why:
            raise AddressRefused(why)
        return answers

    socket.getaddrinfo = checked
    try:
        yield
    finally:
        socket.getaddrinfo = real


def links_from(text: str) -> list[str]:
    """The links of a text: one a line (or separated by spaces); blank lines and `#` comments left
    out. A line that is not an http(s) address is named by its number."""
    links: list[str] = []
    for number, line in enumerate(str(text or "").splitlines(), start=1):
        if line.lstrip().startswith("#"):
            continue
        for word in line.split():
            parts = urlsplit(word)
            if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
                raise JobError(f"Links: line {number} '{word[:80]}' is not a web address; give one http(s) link a line")
            refused = "" if local_allowed() else host_refused(word)
            if refused:
                raise JobError(f"Links: line {number} '{word[:80]}': {refused}")
            if word not in links:
                links.append(word)
    if not links:
        raise JobError("Links: empty; give a video's, a playlist's or a video file's address, one a line")
    if len(links) > MAX_LINKS:
        raise JobError(f"Links: {len(links)} links; at most {MAX_LINKS} at a time")
    return links


def format_sort(max_height: int) -> list[str]:
    """yt-dlp's order of preference (its -S): the highest picture up to `max_height` (0: the
    highest there is; a site with none that low gives its lowest), then H.264 among equals."""
    return [f"res:{max_height}" if max_height > 0 else "res", "vcodec:h264"]


def options_from(params: dict[str, Any]) -> dict[str, Any]:
    """Checked job options from the form's or the command line's values (JobError names the field)."""
    try:
        max_height = int(params.get("max_height") or 0)
        max_videos = int(params.get("max_videos") or 0)
    except (TypeError, ValueError):
        raise JobError("Highest picture / Most videos a link: give whole numbers") from None
    if max_height < 0 or max_videos < 0:
        raise JobError("Highest picture / Most videos a link: must be 0 or more (0: no limit)")
    return {"links": links_from(params.get("links") or ""), "max_height": max_height, "max_videos": max_videos,
            "playlist": bool(params.get("playlist", False)), "cookies": cookies_file(params.get("cookies") or "")}


COOKIE_HEADERS = ("# Netscape HTTP Cookie File", "# HTTP Cookie File")


def cookies_file(value: str) -> Path | None:
    """The cookies file `value` names (None: none), checked: yt-dlp reads a cookies.txt in Netscape
    format, and a JSON export (what some browser extensions write) is named before anything starts."""
    if not str(value or "").strip():
        return None
    source = Path(str(value).strip()).expanduser()
    if not source.is_file():
        raise JobError(f"Cookies file: {value} does not exist; export a cookies.txt from your browser, or leave it empty")
    head = source.read_text(encoding="utf-8", errors="replace")[:4096].lstrip()
    if not head.startswith(COOKIE_HEADERS):
        kind = "a JSON export" if head.startswith(("[", "{")) else "not a cookies.txt"
        raise JobError(f"Cookies file: {source.name} is {kind}; yt-dlp reads the Netscape format, whose first line is "
                       "'# Netscape HTTP Cookie File' (a browser extension such as 'Get cookies.txt LOCALLY' exports it)")
    return source


@contextlib.contextmanager
def cookie_copy(source: Path | None) -> Iterator[str | None]:
    """A private copy of `source` for yt-dlp, which writes its cookie jar back to the file it was
    given: the user's export stays as it was. Removed afterwards."""
    if source is None:
        yield None
        return
    handle, copy = tempfile.mkstemp(prefix="ot-cookies-", suffix=".txt")  # readable by this user alone (0600)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(source.read_bytes())
        yield copy
    finally:
        Path(copy).unlink(missing_ok=True)


class _Log:
    """yt-dlp's messages: warnings to the job's log, errors kept for the link's report, the chatter dropped."""

    def __init__(self, job: Job):
        self.job = job
        self.errors: list[str] = []

    def debug(self, message: str) -> None:
        pass

    def info(self, message: str) -> None:
        pass

    def warning(self, message: str) -> None:
        if "generic information extractor" not in message:  # said for every direct file link
            self.job.log(f"yt-dlp: {_plain(message)}")

    def error(self, message: str) -> None:
        self.errors.append(_plain(message))  # a playlist entry that failed while the others went on


def _plain(message: str) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(message)).replace("ERROR: ", "").replace("WARNING: ", "")
    return re.sub(r"\s*\(caused by .*\)\s*$", "", text).strip()  # yt-dlp's repeat of the same error


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")} if folder.is_dir() else set()


def run_job(params: dict[str, Any], job: Job) -> dict[str, Any]:
    options = options_from(params)
    if not str(params.get("output") or "").strip():
        raise JobError("Folder: empty; give the folder the videos go to")
    output = Path(str(params["output"])).expanduser()
    if output.exists() and not output.is_dir():
        raise JobError(f"Folder: {output} is a file; give a folder")
    try:
        import yt_dlp  # noqa: PLC0415
        from yt_dlp.utils import DownloadCancelled, DownloadError, match_filter_func  # noqa: PLC0415
    except ImportError:
        raise JobError('yt-dlp is not installed: pip install -U "yt-dlp[default,deno]"') from None
    output.mkdir(parents=True, exist_ok=True)
    partial = output / PARTIAL_DIR
    links = options["links"]
    step = 1000  # progress units a link
    state = {"index": 0, "shown": 0.0}

    def on_progress(event: dict[str, Any]) -> None:
        if job.cancelled():
            raise DownloadCancelled("cancelled")
        now = time.monotonic()
        if event.get("status") != "downloading" or now - state["shown"] < 0.5:
            return
        state["shown"] = now
        got, total = event.get("downloaded_bytes") or 0, event.get("total_bytes") or event.get("total_bytes_estimate") or 0
        name = Path(str(event.get("filename") or "")).name
        size = f"{got / 2**20:.1f} of {total / 2**20:.1f} MB" if total else f"{got / 2**20:.1f} MB"
        job.progress(state["index"] * step + (int(step * got / total) if total else 0), len(links) * step, f"{name[:40]} {size}", per=step)

    log = _Log(job)
    not_videos: list[str] = []  # the link's answers that are not videos, kept from the disk
    not_live = match_filter_func("!is_live")

    def match_filter(info: dict[str, Any], *, incomplete: bool = False) -> str | None:
        why = not_live(info, incomplete)
        ext = str(info.get("ext") or "")
        if why is None and not incomplete and ext and f".{ext.lower()}" not in VIDEO_EXTENSIONS:
            not_videos.append(f"{info.get('title') or info.get('id') or 'it'} is not a video ({_not_video(ext)}): not downloaded")
            return not_videos[-1]
        return why

    ydl_options = {  # "only_download": as yt-dlp's command line, one failed download does not end a playlist
        "paths": {"home": str(output), "temp": str(partial)}, "outtmpl": TEMPLATE, "restrictfilenames": True,
        "windowsfilenames": True, "format": "bv*/b", "format_sort": format_sort(options["max_height"]), "noplaylist": not options["playlist"],
        "overwrites": False, "continuedl": True, "retries": 3, "socket_timeout": 30, "noprogress": True, "quiet": True,
        "logger": log, "ignoreerrors": "only_download", "progress_hooks": [on_progress], "match_filter": match_filter,
        "color": {"stdout": "never", "stderr": "never"},
    }
    if options["max_videos"]:
        ydl_options["playlistend"] = options["max_videos"]
    result: dict[str, Any] = {"links": len(links), "output": str(output), "downloaded": [], "already": [], "failed": [],
                              "skipped": 0, "concept": params.get("concept")}  # the page names a concept's folder
    before = _files(output)
    guard = contextlib.nullcontext() if local_allowed() else public_addresses_only()
    with guard, cookie_copy(options["cookies"]) as cookies, yt_dlp.YoutubeDL({**ydl_options, "cookiefile": cookies}) as ydl:
        if not local_allowed():  # libcurl (yt-dlp's optional curl_cffi handler) resolves names itself, past the guard
            ydl._request_director.handlers.pop("CurlCFFI", None)
        for index, link in enumerate(links):
            state["index"], log.errors, not_videos[:] = index, [], []
            job.progress(index * step, len(links) * step, link[:60], per=step)
            if job.cancelled():
                result["cancelled"] = True
                break
            refused = "" if local_allowed() else host_refused(link, resolve=True)
            if refused:
                result["failed"].append({"link": link, "reason": refused})
                job.log(f"{link}: {refused}")
                continue
            try:
                info = ydl.extract_info(link, download=True)
            except DownloadCancelled:
                result["cancelled"] = True
                break
            except DownloadError as err:
                log.errors = [_plain(err.msg if hasattr(err, "msg") else err)]
                info = None
            for path in _downloaded(info):
                if path.suffix.lower() not in VIDEO_EXTENSIONS:  # what the filter did not catch: never left where the page serves it
                    if path not in before:
                        path.unlink(missing_ok=True)
                    not_videos.append(f"{path.name} is not a video ({_not_video(path.suffix)}): "
                                      + ("already in the folder, not listed" if path in before else "deleted"))
                    continue
                key = "already" if path in before else "downloaded"
                if path.is_file() and str(path) not in result[key]:
                    result[key].append(str(path))
            for reason in dict.fromkeys([*log.errors, *not_videos]):
                result["failed"].append({"link": link, "reason": reason})
                job.log(f"{link}: {reason}")
            if not _downloaded(info) and not log.errors and not not_videos:
                result["skipped"] += 1  # a live stream, or a playlist with nothing in it
    if partial.is_dir() and not any(partial.iterdir()):
        shutil.rmtree(partial, ignore_errors=True)
    job.progress(len(links) * step, len(links) * step, "done", per=step)
    result["downloaded"], result["already"] = result["downloaded"][:500], result["already"][:500]
    return result


def _not_video(ext: str) -> str:
    ext = ext.lstrip(".").lower()
    if ext == "unknown_video":
        return "yt-dlp found no video there: a page or a file of another kind"
    return f"a .{ext} file; the trainer reads {', '.join(VIDEO_EXTENSIONS)}"


def _downloaded(info: dict[str, Any] | None) -> list[Path]:
    """The files one link's answer names: its own, or its playlist entries' (nested)."""
    if not info:
        return []
    paths = [Path(d["filepath"]) for d in info.get("requested_downloads") or [] if d.get("filepath")]
    for entry in info.get("entries") or []:
        paths += _downloaded(entry)
    return paths
