"""The TaskCoreError family, and finding a lease-control stop a product wrapped."""

from __future__ import annotations

from aster_forge import AsterForgeError
from aster_forge.tasks import TaskLeaseLostError
from aster_forge.tasks._lease import TaskLeaseTermination, task_lease_termination_of
from aster_forge.tasks.errors import (
    TaskCancelRequestedError,
    TaskCodecError,
    TaskCoreError,
    TaskLeaseControlError,
    TaskLeaseRenewalTimeoutError,
    TaskWorkerShutdownRequestedError,
)


class ProductError(Exception):
    pass


def test_one_class_per_failure() -> None:
    lost = TaskLeaseLostError(7, "tok")
    timeout = TaskLeaseRenewalTimeoutError(7, "tok")
    shutdown = TaskWorkerShutdownRequestedError(7, "tok")
    assert isinstance(timeout, TimeoutError)
    assert all(isinstance(e, TaskLeaseControlError) for e in (lost, timeout, shutdown))
    assert "task #7 with token tok" in str(lost)
    codec = TaskCodecError("bad")
    assert not isinstance(codec, TaskLeaseControlError)
    assert isinstance(codec, ValueError) and isinstance(codec, AsterForgeError)
    assert isinstance(lost, TaskCoreError)


def test_a_wrapped_lease_control_stop_is_found_through_the_cause_chain() -> None:
    try:
        try:
            raise TaskLeaseLostError(1, "t")
        except TaskCoreError as exc:
            raise ProductError("storage cancelled") from exc
    except ProductError as wrapped:
        assert task_lease_termination_of(wrapped) is TaskLeaseTermination.LOST
    timed_out = TaskLeaseRenewalTimeoutError(1, "t")
    assert task_lease_termination_of(timed_out) is TaskLeaseTermination.RENEWAL_TIMED_OUT
    shutdown = TaskWorkerShutdownRequestedError(1, "t")
    assert task_lease_termination_of(shutdown) is TaskLeaseTermination.SHUTDOWN_REQUESTED
    cancel = TaskCancelRequestedError(1, "t")
    assert task_lease_termination_of(cancel) is TaskLeaseTermination.CANCEL_REQUESTED
    assert task_lease_termination_of(ProductError("plain")) is None


def test_a_lost_lease_wins_over_a_stop_requested_with_it() -> None:
    try:
        try:
            raise TaskWorkerShutdownRequestedError(1, "t")
        except TaskCoreError as exc:
            raise TaskLeaseLostError(1, "t") from exc
    except TaskLeaseLostError as both:
        assert task_lease_termination_of(both) is TaskLeaseTermination.LOST
