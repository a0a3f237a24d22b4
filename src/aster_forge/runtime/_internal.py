"""What the other subpackages take from :mod:`aster_forge.runtime` besides its door.

The clock, the lease checks and expiry arithmetic every lease store applies, the
cancellation helpers the workers race against, and the component plumbing the
application layer wires. Not a public API: products import from
:mod:`aster_forge.runtime`.
"""

from __future__ import annotations

from ._buffered_core import BufferedWriterLifecycle, BufferedWriterStopReport, RecordAdmission
from ._clock import Clock, SystemClock, utc_now
from ._descriptors import RuntimeComponentDescriptor
from ._lease import (
    MAX_RUNTIME_LEASE_ID_LENGTH,
    NEVER_EXPIRES,
    RuntimeLeases,
    RuntimeLeaseView,
    saturating_expiry,
    validate_lease_identifier,
    validate_lease_ttl,
)
from ._loop_lag import watch_blocking_steps
from ._race import RaceWinner, abandon_task, race, shielded, sleep_or_cancelled
from ._tempdir import RUNTIME_TEMP_DIR_NAME

__all__ = [
    "MAX_RUNTIME_LEASE_ID_LENGTH",
    "NEVER_EXPIRES",
    "RUNTIME_TEMP_DIR_NAME",
    "BufferedWriterLifecycle",
    "BufferedWriterStopReport",
    "Clock",
    "RaceWinner",
    "RecordAdmission",
    "RuntimeComponentDescriptor",
    "RuntimeLeaseView",
    "RuntimeLeases",
    "SystemClock",
    "abandon_task",
    "race",
    "saturating_expiry",
    "shielded",
    "sleep_or_cancelled",
    "utc_now",
    "validate_lease_identifier",
    "validate_lease_ttl",
    "watch_blocking_steps",
]
