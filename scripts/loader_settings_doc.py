#!/usr/bin/env python3
"""Writes docs/loader-settings.md from the loader's settings' table (stoker._stoker.loader_settings()),
or with --check says whether the committed page is current. Needs the stoker package importable (an
installed wheel, or PYTHONPATH at python/ plus the built extension)."""

import argparse
import os
import sys

from stoker import _settings

PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "loader-settings.md")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail when the committed page differs")
    args = parser.parse_args()
    text = _settings.markdown()
    if args.check:
        with open(PAGE, encoding="utf-8") as f:
            if f.read() != text:
                print("docs/loader-settings.md is stale: run scripts/loader_settings_doc.py", file=sys.stderr)
                return 1
        return 0
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
