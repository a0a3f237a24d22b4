"""Decoding JSON at a boundary: every failure becomes the caller's typed error.

``json.loads`` raises ``ValueError`` for malformed text, ``TypeError`` for a value that
is not text, and ``RecursionError`` for text nested deeper than the interpreter's
recursion limit (``"[" * 100_000``, or valid but deep JSON such as
``"[" * 3000 + "]" * 3000``). A boundary parser must answer all three with its own
typed error, never let a ``RecursionError`` escape as a crash.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["load_json"]


def load_json(
    text: str | bytes | bytearray, *, what: str, error: Callable[[str], Exception]
) -> Any:
    """Decode ``text``, raising ``error(message)`` on any decoding failure.

    Args:
        text: The JSON text.
        what: What the text is, for the message (``"health report"``, ``"payload_json"``).
        error: Builds the caller's typed error from a message (usually the error class).

    Returns:
        The decoded value.

    Raises:
        Exception: ``error(message)``, chained to the decoder's exception, when the text
            is not JSON text, is malformed, or is nested too deeply to decode.
    """
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise error(f"{what} is nested too deeply to decode") from exc
    except (ValueError, TypeError) as exc:  # malformed, undecodable bytes, not text at all
        raise error(f"{what} is not valid JSON: {exc}") from exc
