"""The Forge application layer: ``Forge``, ``@forge.task``, ``@forge.periodic``, workers.

Built on the primitives of :mod:`aster_forge.tasks`, :mod:`aster_forge.db` and
:mod:`aster_forge.runtime` (their public names only); it holds no claim, lease,
heartbeat or schedule logic of its own.
"""

from __future__ import annotations

from ._app import DEFAULT_FORGE_URL, Forge
from ._backend import ForgeBackend
from ._declarations import ForgeHealthCheck
from ._drain import DrainedTask, ForgeDrainResult
from ._periodic import ForgePeriodic
from ._task import ForgeTask
from ._worker import ForgeWorker, ForgeWorkerSettings
from ._workflow import ForgeStep
from .errors import (
    ForgeDeclarationError,
    ForgeError,
    ForgePayloadError,
    ForgeStateError,
    ForgeTaskFailedError,
)

__all__ = [
    "DEFAULT_FORGE_URL",
    "DrainedTask",
    "Forge",
    "ForgeBackend",
    "ForgeDeclarationError",
    "ForgeDrainResult",
    "ForgeError",
    "ForgeHealthCheck",
    "ForgePayloadError",
    "ForgePeriodic",
    "ForgeStateError",
    "ForgeStep",
    "ForgeTask",
    "ForgeTaskFailedError",
    "ForgeWorker",
    "ForgeWorkerSettings",
]
