"""Runtime machinery: health, components, lifecycle, leases, batch writer, temp dirs.

Usable without tasks: nothing here imports :mod:`aster_forge.tasks` or
:mod:`aster_forge.db`. Every error is in :mod:`aster_forge.runtime.errors` and every
protocol in :mod:`aster_forge.runtime.protocols`; the door re-exports the ones a
service catches or implements.
"""

from __future__ import annotations

# --- cancellation, event loop lag ---
from ._cancellation import CancellationToken
from ._loop_lag import EventLoopLagProbe

# --- health ---
from ._health import HealthComponentReport, HealthStatus, SystemHealthReport
from ._health import HealthComponentDetailValue
from ._health_options import HealthCheckOptions, HealthCheckScope, HealthCheckScopes
from ._health_registry import HealthCheckRegistry

# --- lifecycle ---
# isort: split
from ._bundles import runtime_component, shutdown_resource_component_after
from ._component import RuntimeComponentRegistry
from ._descriptors import RuntimeComponentKind
from ._lifecycle import (
    AsterRuntime,
    RuntimeComponentWithShutdown,
    RuntimeServiceComponent,
)
from ._phases import run_startup_phase
from ._service import ServiceLifecycle
from ._reports import ShutdownReport, StartupReport
from ._signals import wait_for_termination_signal
from .errors import AsterRuntimeError, ShutdownPhaseFailure

# --- temp dirs ---
# isort: split
from ._tempdir import create_runtime_temp_dir_guard, ensure_runtime_temp_dir

# --- buffered ---
# isort: split
from ._buffered import ManagedBatchWriter
from ._buffered_core import BufferedBatchConfig, OverflowPolicy, WriteFailure

# --- lease ---
# isort: split
from ._lease import run_runtime_lease_supervisor
from ._lease import RuntimeLease, RuntimeLeaseConfig, new_runtime_lease_owner_id
from .protocols import RuntimeComponentBundle, RuntimeLeaseStore

__all__ = [
    "AsterRuntime",
    "AsterRuntimeError",
    "BufferedBatchConfig",
    "CancellationToken",
    "EventLoopLagProbe",
    "HealthCheckOptions",
    "HealthCheckRegistry",
    "HealthCheckScope",
    "HealthCheckScopes",
    "HealthComponentDetailValue",
    "HealthComponentReport",
    "HealthStatus",
    "ManagedBatchWriter",
    "OverflowPolicy",
    "RuntimeComponentBundle",
    "RuntimeComponentKind",
    "RuntimeComponentRegistry",
    "RuntimeComponentWithShutdown",
    "RuntimeLease",
    "RuntimeLeaseConfig",
    "RuntimeLeaseStore",
    "RuntimeServiceComponent",
    "ServiceLifecycle",
    "ShutdownPhaseFailure",
    "ShutdownReport",
    "StartupReport",
    "SystemHealthReport",
    "WriteFailure",
    "create_runtime_temp_dir_guard",
    "ensure_runtime_temp_dir",
    "new_runtime_lease_owner_id",
    "run_runtime_lease_supervisor",
    "run_startup_phase",
    "runtime_component",
    "shutdown_resource_component_after",
    "wait_for_termination_signal",
]
