"""The shared machinery of the store conformance suites: options, ``run``, ``run_all``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import ClassVar, Generic, TypeVar

__all__ = ["StoreConformance"]

StoreT = TypeVar("StoreT")


class StoreConformance(Generic[StoreT]):
    """Base of the conformance suites: holds the options and runs checks by name.

    Subclasses list their check coroutines in :attr:`CHECKS`; each raises
    ``AssertionError`` on a violation.

    Args:
        make_store: Returns a store; called several times where a check simulates
            several processes (the instances must share state, e.g. one database).
        advance: Moves the stores' time forward: ``ManualClock.advance`` for stores
            on an injected clock, ``asyncio.sleep`` for stores on a server clock.
        short_ttl: The TTL used by expiry checks (keep it small on a server clock).
        expiry_slack: Extra time advanced past ``short_ttl`` before expecting expiry.
        contenders: How many concurrent callers the race checks use.
    """

    CHECKS: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        make_store: Callable[[], StoreT],
        *,
        advance: Callable[[timedelta], Awaitable[None]],
        short_ttl: timedelta = timedelta(milliseconds=300),
        expiry_slack: timedelta = timedelta(milliseconds=150),
        contenders: int = 20,
    ) -> None:
        self._make_store = make_store
        self._advance = advance
        self.short_ttl = short_ttl
        self.expiry_slack = expiry_slack
        self.contenders = contenders

    async def run(self, check: str) -> None:
        """Run the check named ``check`` (one of :attr:`CHECKS`).

        Raises:
            ValueError: ``check`` is not in :attr:`CHECKS`.
        """
        if check not in self.CHECKS:
            raise ValueError(f"unknown check {check!r}")
        await getattr(self, check)()

    async def run_all(self) -> None:
        """Run every check in :attr:`CHECKS` in order."""
        for check in self.CHECKS:
            await self.run(check)

    async def _expire(self) -> None:
        await self._advance(self.short_ttl + self.expiry_slack)
