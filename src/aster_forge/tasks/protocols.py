"""Store protocols of :mod:`aster_forge.tasks`, each documenting its fencing contract.

A product implements these against its own tables (or uses :mod:`aster_forge.db`);
:mod:`aster_forge.testing` ships in-memory implementations and conformance suites.
"""

from __future__ import annotations

from typing import Protocol  # noqa: F401

# --- task records and claim/heartbeat/execution stores (issue 6) ---

# --- scheduled task catalog store (issue 5) ---
