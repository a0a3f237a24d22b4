"""RuntimeLeaseConfig validation and owner ids."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aster_forge.runtime import RuntimeLease, RuntimeLeaseConfig, new_runtime_lease_owner_id
from aster_forge.runtime._lease import saturating_expiry
from aster_forge.runtime.errors import RuntimeLeaseConfigError


def test_defaults_and_stop_margin() -> None:
    config = RuntimeLeaseConfig("x.workers", "owner")
    assert (config.ttl, config.renew_interval, config.standby_retry_interval) == (
        timedelta(seconds=30),
        timedelta(seconds=10),
        timedelta(seconds=5),
    )
    assert config.stop_margin == timedelta(seconds=10)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ttl": timedelta(0)}, "ttl must be positive"),
        ({"renew_interval": timedelta(seconds=-1)}, "renew_interval must be positive"),
        ({"standby_retry_interval": timedelta(0)}, "standby_retry_interval must be positive"),
        ({"renew_interval": timedelta(seconds=30)}, "must be shorter than ttl"),
        ({"ttl": 30}, "ttl must be a timedelta"),
    ],
)
def test_invalid_durations(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(RuntimeLeaseConfigError, match=message):
        RuntimeLeaseConfig("lease", "owner", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", " ", " x", "x\n", "a\x00", "x" * 256])
def test_invalid_ids(bad: str) -> None:
    with pytest.raises(RuntimeLeaseConfigError):
        RuntimeLeaseConfig(bad, "owner")
    with pytest.raises(RuntimeLeaseConfigError):
        RuntimeLeaseConfig("lease", bad)
    with pytest.raises(ValueError):
        RuntimeLeaseConfig("lease", bad)


def test_owner_ids_are_unique_and_valid() -> None:
    ids = {new_runtime_lease_owner_id() for _ in range(200)}
    assert len(ids) == 200
    for owner in ids:
        RuntimeLeaseConfig("lease", owner)
        host, pid, random = owner.rsplit(":", 2)
        assert host and pid.isdigit() and len(random) == 32


def test_saturating_expiry() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert saturating_expiry(now, timedelta(seconds=5)) == now + timedelta(seconds=5)
    assert saturating_expiry(now, timedelta.max) == RuntimeLease.NEVER_EXPIRES
    near = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)
    assert saturating_expiry(near, timedelta(hours=2)) == RuntimeLease.NEVER_EXPIRES
    assert RuntimeLease("l", "o", RuntimeLease.NEVER_EXPIRES).never_expires
