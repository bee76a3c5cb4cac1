"""Write docs/configuration.md from the table of sr3.* keys (sr3/config_table.py).

Usage: .venv/bin/python scripts/gen-config-doc.py [--check]
With --check, write nothing and exit 1 when the page is out of date.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sr3.config_doc import REGENERATE, render  # noqa: E402 - after the path

PAGE = ROOT / "docs" / "configuration.md"


def main() -> int:
    """Write the page, or with ``--check`` say whether it is current."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare")
    args = parser.parse_args()
    text = render()
    current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if args.check:
        if current != text:
            print(f"{PAGE} is out of date; run {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    if current != text:
        PAGE.write_text(text, encoding="utf-8")
        print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
