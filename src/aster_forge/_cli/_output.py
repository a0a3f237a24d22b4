"""Shared rich console factory for the CLI (results go to stdout)."""

from __future__ import annotations

from rich.console import Console

__all__ = ["console"]


def console() -> Console:
    """A stdout console (plain text when stdout is not a terminal)."""
    return Console(highlight=False, soft_wrap=True)
