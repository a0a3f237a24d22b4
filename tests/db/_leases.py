"""The lease a claimed record carries, for store tests that write as its claimant."""

from __future__ import annotations

from aster_forge import BackgroundTaskRecord
from aster_forge.tasks import TaskLease


def lease_of(record: BackgroundTaskRecord) -> TaskLease:
    """The lease of a claimed ``record`` (it must carry a token and an expiry)."""
    assert record.processing_token is not None and record.lease_expires_at is not None
    return TaskLease(record.id, record.processing_token, record.lease_expires_at)
