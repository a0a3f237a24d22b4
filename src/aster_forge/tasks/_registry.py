"""The task registry: which spec runs each kind, and which lane each kind runs in."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from ._retry import TaskErrorClassifier
from ._spec import ErasedTaskSpec, TaskSpec, task_kind_label
from .errors import TaskRegistryError

__all__ = ["TaskRegistry"]

StateT = TypeVar("StateT")
KindT = TypeVar("KindT", bound=enum.Enum)
LaneT = TypeVar("LaneT", bound=enum.Enum)


class TaskRegistry(Generic[StateT, KindT, LaneT]):
    """Maps each member of the product's kind enum to one spec and one lane.

    Declare it once at import time, register every spec and lane, then call
    :meth:`validate` (a product test should too). ``validate`` checks both directions:
    every kind has exactly one spec and exactly one lane, and every registered kind and
    lane is a member of the declared enums. After a successful ``validate`` the registry
    is frozen.

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
        kind: type[KindT],
        lane: type[LaneT],
        state: type[StateT] | None = None,
        error_classifier: TaskErrorClassifier | None = None,
    ) -> None:
        """Declare the registry's enums.

        Args:
            kind: The product's task kind enum.
            lane: The product's lane enum.
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
        self._frozen = False

    @property
    def kind_type(self) -> type[KindT]:
        """The kind enum."""
        return self._kind_type

    @property
    def lane_type(self) -> type[LaneT]:
        """The lane enum."""
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
        members = list(self._kind_type)
        for kind, specs in self._specs.items():
            if not isinstance(kind, self._kind_type):
                problems.append(
                    f"spec registered for {kind!r}, which is not a {self._kind_type.__name__}"
                )
            elif len(specs) > 1:
                problems.append(f"task kind {_name(kind)} is claimed by {len(specs)} specs")
        lanes_of: dict[Any, list[Any]] = {}
        for lane, kinds in self._lanes.items():
            if not isinstance(lane, self._lane_type):
                problems.append(f"lane {lane!r} is not a {self._lane_type.__name__}")
            for kind in kinds:
                if not isinstance(kind, self._kind_type):
                    problems.append(
                        f"lane {_name(lane)} lists {kind!r}, which is not a "
                        f"{self._kind_type.__name__}"
                    )
                    continue
                lanes_of.setdefault(kind, []).append(lane)
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
        self._frozen = True
        return self

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
        """Every kind, in enum order."""
        return tuple(self._kind_type)

    def lanes(self) -> tuple[LaneT, ...]:
        """Every lane, in enum order."""
        return tuple(self._lane_type)

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
        return (
            f"TaskRegistry(kind={self._kind_type.__name__}, lane={self._lane_type.__name__}, "
            f"specs={len(self._specs)}, validated={self._frozen})"
        )


def _name(member: object) -> str:
    if isinstance(member, enum.Enum):
        return f"{type(member).__name__}.{member.name}"
    return repr(member)
