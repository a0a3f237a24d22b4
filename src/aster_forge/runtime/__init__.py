"""Runtime machinery: health, components, lifecycle, leases, batch writer, temp dirs.

Nothing here imports :mod:`aster_forge.tasks` or :mod:`aster_forge.db`.
"""

from __future__ import annotations

# --- core (foundation) ---
from ._cancellation import CancellationToken
from ._clock import Clock, SystemClock, sleep_or_cancelled, utc_now
from .errors import AsterForgeRuntimeError

# --- health (issue 2) ---
from ._health import HealthComponentReport, HealthStatus, SystemHealthReport
from ._health_builder import HealthCheckRegistryBuilder
from ._health_detail import (
    HealthComponentDetail,
    HealthComponentDetailKind,
    HealthComponentDetailValue,
)
from ._health_options import (
    HealthCheckDescriptor,
    HealthCheckOptions,
    HealthCheckRequirement,
    HealthCheckScope,
    HealthCheckScopes,
)
from ._health_registry import HealthCheck, HealthCheckRegistry
from .errors import (
    DuplicateHealthCheckError,
    InvalidHealthCheckError,
    InvalidHealthDetailError,
    InvalidHealthReportError,
)
from .protocols import HealthMetricsRecorder

# --- lifecycle (issue 3) ---

# --- buffered (issue 4) ---
# isort: split
from ._buffered import ManagedBatchWriter
from ._buffered_types import (
    BufferedBatchConfig,
    BufferedLane,
    BufferedWriterEvent,
    BufferedWriterEventKind,
    BufferedWriterLifecycle,
    BufferedWriterSnapshot,
    BufferedWriterStopReport,
    OverflowPolicy,
    RecordAdmission,
    WriteFailure,
    WriteFailureClass,
)
from .errors import (
    BufferedWriterError,
    DirectWriteError,
    FlushFailedError,
    FlushTimeoutError,
    InvalidBufferedConfigError,
    RecordClosedError,
    RecordError,
    RecordFullError,
    WriterLifecycleError,
    WriterQuarantinedError,
)

# --- lease (issue 5) ---
# isort: split
from ._lease import run_runtime_lease_supervisor
from ._lease_types import (
    RuntimeLease,
    RuntimeLeaseConfig,
    new_runtime_lease_owner_id,
)
from .errors import RuntimeLeaseConfigError
from .protocols import RuntimeLeaseStore

__all__ = [
    "AsterForgeRuntimeError",
    "BufferedBatchConfig",
    "BufferedLane",
    "BufferedWriterError",
    "BufferedWriterEvent",
    "BufferedWriterEventKind",
    "BufferedWriterLifecycle",
    "BufferedWriterSnapshot",
    "BufferedWriterStopReport",
    "CancellationToken",
    "Clock",
    "DirectWriteError",
    "DuplicateHealthCheckError",
    "FlushFailedError",
    "FlushTimeoutError",
    "HealthCheck",
    "HealthCheckDescriptor",
    "HealthCheckOptions",
    "HealthCheckRegistry",
    "HealthCheckRegistryBuilder",
    "HealthCheckRequirement",
    "HealthCheckScope",
    "HealthCheckScopes",
    "HealthComponentDetail",
    "HealthComponentDetailKind",
    "HealthComponentDetailValue",
    "HealthComponentReport",
    "HealthMetricsRecorder",
    "HealthStatus",
    "InvalidBufferedConfigError",
    "InvalidHealthCheckError",
    "InvalidHealthDetailError",
    "InvalidHealthReportError",
    "ManagedBatchWriter",
    "OverflowPolicy",
    "RecordAdmission",
    "RecordClosedError",
    "RecordError",
    "RecordFullError",
    "RuntimeLease",
    "RuntimeLeaseConfig",
    "RuntimeLeaseConfigError",
    "RuntimeLeaseStore",
    "SystemClock",
    "SystemHealthReport",
    "WriteFailure",
    "WriteFailureClass",
    "WriterLifecycleError",
    "WriterQuarantinedError",
    "new_runtime_lease_owner_id",
    "run_runtime_lease_supervisor",
    "sleep_or_cancelled",
    "utc_now",
]
