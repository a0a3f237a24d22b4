"""Runtime machinery: health, components, lifecycle, leases, batch writer, temp dirs.

Nothing here imports :mod:`aster_forge.tasks` or :mod:`aster_forge.db`.

For lease store implementations, :func:`validate_lease_identifier`,
:func:`validate_lease_ttl` and :func:`saturating_expiry` are the input checks and the
expiry arithmetic every :class:`RuntimeLeaseStore` applies, so the database and
in-memory stores refuse the same input and saturate to :data:`NEVER_EXPIRES` alike.
"""

from __future__ import annotations

# --- core (foundation) ---
from ._cancellation import CancellationToken
from ._clock import Clock, SystemClock, utc_now
from ._loop_lag import EventLoopLagProbe, watch_blocking_steps
from ._race import (
    RaceWinner,
    abandon_task,
    race,
    shielded,
    sleep_or_cancelled,
)
from .errors import AsterForgeRuntimeError

# --- health ---
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

# --- lifecycle ---
# isort: split
from ._component import (
    RuntimeComponentBuilder,
    RuntimeComponentBundle,
    RuntimeComponentBundleRegistration,
    RuntimeComponentDescriptor,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
    RuntimeShutdownDescriptor,
    RuntimeStartupDescriptor,
    runtime_component,
    shutdown_resource_component_after,
)
from ._lifecycle import (
    AsterRuntime,
    AsterRuntimeBuilder,
    RuntimeComponentWithShutdown,
    RuntimeServiceComponent,
    TryRuntimeComponentWithShutdown,
    runtime_component_with_shutdown,
    try_runtime_component_with_shutdown,
)
from ._service import (
    ServiceLifecycle,
)
from ._shutdown import (
    ShutdownCoordinator,
    ShutdownPhaseReport,
    ShutdownPhaseStatus,
    ShutdownPhaseStatusKind,
    ShutdownReport,
    log_shutdown_report,
)
from ._signals import (
    TerminationSignal,
    TerminationSignalHandler,
    spawn_termination_signal_handler,
    wait_for_termination_signal,
)
from ._startup import (
    StartupCoordinator,
    StartupPhaseFailurePolicy,
    StartupPhaseOutcome,
    StartupPhaseReport,
    StartupPhaseStatus,
    StartupReport,
    run_optional_startup_phase,
    run_required_startup_phase,
)
from ._tempdir import (
    RUNTIME_TEMP_DIR_NAME,
    RuntimeTempDirGuard,
    create_runtime_temp_dir_guard,
    ensure_runtime_temp_dir,
)
from .errors import (
    AsterRuntimeBeforeShutdownError,
    AsterRuntimeComponentGraphError,
    AsterRuntimeError,
    AsterRuntimeServiceError,
    AsterRuntimeShutdownError,
    AsterRuntimeStartupError,
    RuntimeComponentGraphError,
    RuntimeComponentRegistrationError,
    RuntimeSignalError,
    RuntimeTempDirError,
    RuntimeTempDirScopeError,
    ShutdownPhaseFailure,
)

# --- buffered ---
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

# --- lease ---
# isort: split
from ._lease import run_runtime_lease_supervisor
from ._lease_types import (
    MAX_RUNTIME_LEASE_ID_LENGTH,
    NEVER_EXPIRES,
    RuntimeLease,
    RuntimeLeaseConfig,
    RuntimeLeases,
    RuntimeLeaseView,
    new_runtime_lease_owner_id,
    saturating_expiry,
    validate_lease_identifier,
    validate_lease_ttl,
)
from .errors import RuntimeLeaseConfigError
from .protocols import RuntimeLeaseStore

__all__ = [
    "AsterForgeRuntimeError",
    "AsterRuntime",
    "AsterRuntimeBeforeShutdownError",
    "AsterRuntimeBuilder",
    "AsterRuntimeComponentGraphError",
    "AsterRuntimeError",
    "AsterRuntimeServiceError",
    "AsterRuntimeShutdownError",
    "AsterRuntimeStartupError",
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
    "EventLoopLagProbe",
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
    "MAX_RUNTIME_LEASE_ID_LENGTH",
    "ManagedBatchWriter",
    "NEVER_EXPIRES",
    "OverflowPolicy",
    "RUNTIME_TEMP_DIR_NAME",
    "RaceWinner",
    "RecordAdmission",
    "RecordClosedError",
    "RecordError",
    "RecordFullError",
    "RuntimeComponentBuilder",
    "RuntimeComponentBundle",
    "RuntimeComponentBundleRegistration",
    "RuntimeComponentDescriptor",
    "RuntimeComponentGraphError",
    "RuntimeComponentKind",
    "RuntimeComponentRegistrationError",
    "RuntimeComponentRegistry",
    "RuntimeComponentWithShutdown",
    "RuntimeLease",
    "RuntimeLeaseConfig",
    "RuntimeLeaseConfigError",
    "RuntimeLeaseStore",
    "RuntimeLeaseView",
    "RuntimeLeases",
    "RuntimeServiceComponent",
    "RuntimeShutdownDescriptor",
    "RuntimeSignalError",
    "RuntimeStartupDescriptor",
    "RuntimeTempDirError",
    "RuntimeTempDirGuard",
    "RuntimeTempDirScopeError",
    "ServiceLifecycle",
    "ShutdownCoordinator",
    "ShutdownPhaseFailure",
    "ShutdownPhaseReport",
    "ShutdownPhaseStatus",
    "ShutdownPhaseStatusKind",
    "ShutdownReport",
    "StartupCoordinator",
    "StartupPhaseFailurePolicy",
    "StartupPhaseOutcome",
    "StartupPhaseReport",
    "StartupPhaseStatus",
    "StartupReport",
    "SystemClock",
    "SystemHealthReport",
    "TerminationSignal",
    "TerminationSignalHandler",
    "TryRuntimeComponentWithShutdown",
    "WriteFailure",
    "WriteFailureClass",
    "WriterLifecycleError",
    "WriterQuarantinedError",
    "abandon_task",
    "create_runtime_temp_dir_guard",
    "ensure_runtime_temp_dir",
    "log_shutdown_report",
    "new_runtime_lease_owner_id",
    "race",
    "run_optional_startup_phase",
    "run_required_startup_phase",
    "run_runtime_lease_supervisor",
    "runtime_component",
    "runtime_component_with_shutdown",
    "saturating_expiry",
    "shielded",
    "shutdown_resource_component_after",
    "sleep_or_cancelled",
    "spawn_termination_signal_handler",
    "try_runtime_component_with_shutdown",
    "utc_now",
    "validate_lease_identifier",
    "validate_lease_ttl",
    "wait_for_termination_signal",
    "watch_blocking_steps",
]
