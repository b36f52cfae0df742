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
