"""``python -m aster_forge._demo``: an alias of ``aster-forge demo`` (same options)."""

from __future__ import annotations

import sys

from aster_forge.cli import main


def run() -> int:
    """Run ``aster-forge demo`` with this process's arguments."""
    return main(["demo", *sys.argv[1:]])


if __name__ == "__main__":
    raise SystemExit(run())
