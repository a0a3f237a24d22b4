"""Conformance checks for a task store that validates enqueues against a registry."""

from __future__ import annotations

import enum
import json
import math
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, ClassVar

from ..tasks import (
    BackgroundTaskStore,
    NewTask,
    TaskInvalidValueError,
    TaskPayloadError,
    TaskRegistry,
    TaskSpec,
    TaskStepSpec,
)
from ..tasks._internal import TaskExecutionContext
from ..tasks.errors import TaskEnqueueValueError, TaskKindNotRegisteredError, TaskLaneMismatchError
from ._conformance import StoreConformance
from ._dedupe_window_checks import DedupeWindowChecks

__all__ = ["TaskEnqueueConformance"]

_LONG = timedelta(minutes=10)


class _Kind(enum.StrEnum):
    PLAIN = "conformance-plain"
    STEPPED = "conformance-stepped"


class _Lane(enum.StrEnum):
    PLAIN = "conformance-plain-lane"
    STEPPED = "conformance-stepped-lane"


async def _body(ctx: TaskExecutionContext, state: object, payload: dict[str, float]) -> None:
    return None


def conformance_registry() -> TaskRegistry[Any, Any, Any]:
    """The registry the checks enqueue against: a plain kind and a kind with two steps."""
    registry: TaskRegistry[Any, _Kind, _Lane] = TaskRegistry(kind=_Kind, lane=_Lane)
    registry.register(TaskSpec(_Kind.PLAIN, dict[str, float], None, _body))
    steps = (TaskStepSpec("fetch", "Fetch"), TaskStepSpec("save", "Save"))
    registry.register(TaskSpec(_Kind.STEPPED, dict[str, float], None, _body, steps=steps))
    registry.lane(_Lane.PLAIN, [_Kind.PLAIN])
    registry.lane(_Lane.STEPPED, [_Kind.STEPPED])
    return registry.validate()


class TaskEnqueueConformance(DedupeWindowChecks, StoreConformance[BackgroundTaskStore]):
    """Checks every store built with ``registry=`` must pass (any backend, any product store).

    The store validates every enqueue against the registry before writing: an unknown
    kind or a lane that is not the kind's own is a typed error and nothing is written
    (a batch with one bad task is refused whole); the spec's steps are filled in when
    ``steps_json`` is absent. Bad text (NUL, lone surrogates, NaN) and an oversized
    claim limit are the same typed errors on every store. Dedupe windows
    (:class:`~aster_forge.tasks.TaskDedupeKey`'s ``held_while``, ``held_for`` and
    ``replace``) hold, release and replace as declared, in batches and under racing
    enqueues.

    Args:
        make_store: Called with :attr:`registry`; returns a store that validates
            against it (instances must share state, e.g. one database).
        advance: Moves the stores' time (see :class:`StoreConformance`).

    Example:
        >>> from aster_forge.testing import InMemoryTaskStore, ManualClock
        >>> clock = ManualClock()
        >>> suite = TaskEnqueueConformance(
        ...     lambda registry: InMemoryTaskStore(clock, registry=registry),
        ...     advance=clock.advance,
        ... )
        >>> "check_unknown_kind_is_refused" in suite.CHECKS
        True
    """

    CHECKS: ClassVar[tuple[str, ...]] = (
        "check_unknown_kind_is_refused",
        "check_foreign_lane_refuses_the_whole_batch",
        "check_steps_filled_from_the_spec",
        "check_new_task_round_trips",
        "check_bad_text_is_refused_alike",
        "check_claim_limit_is_bounded",
        *DedupeWindowChecks.WINDOW_CHECKS,
    )

    _window_kind = _Kind.PLAIN.value
    _window_lane = _Lane.PLAIN.value

    registry: TaskRegistry[Any, Any, Any]
    """The registry the checks' stores validate against."""

    def __init__(
        self,
        make_store: Callable[[TaskRegistry[Any, Any, Any]], BackgroundTaskStore],
        *,
        advance: Callable[[timedelta], Awaitable[None]],
    ) -> None:
        self.registry = conformance_registry()
        registry = self.registry
        super().__init__(lambda: make_store(registry), advance=advance)

    async def _count(self, store: BackgroundTaskStore) -> int:
        total = 0
        for lane in _Lane:
            total += len((await store.list_tasks(lane=lane.value, limit=1000)).items)
        return total

    @staticmethod
    def _plain(**kw: Any) -> NewTask:
        return NewTask(_Kind.PLAIN, _Lane.PLAIN, payload_json='{"x": 1.0}', **kw)

    async def check_unknown_kind_is_refused(self) -> None:
        """A kind the registry does not know is refused before anything is written."""
        store = self._make_store()
        before = await self._count(store)
        try:
            await store.enqueue(NewTask("conformance-ghost", _Lane.PLAIN))
        except TaskKindNotRegisteredError:
            pass
        else:
            raise AssertionError("an unknown kind must be refused")
        assert await self._count(store) == before, "a refused enqueue wrote a row"

    async def check_foreign_lane_refuses_the_whole_batch(self) -> None:
        """A kind on another kind's lane is refused; its batch writes nothing at all."""
        store = self._make_store()
        before = await self._count(store)
        wrong = NewTask(_Kind.PLAIN, _Lane.STEPPED, payload_json='{"x": 1.0}')
        try:
            await store.enqueue_many([self._plain(), self._plain(), wrong])
        except TaskLaneMismatchError as exc:
            assert exc.expected_lane == _Lane.PLAIN.value
        else:
            raise AssertionError("a task on a foreign lane must be refused")
        assert await self._count(store) == before, "a refused batch wrote rows"

    async def check_steps_filled_from_the_spec(self) -> None:
        """A stepped kind enqueued without steps gets the spec's steps; given ones stay."""
        store = self._make_store()
        key = uuid.uuid4().hex
        bare = NewTask(_Kind.STEPPED, _Lane.STEPPED, payload_json="{}", dedupe_key=key)
        record = (await store.enqueue(bare)).record
        assert record.steps_json is not None, "steps were not filled from the spec"
        assert [s["key"] for s in json.loads(record.steps_json)] == ["fetch", "save"]
        own = NewTask(_Kind.STEPPED, _Lane.STEPPED, payload_json="{}", steps_json="[]")
        assert (await store.enqueue(own)).record.steps_json == "[]"
        plain = (await store.enqueue(self._plain())).record
        assert plain.steps_json is None, "a kind without steps must keep steps_json NULL"

    async def check_new_task_round_trips(self) -> None:
        """``registry.new_task`` builds what the store accepts, on the kind's lane."""
        store = self._make_store()
        task = self.registry.new_task(_Kind.STEPPED, {"x": 2.5}, priority=3)
        record = (await store.enqueue(task)).record
        assert (record.kind, record.lane, record.priority) == (
            _Kind.STEPPED.value,
            _Lane.STEPPED.value,
            3,
        )
        assert json.loads(record.payload_json) == {"x": 2.5}
        assert record.steps_json is not None

    async def check_bad_text_is_refused_alike(self) -> None:
        """NUL, lone surrogates and NaN are typed errors before any I/O; nothing written."""
        store = self._make_store()
        before = await self._count(store)
        builds: list[Callable[[], NewTask]] = [
            lambda: NewTask("conformance-\x00", _Lane.PLAIN),
            lambda: NewTask(_Kind.PLAIN, "lane\x00"),
            lambda: NewTask(_Kind.PLAIN, _Lane.PLAIN, payload_json='"\ud800"'),
            lambda: NewTask(_Kind.PLAIN, _Lane.PLAIN, payload_json='{"x": NaN}'),
            lambda: self._plain(dedupe_key="key\x00"),
            lambda: self._plain(dedupe_key="key\udfff"),
        ]
        for build in builds:
            try:
                await store.enqueue(build())
            except TaskInvalidValueError:
                continue
            raise AssertionError("bad text must be refused with a typed error")
        for payload in ({"x": math.nan}, {"x": math.inf}, {"x\ud800": 1.0}):
            try:
                self.registry.new_task(_Kind.PLAIN, payload)
            except TaskPayloadError:
                continue
            raise AssertionError("a payload that is not storable JSON must be refused")
        assert await self._count(store) == before, "refused input wrote rows"
        try:
            NewTask(_Kind.PLAIN, _Lane.PLAIN, steps_json="[Infinity]")
        except TaskEnqueueValueError:
            return
        raise AssertionError("steps_json with Infinity must be refused")

    async def check_claim_limit_is_bounded(self) -> None:
        """A claim limit beyond 32 bits is a typed error on every store."""
        store = self._make_store()
        try:
            await store.claim_due_for_lane(_Lane.PLAIN.value, 10**12, "worker", _LONG)
        except TaskInvalidValueError:
            return
        raise AssertionError("claim(limit=10**12) must be refused")
