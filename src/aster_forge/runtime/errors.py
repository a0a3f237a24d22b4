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


class InvalidHealthReportError(AsterForgeRuntimeError, ValueError):
    """Raised when a health report, or its JSON form, is malformed.

    Examples: a status wire value that is not ``healthy|degraded|unhealthy``, a
    component without a name, a negative duration, or a JSON object with missing or
    mistyped fields.
    """


class InvalidHealthDetailError(InvalidHealthReportError):
    """Raised when a typed health detail value, or its JSON form, is invalid.

    Examples: a negative ``unsigned`` or ``duration_millis``, an ``integer`` outside
    the signed 64-bit range, a ``bool`` passed where an integer is expected (or the
    reverse), a value of the wrong Python type, an unknown ``"type"`` tag in JSON, or
    a duplicate detail key on one component report. Nothing is silently coerced.
    """


class InvalidHealthCheckError(AsterForgeRuntimeError, ValueError):
    """Raised when a health check registration or its options are invalid.

    Examples: an empty name, a non-positive timeout, an empty scope set, or a check
    that is not callable.
    """


class DuplicateHealthCheckError(InvalidHealthCheckError):
    """Raised when a health check is registered under a name that is already taken."""


# --- lifecycle (issue 3) ---

# --- buffered (issue 4) ---

# --- lease (issue 5) ---
