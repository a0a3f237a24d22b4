"""Shared rich console factory for the CLI (results go to stdout)."""

from __future__ import annotations

from rich.console import Console

__all__ = ["PIPE_WIDTH", "console"]

PIPE_WIDTH = 200
"""Line width when stdout is not a terminal (pipes and files keep whole rows)."""


def console() -> Console:
    """A stdout console (plain, wide text when stdout is not a terminal).

    Markup is off: task kinds, errors, payloads and step titles are data, and text
    such as ``[/x]`` must print as is rather than fail as a rich markup error.
    """
    out = Console(highlight=False, soft_wrap=True, markup=False)
    if not out.is_terminal:
        out = Console(
            highlight=False, soft_wrap=True, markup=False, width=max(out.width, PIPE_WIDTH)
        )
    return out
