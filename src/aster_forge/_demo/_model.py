"""The demo product's own vocabulary: lanes, payload and result models.

Everything here belongs to the product, not to aster-forge. Task kinds are the wire
names of the ``@forge.task`` declarations in :mod:`._forge`.
"""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import BaseModel, Field

__all__ = [
    "LANE_LIMITS",
    "PIPELINE_STEPS",
    "DemoLane",
    "FailureMode",
    "MaintenancePayload",
    "MaintenanceResult",
    "MediaPayload",
    "MediaResult",
    "ReportPayload",
    "ReportResult",
]


class DemoLane(enum.StrEnum):
    """The demo's concurrency groups (values are stored in ``background_tasks.lane``)."""

    MEDIA = "media"
    MAINTENANCE = "maintenance"
    FALLBACK = "fallback"


LANE_LIMITS: dict[DemoLane, int] = {
    DemoLane.MEDIA: 2,
    DemoLane.MAINTENANCE: 1,
    DemoLane.FALLBACK: 4,
}
"""How many tasks of each lane one instance runs at the same time."""

FailureMode = Literal["none", "flaky", "corrupt", "quota"]
"""How a sample task misbehaves.

``flaky``: the transform step fails with a retryable error on the first execution.
``corrupt``: the transform step fails permanently (the source is unusable).
``quota``: the publish step fails with a MANUAL error on the first run in this
process; an operator retry (dashboard or ``aster-forge tasks retry``) then succeeds.
"""

PIPELINE_STEPS = (("fetch", "Fetch source"), ("transform", "Transform"), ("publish", "Publish"))
"""The visible steps of every media and report task."""


class MediaPayload(BaseModel):
    """What a thumbnail or transcode task works on."""

    asset_id: int = Field(ge=1)
    source_url: str = Field(min_length=1)
    size_kb: int = Field(ge=1, le=10_000_000)
    failure: FailureMode = "none"


class MediaResult(BaseModel):
    """Where the rendered media was published."""

    asset_id: int
    published_url: str
    chunks: int


class ReportPayload(BaseModel):
    """A report export request."""

    report: str = Field(min_length=1)
    rows: int = Field(ge=0, le=1_000_000)
    failure: FailureMode = "none"


class ReportResult(BaseModel):
    """The exported report."""

    report: str
    rows: int
    location: str


class MaintenancePayload(BaseModel):
    """A runtime (system) task requested by hand: which catalog entry to run.

    ``task`` is the runtime catalog's wire value (see :mod:`._runtime_tasks`).
    """

    task: str = Field(min_length=1)
    older_than_seconds: int = Field(default=3600, ge=0)


class MaintenanceResult(BaseModel):
    """What a runtime task did, for the admin view."""

    task: str
    display_name: str
    summary: str
    affected: int = 0
