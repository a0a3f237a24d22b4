"""What the web app takes from :mod:`aster_forge.metrics` besides its door.

Not a public API: products import from :mod:`aster_forge.metrics`.
"""

from __future__ import annotations

from ._dispatch import DispatchStatsSource

__all__ = [
    "DispatchStatsSource",
]
