"""A product whose worker loop crashes at once (a poll setting slipped past its checks)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from aster_forge import Forge, ForgeWorkerSettings

from ._product import URL_ENV

_settings = ForgeWorkerSettings()
_wrong_poll: Any = timedelta(milliseconds=200)
object.__setattr__(_settings, "poll", _wrong_poll)

forge = Forge(os.environ.get(URL_ENV, "memory://"), name="crashing", settings=_settings)


@forge.task
async def noop() -> None:
    return None
