"""What the CLI and the application layer take from :mod:`aster_forge.db` besides its door.

Not a public API: products import from :mod:`aster_forge.db`.
"""

from __future__ import annotations

from ._tables import BACKGROUND_TASKS_TABLE, partition_rates_table
from ._tasks import DEFAULT_TASK_NOTIFY_CHANNEL
from ._tasks_notify import BackgroundTaskNotificationListener
from ._tasks_results import RESULTS_CHANNEL
from ._url import normalize_database_url

__all__ = [
    "BACKGROUND_TASKS_TABLE",
    "DEFAULT_TASK_NOTIFY_CHANNEL",
    "RESULTS_CHANNEL",
    "BackgroundTaskNotificationListener",
    "normalize_database_url",
    "partition_rates_table",
]
