"""``ForgeTask``: what ``@forge.task`` returns: the declaration and the enqueue handle."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pydantic
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from ..tasks import TaskDedupeKey, TaskSpec, TaskStepSpec
from ..tasks._internal import (
    EnqueueResult,
    TaskErrorClassifier,
    TaskExecutionContext,
    TaskRetryPolicy,
    TaskStatus,
)
from ..tasks.errors import TaskDedupeKeyError, TaskEnqueueValueError
from ._signature import BodyShape
from ._workflow import ForgeStep

if TYPE_CHECKING:
    from ._app import Forge

__all__ = ["ForgeTask"]


def _seconds(duration: timedelta) -> str:
    """``5s``, ``0.25s``, ``90s``: a timeout as the error text names it."""
    return f"{duration.total_seconds():g}s"


class ForgeTask:
    """One declared task kind: its wire name, lane, attempts, retry policy, steps, timeout, body.

    Returned by :meth:`Forge.task`. Enqueue with :meth:`enqueue` (``await``),
    :meth:`enqueue_many`, or :meth:`enqueue_sync` from code without an event loop.
    Calling the handle calls the body itself (handy in unit tests).
    """

    def __init__(
        self,
        forge: Forge,
        fn: Callable[..., Any],
        shape: BodyShape,
        *,
        name: str,
        lane: str | None,
        max_attempts: int,
        retry: TaskRetryPolicy | None,
        steps: tuple[TaskStepSpec, ...],
        timeout: timedelta | None,
        error_classifier: TaskErrorClassifier | None,
    ) -> None:
        self._forge = forge
        self._fn = fn
        self._shape = shape
        self._name = name
        self._lane = lane
        self._max_attempts = max_attempts
        self._retry = retry
        self._steps = steps
        self._timeout = timeout
        self._classifier = error_classifier
        self._result_adapter: pydantic.TypeAdapter[Any] | None = None
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    @property
    def name(self) -> str:
        """The stable wire name stored in each row's ``kind`` column."""
        return self._name

    @property
    def lane(self) -> str | None:
        """The lane it runs in (``None``: the forge's default lane)."""
        return self._lane

    @property
    def max_attempts(self) -> int:
        """Counted attempts a new task of this kind is allowed."""
        return self._max_attempts

    @property
    def retry(self) -> TaskRetryPolicy | None:
        """The backoff between attempts (``None``: the worker's policy)."""
        return self._retry

    @property
    def steps(self) -> tuple[TaskStepSpec, ...]:
        """The visible steps every new task of this kind starts with."""
        return self._steps

    @property
    def timeout(self) -> timedelta | None:
        """How long one execution may run before it fails as retryable (``None``: no limit)."""
        return self._timeout

    @property
    def payload_type(self) -> Any:
        """The payload type read from the body's annotation (``None``: no payload)."""
        return self._shape.payload_type

    @property
    def result_type(self) -> Any:
        """The result type read from the return annotation (``None``: no result)."""
        return self._shape.result_type

    def decode_result(self, text: str) -> Any:
        """A stored result (JSON text) decoded as the body's return type."""
        if self._result_adapter is None:
            self._result_adapter = pydantic.TypeAdapter(self._shape.result_type)
        return self._result_adapter.validate_json(text)

    def spec(self, kind: Any) -> TaskSpec[Forge, Any, Any]:
        """The primitive :class:`~aster_forge.tasks.TaskSpec` the worker runs for ``kind``."""
        fn, shape, timeout = self._fn, self._shape, self._timeout

        async def run(ctx: TaskExecutionContext, forge: Forge, payload: Any) -> Any:
            call = shape.call(fn, ctx, payload, forge.state_or_none)
            if timeout is None:
                return await call
            limit = asyncio.timeout(timeout.total_seconds())
            try:
                async with limit:
                    return await call
            except TimeoutError as exc:
                if not limit.expired():
                    raise  # the body's own timeout, not this one
                # asyncio's TimeoutError has no text: say which limit ran out. Chained,
                # so the stored traceback shows where the body was when it was stopped.
                raise TimeoutError(f"timed out after {_seconds(timeout)}") from exc

        return TaskSpec(
            kind=kind,
            payload_type=shape.payload_type,
            result_type=shape.result_type,
            run=run,
            steps=self._steps,
            error_classifier=self._classifier,
            retry_policy=self._retry,
        )

    async def enqueue(
        self,
        payload: Any = None,
        *,
        dedupe_key: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta = timedelta(0),
        priority: int = 0,
        max_attempts: int | None = None,
        partition: str | None = None,
        dedupe_while: AbstractSet[TaskStatus] | None = None,
        dedupe_for: timedelta | None = None,
        dedupe_replace: bool = False,
        connection: AsyncConnection | AsyncSession | None = None,
    ) -> EnqueueResult:
        """Validate ``payload`` and enqueue one task (a second enqueue with the same
        ``dedupe_key`` returns the existing row, ``created`` false).

        Args:
            payload: An instance of the payload type, or plain data that validates as it.
            dedupe_key: Makes a retried request safe: one row per key.
            dedupe_while: The statuses in which the key's task keeps the key, e.g.
                ``{TaskStatus.PENDING}`` (must include ``PENDING``; default: any status,
                for ever). Once that task is in another status, this enqueue creates a
                new task for the key (the old one keeps its status, without the key).
            dedupe_for: How long after its enqueue the key's task keeps the key.
            dedupe_replace: On a hit whose task is still pending, write this payload
                and run time into it (``created`` false, the updated row returned).
            run_at: When it becomes due (timezone-aware); default now (plus ``delay``).
            delay: Added to now when ``run_at`` is not given.
            priority: Higher is claimed first within the lane.
            max_attempts: Overrides the task's ``max_attempts`` for this row.
            partition: The partition the task belongs to (a tenant, an account): a
                lane's ``partition_limit`` caps the tasks running per partition and
                its claims take partitions in turn.
            connection: Your open SQLAlchemy ``AsyncConnection`` or ``AsyncSession`` on
                the forge's database: the task is written in your transaction and exists
                if and only if it commits (a worker sees it after the commit).

        Raises:
            ForgePayloadError: The payload does not validate; nothing was written.
            TaskDedupeKeyError: The key or its window is invalid (a window without a
                key); nothing was written.
            TaskEnqueueValueError: Another argument is invalid; nothing was written.
            ForgeStateError: ``connection`` was given to an in-memory forge.
        """
        results = await self._forge.enqueue_tasks(
            self,
            [payload],
            dedupe_keys=[_dedupe_key(dedupe_key, dedupe_while, dedupe_for, dedupe_replace)],
            run_at=run_at,
            delay=delay,
            priority=priority,
            max_attempts=max_attempts,
            partition=partition,
            connection=connection,
        )
        return results[0]

    async def enqueue_many(
        self,
        payloads: Iterable[Any],
        *,
        run_at: datetime | None = None,
        delay: timedelta = timedelta(0),
        priority: int = 0,
        max_attempts: int | None = None,
        partition: str | None = None,
        connection: AsyncConnection | AsyncSession | None = None,
    ) -> list[EnqueueResult]:
        """Validate every payload, then enqueue them all in one store call (with
        ``connection``, in your transaction: see :meth:`enqueue`).

        Raises:
            ForgePayloadError: A payload does not validate; nothing was written.
            ForgeStateError: ``connection`` was given to an in-memory forge.
        """
        items = list(payloads)
        return await self._forge.enqueue_tasks(
            self,
            items,
            dedupe_keys=[None] * len(items),
            run_at=run_at,
            delay=delay,
            priority=priority,
            max_attempts=max_attempts,
            partition=partition,
            connection=connection,
        )

    def step(
        self,
        payload: Any = None,
        *,
        after: Iterable[ForgeStep] = (),
        run_anyway: bool | Iterable[ForgeStep] = False,
        priority: int = 0,
        max_attempts: int | None = None,
    ) -> ForgeStep:
        """Validate ``payload`` into one step of a workflow (written by
        :meth:`Forge.workflow`), waiting for the steps of ``after``.

        Args:
            payload: An instance of the payload type, or plain data that validates as it.
            after: The steps that must finish before this one is due.
            run_anyway: ``True``, or the steps of ``after`` whose failure or cancel
                still lets this one run; by default any of them ending so cancels it.
            priority: Higher is claimed first within the lane.
            max_attempts: Overrides the task's ``max_attempts`` for this row.

        Raises:
            ForgePayloadError: The payload does not validate.
            TaskEnqueueValueError: ``run_anyway`` names a step that is not in ``after``.
        """
        waits = tuple(after)
        anyway = frozenset(
            waits if run_anyway is True else () if run_anyway is False else run_anyway
        )
        if not anyway <= set(waits):
            raise TaskEnqueueValueError(
                f"task {self._name!r}: run_anyway names a step that is not in after"
            )
        [request] = self._forge._requests(
            self,
            [payload],
            dedupe_keys=[None],
            run_at=None,
            delay=timedelta(0),
            priority=priority,
            max_attempts=max_attempts,
        )
        return ForgeStep(self, request, waits, anyway)

    def enqueue_sync(
        self,
        payload: Any = None,
        *,
        dedupe_key: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta = timedelta(0),
        priority: int = 0,
        max_attempts: int | None = None,
        partition: str | None = None,
        dedupe_while: AbstractSet[TaskStatus] | None = None,
        dedupe_for: timedelta | None = None,
        dedupe_replace: bool = False,
    ) -> EnqueueResult:
        """:meth:`enqueue` for synchronous code (Django, Flask, scripts) with no event loop.

        The payload is validated in the calling thread; the task is sent from the
        forge's synchronous-enqueue thread (one event loop and a kept connection for
        every synchronous caller of the process, closed by :meth:`Forge.aclose` or at
        interpreter exit).

        Raises:
            ForgeStateError: Called from a thread that runs an event loop (use ``await
                enqueue(...)`` there).
            ForgePayloadError: The payload does not validate; nothing was written.
        """
        results = self._forge.enqueue_tasks_sync(
            self,
            [payload],
            dedupe_keys=[_dedupe_key(dedupe_key, dedupe_while, dedupe_for, dedupe_replace)],
            run_at=run_at,
            delay=delay,
            priority=priority,
            max_attempts=max_attempts,
            partition=partition,
        )
        return results[0]

    def enqueue_many_sync(
        self,
        payloads: Iterable[Any],
        *,
        run_at: datetime | None = None,
        delay: timedelta = timedelta(0),
        priority: int = 0,
        max_attempts: int | None = None,
        partition: str | None = None,
    ) -> list[EnqueueResult]:
        """:meth:`enqueue_many` for synchronous code: every payload is validated in the
        calling thread, then all are written in one store call (see :meth:`enqueue_sync`).

        Raises:
            ForgeStateError: Called from a thread that runs an event loop.
            ForgePayloadError: A payload does not validate; nothing was written.
        """
        items = list(payloads)
        return self._forge.enqueue_tasks_sync(
            self,
            items,
            dedupe_keys=[None] * len(items),
            run_at=run_at,
            delay=delay,
            priority=priority,
            max_attempts=max_attempts,
            partition=partition,
        )

    def __call__(self, *args: Any) -> Any:
        """Call the body directly (no store, no worker), e.g. in a unit test."""
        return self._fn(*args)

    def __repr__(self) -> str:
        return f"ForgeTask(name={self._name!r}, lane={self._lane!r})"


def _dedupe_key(
    key: str | None,
    held_while: AbstractSet[TaskStatus] | None,
    held_for: timedelta | None,
    replace: bool,
) -> str | TaskDedupeKey | None:
    """``key`` with the enqueue's dedupe window, when it has one."""
    if held_while is None and held_for is None and not replace:
        return key
    if key is None:
        raise TaskDedupeKeyError("dedupe_while, dedupe_for and dedupe_replace need a dedupe_key")
    return TaskDedupeKey(key, held_while=held_while, held_for=held_for, replace=replace)
