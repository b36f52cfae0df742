"""Writes docs/OPTIONS.md from the schema (ot_gradio/config/options_doc.py); `--check` only says
whether the file is current (exit 1 when not).

    .venv/bin/python scripts/options_doc.py [--check]
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ot_gradio.config.options_doc import render  # noqa: E402

OPTIONS_MD = ROOT / "docs" / "OPTIONS.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 when docs/OPTIONS.md is out of date")
    args = parser.parse_args()
    text = render()
    if args.check:
        current = OPTIONS_MD.read_text(encoding="utf-8") if OPTIONS_MD.exists() else ""
        if current != text:
            print(f"{OPTIONS_MD} is out of date: run .venv/bin/python scripts/options_doc.py")
            return 1
        print(f"{OPTIONS_MD} is current")
        return 0
    OPTIONS_MD.write_text(text, encoding="utf-8")
    print(f"wrote {OPTIONS_MD}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
