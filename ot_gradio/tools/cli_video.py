"""`python -m ot_gradio video SOURCE --out FOLDER ...`: Tools → Video in this process (torch-free)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("video", help="training clips or images from long videos (split at cuts, frames as images)",
                       description="Split videos into training clips at their cuts (for the video models) or take frames as "
                                   "images (for the image models), into a folder. Nothing is overwritten: new files are "
                                   "numbered after those already there.")
    p.add_argument("source", help="a video file or a folder of videos")
    p.add_argument("--out", required=True, help="the folder the clips or images go to (made if missing)")
    p.add_argument("--images", action="store_true", help="take frames as .jpg images instead of clips")
    p.add_argument("--recursive", action="store_true", help="include videos in subfolders")
    p.add_argument("--subfolders", action="store_true", help="write each video's output into a folder of its own")
    p.add_argument("--start", default="", help="where to begin: seconds, m:ss or h:mm:ss (default: the beginning)")
    p.add_argument("--end", default="", help="where to end (default: the end)")
    p.add_argument("--max-seconds", type=float, default=5.0, help="clips: the longest a clip is (default 5)")
    p.add_argument("--no-split-cuts", action="store_true", help="clips: do not split at cuts")
    p.add_argument("--fps", type=float, default=0.0, help="clips: frames a second (default 0: the video's)")
    p.add_argument("--per-second", type=float, default=1.0, help="images: frames taken a second (default 1)")
    p.add_argument("--blur-drop", type=float, default=0.2, help="images: the blurriest fraction left out (default 0.2)")
    p.add_argument("--remove-borders", action="store_true", help="cut away black letterbox / pillarbox bars")
    p.add_argument("--crop-variation", type=float, default=0.0, help="0..0.5: vary each output's aspect ratio by up to this")
    p.add_argument("--seed", type=int, default=42, help="for the crop variation and the images' times (default 42)")
    p.set_defaults(func=cmd_video)

    d = sub.add_parser("video-download", help="download videos from their links with yt-dlp (YouTube, Vimeo, ..., file links)",
                       description="Download videos (the picture only) from their links into a folder with yt-dlp, for "
                                   "`video` to cut. A file already there is kept; partial files wait in a hidden folder.")
    d.add_argument("links", nargs="+", help="links, or a .txt file of them (one a line, # for comments)")
    d.add_argument("--out", required=True, help="the folder the videos go to (made if missing)")
    d.add_argument("--max-height", type=int, default=1080, help="the highest picture, in pixels (default 1080; 0: the best)")
    d.add_argument("--playlist", action="store_true", help="a video's link that names a playlist too: take the playlist")
    d.add_argument("--max-videos", type=int, default=25, help="a playlist's or channel's first N videos (default 25; 0: all)")
    d.add_argument("--cookies", default="", help="a cookies.txt (Netscape format) exported from a browser signed in to the site")
    d.set_defaults(func=cmd_video_download)


def cmd_video(args: argparse.Namespace) -> int:
    from .jobs import run_in_console  # noqa: PLC0415

    params = {"source": args.source, "output": args.out, "mode": "images" if args.images else "clips", "recursive": args.recursive,
              "subfolders": args.subfolders, "start": args.start, "end": args.end, "max_seconds": args.max_seconds,
              "split_cuts": not args.no_split_cuts, "fps": args.fps, "per_second": args.per_second, "blur_drop": args.blur_drop,
              "remove_borders": args.remove_borders, "crop_variation": args.crop_variation, "seed": args.seed}
    result = run_in_console("video", params, unit="video")
    if result is None:
        return 2
    what = "clips" if result["mode"] == "clips" else "images"
    print(f"{result['written']} {what} from {result['videos']} video(s) into {result['output']}", file=sys.stderr)
    for video in result.get("inside_output", []):
        print(f"note: {video} is in the output folder too: a video model would train on it as one more clip; move it out",
              file=sys.stderr)
    for failed in result["failed"]:
        print(f"could not read {failed['file']}: {failed['reason']}", file=sys.stderr)
    return 1 if result["failed"] else 0


def cmd_video_download(args: argparse.Namespace) -> int:
    from pathlib import Path  # noqa: PLC0415

    from .jobs import run_in_console  # noqa: PLC0415

    lines = []
    for link in args.links:  # a .txt of links, as OneTrainer's "Link List"
        lines.append(Path(link).read_text(encoding="utf-8") if link.endswith(".txt") and Path(link).is_file() else link)
    params = {"links": "\n".join(lines), "output": args.out, "max_height": args.max_height, "playlist": args.playlist,
              "max_videos": args.max_videos, "cookies": args.cookies}
    result = run_in_console("video-download", params, unit="")
    if result is None:
        return 2
    print(f"{len(result['downloaded'])} video(s) downloaded into {result['output']}"
          + (f", {len(result['already'])} already there" if result["already"] else ""), file=sys.stderr)
    for failed in result["failed"]:
        print(f"failed: {failed['link']}: {failed['reason']}", file=sys.stderr)
    return 1 if result["failed"] else 0
