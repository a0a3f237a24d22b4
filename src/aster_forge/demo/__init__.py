"""The example product run by ``aster-forge demo`` and ``make demo``."""

from __future__ import annotations

__all__: list[str] = []
