"""Shared rich console factory for the CLI (results go to stdout)."""

from __future__ import annotations

from rich.console import Console

__all__ = ["PIPE_WIDTH", "console"]

PIPE_WIDTH = 200
"""Line width when stdout is not a terminal (pipes and files keep whole rows)."""


def console() -> Console:
    """A stdout console (plain, wide text when stdout is not a terminal)."""
    out = Console(highlight=False, soft_wrap=True)
    if not out.is_terminal:
        out = Console(highlight=False, soft_wrap=True, width=max(out.width, PIPE_WIDTH))
    return out
