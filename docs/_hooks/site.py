"""MkDocs hooks for the aster-forge site (configured in ``mkdocs.yml``).

- ``on_config``: the nav lists every planned page; entries whose file does not exist
  yet are dropped (logged at INFO) so a page appears in the nav as soon as it lands,
  and ``--strict`` never fails on a page that is still being written.
- ``on_page_markdown``: a line ``<!-- latest-results: GLOB -->`` is replaced by the
  newest file matching ``GLOB`` (relative to the repository root; newest = last in
  name order, so date-named files sort correctly). The text up to
  ``<!-- end-latest-results -->`` is the fallback shown when no file matches.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.aster_forge")

ROOT = Path(__file__).resolve().parents[2]

_LATEST = re.compile(
    r"^<!-- latest-results: (?P<glob>\S+) -->\n(?P<fallback>.*?)^<!-- end-latest-results -->\n",
    re.S | re.M,
)


def _existing(items: list[Any], docs_dir: Path) -> list[Any]:
    kept: list[Any] = []
    for item in items:
        if isinstance(item, dict):
            (title, target), *_ = item.items()
            if isinstance(target, list):
                children = _existing(target, docs_dir)
                if children:
                    kept.append({title: children})
            elif isinstance(target, str) and not (docs_dir / target).is_file():
                log.info("nav: %s (%s) does not exist yet; left out", title, target)
            else:
                kept.append(item)
        elif isinstance(item, str) and not (docs_dir / item).is_file():
            log.info("nav: %s does not exist yet; left out", item)
        else:
            kept.append(item)
    return kept


def on_config(config: Any) -> Any:
    """Drop nav entries whose page does not exist yet."""
    if config.get("nav"):
        config["nav"] = _existing(config["nav"], Path(config["docs_dir"]))
    return config


def latest_results(markdown: str, root: Path = ROOT) -> str:
    """Replace each ``latest-results`` block with the newest matching results file."""

    def replace(match: re.Match[str]) -> str:
        files = sorted(path for path in root.glob(match["glob"]) if path.is_file())
        if not files:
            return match["fallback"]
        newest = files[-1]
        body = newest.read_text(encoding="utf-8")
        # Demote the file's headings one level so they sit under the page's title.
        body = re.sub(r"^(#{1,5}) ", r"#\1 ", body, flags=re.M)
        source = newest.relative_to(root)
        return f"*Source: `{source}` (the newest of `{match['glob']}`).*\n\n{body}\n"

    return _LATEST.sub(replace, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Splice the newest benchmark/chaos results into the pages that ask for them."""
    return latest_results(markdown)
