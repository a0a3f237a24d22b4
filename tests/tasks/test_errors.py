"""The TaskCoreError family and the predicates a product's error mapper uses."""

from __future__ import annotations

from aster_forge import AsterForgeError
from aster_forge.tasks import (
    TaskCodecError,
    TaskCoreError,
    TaskCoreErrorKind,
    TaskLeaseLostError,
    TaskLeaseRenewalTimeoutError,
    TaskWorkerShutdownRequestedError,
    is_task_lease_control_error,
    is_task_lease_lost,
    is_task_lease_renewal_timed_out,
    is_task_worker_shutdown_requested,
)


class ProductError(Exception):
    pass


def test_kinds_and_predicates() -> None:
    lost = TaskLeaseLostError(7, "tok")
    timeout = TaskLeaseRenewalTimeoutError(7, "tok")
    shutdown = TaskWorkerShutdownRequestedError(7, "tok")
    assert lost.kind is TaskCoreErrorKind.LEASE_LOST and lost.is_lease_lost()
    assert timeout.is_lease_renewal_timed_out() and isinstance(timeout, TimeoutError)
    assert shutdown.is_worker_shutdown_requested()
    assert all(e.is_lease_control() for e in (lost, timeout, shutdown))
    assert "task #7 with token tok" in str(lost)
    codec = TaskCodecError("bad")
    assert codec.is_codec() and not codec.is_lease_control()
    assert isinstance(codec, ValueError) and isinstance(codec, AsterForgeError)
    assert isinstance(lost, TaskCoreError)


def test_predicates_see_through_product_wrapping() -> None:
    try:
        try:
            raise TaskLeaseLostError(1, "t")
        except TaskCoreError as exc:
            raise ProductError("storage cancelled") from exc
    except ProductError as wrapped:
        assert is_task_lease_lost(wrapped)
        assert is_task_lease_control_error(wrapped)
        assert not is_task_worker_shutdown_requested(wrapped)
    assert is_task_lease_renewal_timed_out(TaskLeaseRenewalTimeoutError(1, "t"))
    assert not is_task_lease_control_error(ProductError("plain"))
