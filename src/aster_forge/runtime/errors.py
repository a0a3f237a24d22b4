"""Exceptions raised by :mod:`aster_forge.runtime`.

Every exception derives from :class:`AsterForgeRuntimeError` (itself an
:class:`~aster_forge.AsterForgeError`) and, where the meaning matches, from a
built-in such as ``ValueError``, ``TimeoutError`` or ``LookupError``.
"""

from __future__ import annotations

from .._errors import AsterForgeError


class AsterForgeRuntimeError(AsterForgeError):
    """Raised as the base class of every :mod:`aster_forge.runtime` error."""


# --- health (issue 2) ---

# --- lifecycle (issue 3) ---

# --- buffered (issue 4) ---

# --- lease (issue 5) ---
