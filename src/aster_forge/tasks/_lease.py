"""Task processing leases: the fenced claim a worker holds while it runs a task."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

__all__ = ["TaskLease"]


@dataclass(frozen=True, slots=True)
class TaskLease:
    """The processing lease a successful claim hands to one worker.

    Every later write about the task (heartbeat, succeed, retry, fail, release, step
    update) is conditional on ``task_id`` *and* ``processing_token``: a worker whose
    token no longer matches the row writes nothing.

    Attributes:
        task_id: The persisted task identifier.
        processing_token: The fresh token the claim wrote into the row (opaque text).
        expires_at: When the lease lapses unless renewed (aware UTC datetime).
    """

    task_id: int
    processing_token: str
    expires_at: datetime

    def __post_init__(self) -> None:
        if not self.processing_token:
            raise ValueError("TaskLease.processing_token must be a non-empty string")
        if self.expires_at.tzinfo is None:
            raise ValueError("TaskLease.expires_at must be timezone-aware")

    def renewed(self, expires_at: datetime) -> TaskLease:
        """Return the same lease with a new expiry (what a heartbeat store returns).

        Args:
            expires_at: The new expiry written by the renewal.

        Returns:
            A new :class:`TaskLease`; this one is unchanged.
        """
        return replace(self, expires_at=expires_at)

    def same_claim(self, other: TaskLease) -> bool:
        """Whether ``other`` names the same claim (task id and token), ignoring expiry."""
        return self.task_id == other.task_id and self.processing_token == other.processing_token
