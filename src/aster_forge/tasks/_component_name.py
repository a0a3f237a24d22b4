"""The stable component name of the background-task group (no runtime machinery imported).

Database, mail or audit components import this constant to declare that they shut
down after the background tasks, without pulling in the worker implementation.
"""

from __future__ import annotations

from typing import Final

__all__ = ["BACKGROUND_TASKS_COMPONENT"]

BACKGROUND_TASKS_COMPONENT: Final = "background_tasks"
"""The runtime component name every background-task component factory registers."""
