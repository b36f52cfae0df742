"""`python -m ot_gradio caption ...`: the caption editor without the page (same core, same
backups and undo journal). Torch-free; `caption auto` comes from `cli_autocaption` when present."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path

DIFF_SAMPLE = 5


def _show(text: str | None) -> str:
    return "(no caption file)" if text is None else (" | ".join(text.splitlines()) or "(empty)")


def cmd_list(args: argparse.Namespace) -> int:
    from .captions import page_of  # noqa: PLC0415

    page = page_of(args.folder, args.page, args.page_size, args.recursive)
    for item in page.items:
        print(f"{item.name}\t{_show(item.caption if item.has_caption else None)}")
    print(f"page {page.page}/{page.pages}, {page.total} images", file=sys.stderr)
    return 0


def cmd_set(args: argparse.Namespace) -> int:
    from .captions import caption_file, write_caption  # noqa: PLC0415

    text = args.text.replace("\\n", "\n")
    changed = write_caption(Path(args.image), text)
    print(f"{'saved' if changed else 'unchanged'}: {caption_file(Path(args.image))}")
    return 0


def _bulk(args: argparse.Namespace, kind: str, **fields) -> int:
    from .captions import BulkOp, apply, preview  # noqa: PLC0415

    op = BulkOp(kind, files=args.files or None, recursive=args.recursive, **fields)
    changes = preview(args.folder, op) if args.dry_run else apply(args.folder, op)
    verb = "would change" if args.dry_run else "changed"
    print(f"{op.describe()}: {verb} {len(changes)} file(s)")
    for change in changes[:DIFF_SAMPLE]:
        print(f"  {change.name}\n    - {_show(change.before)}\n    + {_show(change.after)}")
    if len(changes) > DIFF_SAMPLE:
        print(f"  ... and {len(changes) - DIFF_SAMPLE} more")
    if changes and not args.dry_run:
        print(f"undo with: python -m ot_gradio caption undo {args.folder}")
    return 0


def cmd_replace(args: argparse.Namespace) -> int:
    return _bulk(args, "replace", find=args.find, replace=args.replace, regex=args.regex)


def cmd_text(kind: str):
    return lambda args: _bulk(args, kind, text=args.text)


def cmd_undo(args: argparse.Namespace) -> int:
    from .captions import undo_last  # noqa: PLC0415

    operation, restored = undo_last(args.folder)
    print(f"undone: {operation} ({len(restored)} caption file(s) restored)")
    return 0


def _guarded(func):
    """User errors (a missing folder, a bad regex, nothing to undo) end with a message and code 2."""
    def run(args: argparse.Namespace) -> int:
        from .captions import CaptionError  # noqa: PLC0415

        try:
            return func(args)
        except CaptionError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    return run


def _bulk_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", help="dataset folder")
    p.add_argument("--files", nargs="+", metavar="IMAGE", help="only these images (names inside the folder); default: all")
    p.add_argument("--recursive", action="store_true", help="include sub-folders")
    p.add_argument("--dry-run", action="store_true", help="only print how many files would change and a sample")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("caption", help="view and edit caption files (.txt next to each image); bulk edits with undo")
    caption_sub = parser.add_subparsers(dest="caption_command", metavar="ACTION", required=True)

    p = caption_sub.add_parser("list", help="print each image with its caption, one page at a time")
    p.add_argument("folder")
    p.add_argument("--page", type=int, default=1)
    p.add_argument("--page-size", type=int, default=50)
    p.add_argument("--recursive", action="store_true")
    p.set_defaults(func=_guarded(cmd_list))

    p = caption_sub.add_parser("set", help="set one image's caption (each line, or '\\n', starts another caption)")
    p.add_argument("image")
    p.add_argument("text")
    p.set_defaults(func=_guarded(cmd_set))

    p = caption_sub.add_parser("replace", help="find and replace in every caption")
    _bulk_args(p)
    p.add_argument("--find", required=True)
    p.add_argument("--replace", default="")
    p.add_argument("--regex", action="store_true", help="--find is a Python regular expression (\\1 in --replace)")
    p.set_defaults(func=_guarded(cmd_replace))

    for kind, text_help in (("prefix", "text put before every caption line"), ("suffix", "text put after every caption line"),
                            ("add-tags", "comma-separated tags added where missing"), ("remove-tags", "comma-separated tags removed")):
        p = caption_sub.add_parser(kind, help=text_help)
        _bulk_args(p)
        p.add_argument("text", metavar="TAGS" if "tags" in kind else "TEXT", help=text_help)
        p.set_defaults(func=_guarded(cmd_text(kind.replace("-", "_"))))

    p = caption_sub.add_parser("undo", help="undo the last bulk operation in a folder")
    p.add_argument("folder")
    p.set_defaults(func=_guarded(cmd_undo))

    if importlib.util.find_spec("ot_gradio.tools.cli_autocaption") is not None:
        importlib.import_module("ot_gradio.tools.cli_autocaption").register_auto(caption_sub)
