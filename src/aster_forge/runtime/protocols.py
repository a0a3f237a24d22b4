"""Store and bridge protocols of :mod:`aster_forge.runtime`.

Products (or :mod:`aster_forge.db`, :mod:`aster_forge.metrics`) implement these;
:mod:`aster_forge.testing` ships in-memory implementations and conformance suites.
"""

from __future__ import annotations

from typing import Protocol  # noqa: F401

# --- health (issue 2): HealthMetricsRecorder ---

# --- lease (issue 5): RuntimeLeaseStore ---
