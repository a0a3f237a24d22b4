"""Background tasks: typed specs, registries, claiming, leases, dispatch and workers.

Imports :mod:`aster_forge.runtime` only; stores are protocols implemented by
:mod:`aster_forge.db` or by the product.
"""

from __future__ import annotations

__all__: list[str] = []
