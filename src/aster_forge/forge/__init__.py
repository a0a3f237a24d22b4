"""The Forge application layer: ``Forge``, ``@forge.task``, ``@forge.periodic``, workers.

Its public names are imported from the front door, :mod:`aster_forge`, which is where
they are documented. Built on the primitives of :mod:`aster_forge.tasks`,
:mod:`aster_forge.db` and :mod:`aster_forge.runtime`; it holds no claim, lease,
heartbeat or schedule logic of its own.
"""

from __future__ import annotations

__all__: list[str] = []
