"""MkDocs hooks for the aster-forge site (configured in ``mkdocs.yml``).

- ``on_config``: the nav lists every planned page; entries whose file does not exist
  yet are dropped (logged at INFO) so a page appears in the nav as soon as it lands,
  and ``--strict`` never fails on a page that is still being written.
- ``on_page_markdown``: a line ``<!-- results: PATH -->`` is replaced by the results
  file at ``PATH`` (relative to the repository root; each benchmark and chaos writer
  keeps one such file and overwrites it). The text up to ``<!-- end-results -->`` is
  the fallback shown when the file does not exist.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.aster_forge")

ROOT = Path(__file__).resolve().parents[2]

_RESULTS = re.compile(
    r"^<!-- results: (?P<path>\S+) -->\n(?P<fallback>.*?)^<!-- end-results -->\n",
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


def splice_results(markdown: str, root: Path = ROOT) -> str:
    """Replace each ``results`` block with the results file it names."""

    def replace(match: re.Match[str]) -> str:
        path = root / match["path"]
        if not path.is_file():
            return match["fallback"]
        body = path.read_text(encoding="utf-8")
        # Demote the file's headings one level so they sit under the page's title.
        body = re.sub(r"^(#{1,5}) ", r"#\1 ", body, flags=re.M)
        return f"{body.rstrip()}\n\n*Source: `{match['path']}`.*\n\n"

    return _RESULTS.sub(replace, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Splice the current benchmark and chaos results into the pages that name them."""
    return splice_results(markdown)
