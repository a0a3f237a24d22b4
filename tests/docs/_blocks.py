"""Extract the fenced ``python`` code blocks of a Markdown guide."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"

#: An HTML comment on the line(s) right before a fence that keeps the block out of the run.
NO_RUN = "<!-- no-run -->"

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$")


@dataclass(frozen=True, slots=True)
class CodeBlock:
    """One fenced block: where it starts, its language and whether it is marked no-run."""

    path: Path
    line: int
    language: str
    source: str
    no_run: bool

    @property
    def location(self) -> str:
        """``docs/page.md:LINE`` for failure messages."""
        return f"{self.path.relative_to(DOCS.parent)}:{self.line}"


def code_blocks(path: Path) -> list[CodeBlock]:
    """Every fenced block of ``path`` in order (nested fences are not supported)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[CodeBlock] = []
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        indent, fence = len(match["indent"]), match["fence"]
        language = match["info"].strip().split(" ")[0].strip("{}.").lower()
        start = index
        body: list[str] = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index][indent:] if lines[index][:indent].isspace() else lines[index])
            index += 1
        previous = start - 1
        while previous >= 0 and not lines[previous].strip():
            previous -= 1
        no_run = previous >= 0 and lines[previous].strip() == NO_RUN
        blocks.append(CodeBlock(path, start + 1, language, "\n".join(body) + "\n", no_run))
        index += 1
    return blocks


README = DOCS.parent / "README.md"


def example_pages() -> list[Path]:
    """Every page whose examples run and type-check: the README and the guides."""
    return [README, *guide_pages()]


def guide_pages() -> list[Path]:
    """The hand-written guides (the generated API reference pages are excluded)."""
    return sorted(
        page for page in DOCS.rglob("*.md") if "reference" not in page.relative_to(DOCS).parts
    )
