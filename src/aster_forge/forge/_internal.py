"""The Forge layer's names, re-exported by the front door :mod:`aster_forge`.

Products import them from :mod:`aster_forge`; this module only gives the front door
one place to take them from.
"""

from __future__ import annotations

from ._app import Forge
from ._drain import DrainedTask, ForgeDrainResult
from ._periodic import ForgePeriodic
from ._task import ForgeTask
from ._worker import ForgeWorkerSettings
from ._workflow import ForgeStep

__all__ = [
    "DrainedTask",
    "Forge",
    "ForgeDrainResult",
    "ForgePeriodic",
    "ForgeStep",
    "ForgeTask",
    "ForgeWorkerSettings",
]
