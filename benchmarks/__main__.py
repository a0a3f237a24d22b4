"""Run every ``benchmarks/bench_*.py`` module's ``main()`` in turn (``make bench``)."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path


def main() -> int:
    """Run the benchmarks named on the command line, or all of them."""
    wanted = set(sys.argv[1:])
    here = Path(__file__).parent
    for info in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if not info.name.startswith("bench_"):
            continue
        if wanted and info.name not in wanted:
            continue
        module = importlib.import_module(f"benchmarks.{info.name}")
        print(f"== {info.name}", flush=True)
        result = module.main()
        if inspect.iscoroutine(result):
            asyncio.run(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
