"""The task registry: which spec runs each kind, and which lane each kind runs in."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar, cast

from .. import _tracing
from ._dedupe import TaskDedupeKey
from ._records import _DEFAULT_MAX_ATTEMPTS, NewTask, encoded_new_task
from ._retry import TaskErrorClassifier
from ._spec import ErasedTaskSpec, TaskSpec, task_kind_label
from .errors import TaskKindNotRegisteredError, TaskLaneMismatchError, TaskRegistryError

__all__ = ["TaskRegistry"]

StateT = TypeVar("StateT")
KindT = TypeVar("KindT", bound=enum.Enum | str)
LaneT = TypeVar("LaneT", bound=enum.Enum | str)


class TaskRegistry(Generic[StateT, KindT, LaneT]):
    """Maps each task kind to one spec and one lane.

    Kinds and lanes are the product's own: plain ``str`` names, or members of enums the
    product declares with ``kind=`` and ``lane=``. Declare the registry once at import
    time, register every spec and lane, then call :meth:`validate` (a product test
    should too). ``validate`` checks both directions: every registered kind has exactly
    one spec and exactly one lane and, with enums declared, every member of the kind enum
    is registered and every kind and lane is a member. After a successful ``validate``
    the registry is frozen.

    Example:
        >>> import enum
        >>> class Kind(enum.Enum):
        ...     RESIZE = "resize"
        >>> class Lane(enum.Enum):
        ...     DEFAULT = "default"
        >>> registry = TaskRegistry(kind=Kind, lane=Lane)
        >>> async def resize(ctx, state, payload: int) -> int:
        ...     return payload
        >>> registry.register(
        ...     TaskSpec(kind=Kind.RESIZE, payload_type=int, result_type=int, run=resize)
        ... ).kind
        <Kind.RESIZE: 'resize'>
        >>> registry.lane(Lane.DEFAULT, [Kind.RESIZE])
        >>> registry.validate().lane_of(Kind.RESIZE)
        <Lane.DEFAULT: 'default'>
    """

    def __init__(
        self,
        *,
        kind: type[KindT] | None = None,
        lane: type[LaneT] | None = None,
        state: type[StateT] | None = None,
        error_classifier: TaskErrorClassifier | None = None,
    ) -> None:
        """Declare the registry's kinds and lanes.

        Args:
            kind: The product's task kind enum; ``None``: kinds are ``str`` names.
            lane: The product's lane enum; ``None``: lanes are ``str`` names.
            state: The application state type task bodies receive (documentation/typing).
            error_classifier: The fallback classifier for every kind (a spec's own
                classifier is consulted first).
        """
        self._kind_type = kind
        self._lane_type = lane
        self._state_type = state
        self._classifier = error_classifier
        self._specs: dict[KindT, list[TaskSpec[StateT, Any, Any]]] = {}
        self._lanes: dict[LaneT, list[KindT]] = {}
        self._erased: dict[KindT, ErasedTaskSpec[StateT]] = {}
        self._lane_of: dict[KindT, LaneT] = {}
        # wire value -> (erased spec, lane wire value, the wire value), for enqueue.
        self._by_wire: dict[str, tuple[ErasedTaskSpec[StateT], str, str]] = {}
        self._frozen = False

    @property
    def kind_type(self) -> type[KindT] | None:
        """The kind enum (``None`` when kinds are ``str`` names)."""
        return self._kind_type

    @property
    def lane_type(self) -> type[LaneT] | None:
        """The lane enum (``None`` when lanes are ``str`` names)."""
        return self._lane_type

    @property
    def validated(self) -> bool:
        """Whether :meth:`validate` succeeded (the registry is then frozen)."""
        return self._frozen

    def register(self, spec: TaskSpec[StateT, Any, Any]) -> TaskSpec[StateT, Any, Any]:
        """Register ``spec`` for ``spec.kind`` and return it (usable as an expression).

        Raises:
            TaskRegistryError: When the registry is already validated.
        """
        self._check_open()
        self._specs.setdefault(spec.kind, []).append(spec)
        return spec

    def lane(self, lane: LaneT, kinds: Iterable[KindT]) -> None:
        """Assign ``kinds`` to ``lane`` (may be called once per lane, or several times).

        Raises:
            TaskRegistryError: When the registry is already validated.
        """
        self._check_open()
        self._lanes.setdefault(lane, []).extend(kinds)

    def problems(self) -> list[str]:
        """Every inconsistency :meth:`validate` would report (empty when consistent)."""
        problems: list[str] = []
        for kind, specs in self._specs.items():
            if not _member(kind, self._kind_type):
                problems.append(
                    f"spec registered for {kind!r}, which is not {_what(self._kind_type)}"
                )
            elif len(specs) > 1:
                problems.append(f"task kind {_name(kind)} is claimed by {len(specs)} specs")
        lanes_of: dict[Any, list[Any]] = {}
        for lane, kinds in self._lanes.items():
            if not _member(lane, self._lane_type):
                problems.append(f"lane {lane!r} is not {_what(self._lane_type)}")
            for kind in kinds:
                if not _member(kind, self._kind_type):
                    problems.append(
                        f"lane {_name(lane)} lists {kind!r}, which is not {_what(self._kind_type)}"
                    )
                    continue
                lanes_of.setdefault(kind, []).append(lane)
        members: list[Any] = _members(self._kind_type)
        members += [kind for kind in [*self._specs, *lanes_of] if kind not in members]
        for kind in members:
            if kind not in self._specs:
                problems.append(f"task kind {_name(kind)} has no spec")
            kind_lanes = lanes_of.get(kind, [])
            if not kind_lanes:
                problems.append(f"task kind {_name(kind)} is in no lane")
            elif len(kind_lanes) > 1:
                listed = ", ".join(_name(lane) for lane in kind_lanes)
                problems.append(f"task kind {_name(kind)} is in more than one lane ({listed})")
        return problems

    def validate(self) -> TaskRegistry[StateT, KindT, LaneT]:
        """Check the registry both ways, then freeze it.

        Returns:
            The registry itself, so ``REGISTRY = TaskRegistry(...)`` chains can end with it.

        Raises:
            TaskRegistryError: Listing every inconsistency found.
        """
        problems = self.problems()
        if problems:
            raise TaskRegistryError("task registry is inconsistent: " + "; ".join(problems))
        for kind, specs in self._specs.items():
            self._erased[kind] = specs[0].erase(fallback_classifier=self._classifier)
        for lane, kinds in self._lanes.items():
            for kind in kinds:
                self._lane_of[kind] = lane
        for kind, erased in self._erased.items():
            wire, lane_wire = wire_of(kind), wire_of(self._lane_of[kind])
            if isinstance(wire, str) and isinstance(lane_wire, str):
                self._by_wire[wire] = (erased, lane_wire, wire)
        self._frozen = True
        return self

    def new_task(
        self,
        kind: KindT | str,
        payload: object,
        *,
        dedupe_key: TaskDedupeKey | str | None = None,
        run_at: datetime | None = None,
        delay: timedelta = timedelta(0),
        priority: int = 0,
        max_attempts: int | None = None,
        extra: Mapping[str, Any] | None = None,
        partition: str | None = None,
    ) -> NewTask:
        """Build a validated :class:`~aster_forge.tasks.NewTask` for ``kind``.

        The payload is validated and encoded by the kind's codec (a payload object, or
        anything that validates into one, such as a dict); the lane is the kind's own;
        ``steps_json`` holds the spec's initial steps; ``trace_context`` the current
        OpenTelemetry context while tracing is on (each attempt's span links to it).

        Args:
            kind: The kind (an enum member or its wire value).
            payload: The payload.
            dedupe_key: A second enqueue with this key returns the existing row.
            run_at: When it becomes due (aware); ``None`` means now plus ``delay``.
            delay: Added to "now" when ``run_at`` is ``None``.
            priority: Higher is claimed first within the lane.
            max_attempts: Counted attempts allowed (``None``: the kind's
                ``retry_policy.max_attempts``, else :class:`NewTask`'s default).
            extra: Values for columns the product added to the table.
            partition: The task's partition (see :attr:`NewTask.partition`).

        Raises:
            TaskKindNotRegisteredError: When ``kind`` is not registered.
            TaskPayloadError: When the payload does not validate or encode; the message
                names the kind and the fields, never their values.
            TaskEnqueueValueError: When another field is invalid.
            TaskRegistryError: When the registry is not validated.
        """
        self._check_frozen()
        # A str-valued enum member equals (and hashes as) its value: no .value lookup.
        entry = self._by_wire.get(kind) if isinstance(kind, str) else None
        if entry is None:
            wire = kind.value if isinstance(kind, enum.Enum) else kind
            entry = self._by_wire.get(wire) if isinstance(wire, str) else None
            if entry is None:
                raise TaskKindNotRegisteredError(str(wire))
        erased, lane, wire = entry
        spec = erased.spec
        if max_attempts is None:
            # The kind's own budget, else NewTask's default.
            policy = spec.retry_policy
            max_attempts = policy.max_attempts if policy is not None else _DEFAULT_MAX_ATTEMPTS
        # The wire values are registered ones and the payload and steps our encoders'
        # output (already checked): only the other fields are checked again.
        return encoded_new_task(
            wire,
            lane,
            spec.encode_payload(spec.validate_payload(payload)),
            erased.initial_steps_json(),
            run_at=run_at,
            delay=delay,
            priority=priority,
            max_attempts=max_attempts,
            dedupe_key=dedupe_key,
            extra=dict(extra) if extra is not None else {},
            trace_context=_tracing.trace_context(),
            partition=partition,
        )

    def check_new_task(self, task: NewTask) -> NewTask:
        """Validate an enqueue request against the registry (what a validating store does).

        Returns:
            ``task``, or a copy with the spec's initial steps when it has none.

        Raises:
            TaskKindNotRegisteredError: When its kind is not registered.
            TaskLaneMismatchError: When its lane is not the kind's own.
            TaskRegistryError: When the registry is not validated.
        """
        self._check_frozen()
        entry = self._by_wire.get(task.kind)
        if entry is None:
            raise TaskKindNotRegisteredError(task.kind)
        erased, lane, _ = entry
        if task.lane != lane:
            raise TaskLaneMismatchError(task.kind, task.lane, lane)
        if task.steps_json is None and erased.steps:
            return dataclasses.replace(task, steps_json=erased.initial_steps_json())
        return task

    def spec_for(self, kind: KindT) -> ErasedTaskSpec[StateT]:
        """The erased spec the executor runs for ``kind``.

        Raises:
            TaskRegistryError: When the registry is not validated or ``kind`` is unknown.
        """
        self._check_frozen()
        try:
            return self._erased[kind]
        except KeyError:
            raise TaskRegistryError(f"no task spec registered for {kind!r}") from None

    def typed_spec_for(self, kind: KindT) -> TaskSpec[StateT, Any, Any]:
        """The typed spec for ``kind`` (for enqueue-side payload encoding and schemas)."""
        return self.spec_for(kind).spec

    def lane_of(self, kind: KindT) -> LaneT:
        """The lane ``kind`` runs in.

        Raises:
            TaskRegistryError: When the registry is not validated or ``kind`` is unknown.
        """
        self._check_frozen()
        try:
            return self._lane_of[kind]
        except KeyError:
            raise TaskRegistryError(f"task kind {kind!r} is in no lane") from None

    def kinds_of(self, lane: LaneT) -> tuple[KindT, ...]:
        """The kinds that run in ``lane``, in registration order (empty for an unused lane)."""
        self._check_frozen()
        return tuple(self._lanes.get(lane, ()))

    def kinds(self) -> tuple[KindT, ...]:
        """Every kind: in enum order, or in registration order for ``str`` kinds."""
        if self._kind_type is not None:
            return tuple(_members(self._kind_type))
        return tuple(self._specs)

    def lanes(self) -> tuple[LaneT, ...]:
        """Every lane: in enum order, or in declaration order for ``str`` lanes."""
        if self._lane_type is not None:
            return tuple(_members(self._lane_type))
        return tuple(self._lanes)

    def payload_json_schemas(self) -> dict[str, dict[str, Any]]:
        """The payload JSON Schema of every kind, keyed by the kind's label."""
        self._check_frozen()
        return {
            task_kind_label(kind): erased.spec.payload_json_schema()
            for kind, erased in self._erased.items()
        }

    def _check_open(self) -> None:
        if self._frozen:
            raise TaskRegistryError("task registry is validated and frozen; register earlier")

    def _check_frozen(self) -> None:
        if not self._frozen:
            raise TaskRegistryError("task registry is not validated; call validate() first")

    def __repr__(self) -> str:
        kind = "str" if self._kind_type is None else self._kind_type.__name__
        lane = "str" if self._lane_type is None else self._lane_type.__name__
        return (
            f"TaskRegistry(kind={kind}, lane={lane}, "
            f"specs={len(self._specs)}, validated={self._frozen})"
        )


def _name(member: object) -> str:
    if isinstance(member, enum.Enum):
        return f"{type(member).__name__}.{member.name}"
    return repr(member)


def _member(value: object, enum_type: type[Any] | None) -> bool:
    """A member of the declared enum, or a ``str`` name when none is declared."""
    if enum_type is None:
        return isinstance(value, str) and not isinstance(value, enum.Enum) and bool(value)
    return isinstance(value, enum_type)


def _what(enum_type: type[Any] | None) -> str:
    return "a non-empty str" if enum_type is None else f"a {enum_type.__name__}"


def wire_of(member: object) -> object:
    """The stored spelling of a kind or lane: an enum member's value, a ``str`` itself."""
    return member.value if isinstance(member, enum.Enum) else member


def _members(enum_type: type[Any] | None) -> list[Any]:
    return [] if enum_type is None else list(cast("Iterable[Any]", enum_type))
