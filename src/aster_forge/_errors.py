"""The root of every exception aster-forge raises."""

from __future__ import annotations

__all__ = ["AsterForgeError"]


class AsterForgeError(Exception):
    """Raised as the base class of every error defined by aster-forge.

    Catch this to handle any library error; each subpackage defines its own
    subclasses in its ``errors`` module.
    """
