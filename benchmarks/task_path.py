"""Which modules of ``aster_forge.tasks`` one task's path enters, worker to stored outcome.

Runs one task through a :class:`~aster_forge.tasks.TaskWorker` on the in-memory store and
records every Python call (``sys.setprofile``) from the claim to the final write, leaving
out the store's own code and what it calls. Reports:

* the ``tasks/`` modules entered at all (including helpers such as steps and retry);
* the modules the store object travels through (frames holding the store in a local);
* the number of times the path returns to a ``tasks/`` module it had left;
* the lines of the modules the worker-core line budget counts (``_dispatch*``,
  ``_execution``, ``_heartbeat``, ``_completion``, and ``_worker``, which holds what
  ``_dispatch`` and ``_dispatch_worker`` held when the budget was set: the drain, the
  claims and the loop) and of ``_seed_api`` (the seed's entry points, off the worker's
  path) beside them, by kind: code,
  docstrings of public and of private symbols, blank lines and comments. Public
  docstrings and the formatter's blank lines are what the house style requires, so
  code plus those two is the least the same code can be written in;
* the statement floor: the same statements laid out by ``ruff format`` (the project's
  settings) with a one-line docstring per public symbol and module, no other docstring,
  no comment and no optional blank line. A budget below it needs fewer statements.

Run: ``python -m benchmarks.task_path``.
"""

from __future__ import annotations

import ast
import asyncio
import enum
import inspect
import itertools
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import BaseModel

from aster_forge import tasks
from aster_forge.tasks import (
    ClaimedTaskExecutionConfig,
    NewTask,
    TaskDispatcher,
    TaskExecutionContext,
    TaskLaneConfig,
    TaskRegistry,
    TaskSpec,
    TaskStatus,
    drain_dispatcher,
)
from aster_forge.testing import InMemoryTaskStore

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "src" / "aster_forge" / "tasks"
#: The modules the worker-core line budget counts. ``_worker`` holds the drain, the
#: claims and the loop, which ``_dispatch`` and ``_dispatch_worker`` held when the
#: budget was set (2,040 lines then, in the six modules these five replace).
BUDGETED = ("_dispatch*.py", "_execution.py", "_heartbeat.py", "_completion.py", "_worker.py")
#: Shown beside them, not counted: the seed's entry points over the worker.
BESIDE = ("_seed_api.py",)
KINDS = ("code", "public docstrings", "private docstrings", "blank", "comments")


class Kind(enum.StrEnum):
    """The one kind."""

    WORK = "work"


class Lane(enum.StrEnum):
    """The one lane."""

    DEFAULT = "default"


class Payload(BaseModel):
    """The payload."""

    n: int


async def _body(ctx: TaskExecutionContext, state: None, payload: Payload) -> int:
    return payload.n


@dataclass(frozen=True, slots=True)
class TaskPath:
    """What one traced task's path entered.

    Attributes:
        entered: The ``tasks/`` modules entered, in first-entered order.
        carried: The modules the store object travelled through.
        reentries: How often the path returned to a ``tasks/`` module it had left.
    """

    entered: tuple[str, ...]
    carried: frozenset[str]
    reentries: int


async def trace_one_task() -> TaskPath:
    """Run one task from the claim to its stored outcome and trace the modules it enters."""
    registry: TaskRegistry[None, Kind, Lane] = TaskRegistry(kind=Kind, lane=Lane, state=type(None))
    registry.register(TaskSpec(Kind.WORK, Payload, int, _body))
    registry.lane(Lane.DEFAULT, [Kind.WORK])
    registry.validate()
    store = InMemoryTaskStore()
    await store.enqueue(NewTask(kind=Kind.WORK, lane=Lane.DEFAULT, payload_json='{"n": 1}'))
    lanes = [TaskLaneConfig(Lane.DEFAULT, 1)]
    config = ClaimedTaskExecutionConfig(
        state=None, registry=registry, lease_ttl=timedelta(seconds=30)
    )
    # The same script measures an older tree (``--base``-style copies) through the seed API.
    worker_type = getattr(tasks, "TaskWorker", None)
    if worker_type is not None:
        worker = worker_type(store, lanes=lanes, execution=config)
        drain = worker.drain
    else:
        worker = TaskDispatcher(lanes, config)

        async def drain() -> object:
            return await drain_dispatcher(store, worker)

    entered: list[str] = []
    carried: set[str] = set()
    inside_store: list[FrameType] = []
    store_file = inspect.getsourcefile(type(store))

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        filename = frame.f_code.co_filename
        if filename == store_file:
            # The store's own code (and whatever it calls) is not the worker's path.
            if event == "call":
                inside_store.append(frame)
            elif event == "return" and inside_store and inside_store[-1] is frame:
                inside_store.pop()
            return
        if event != "call" or inside_store:
            return
        path = Path(filename)
        if path.parent != TASKS:
            return
        entered.append(path.stem)
        owner = frame.f_locals.get("self")
        if any(value is store for value in frame.f_locals.values()) or (
            owner is not None and getattr(owner, "_store", None) is store
        ):
            carried.add(path.stem)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        await drain()  # claim -> execution -> fenced write, then joined
        await worker.join()
    finally:
        sys.setprofile(previous)
    (row,) = store.all_tasks()
    assert row.status is TaskStatus.SUCCEEDED, row
    runs = [stem for i, stem in enumerate(entered) if i == 0 or entered[i - 1] != stem]
    return TaskPath(
        entered=tuple(dict.fromkeys(entered)),
        carried=frozenset(carried),
        reentries=sum(count - 1 for count in Counter(runs).values()),
    )


async def main() -> None:
    """Trace one task and print the modules it enters."""
    path = await trace_one_task()
    print(f"tasks/ modules entered ({len(path.entered)}): {', '.join(path.entered)}")
    carried = ", ".join(sorted(path.carried))
    print(f"modules the store travels through ({len(path.carried)}): {carried}")
    print(f"returns to a tasks/ module already left: {path.reentries}")


def line_kinds(path: Path) -> dict[str, int]:
    """Count ``path``'s lines by kind (see :data:`KINDS`); attribute docstrings are public."""
    source = path.read_text()
    lines = source.splitlines()
    kinds = ["code"] * len(lines)
    for index, line in enumerate(lines):
        text = line.strip()
        if not text:
            kinds[index] = "blank"
        elif text.startswith("#"):
            kinds[index] = "comments"

    def mark(statement: ast.stmt, kind: str) -> None:
        value = getattr(statement, "value", None)
        constant = isinstance(value, ast.Constant) and isinstance(value.value, str)
        if isinstance(statement, ast.Expr) and constant:
            end = statement.end_lineno or statement.lineno
            kinds[statement.lineno - 1 : end] = [kind] * (end - statement.lineno + 1)

    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list) or not body:
            continue
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            name = getattr(node, "name", "")
            private = name.startswith("_") and not name.startswith("__")
            mark(body[0], "private docstrings" if private else "public docstrings")
        for before, statement in itertools.pairwise(body):
            if isinstance(before, ast.Assign | ast.AnnAssign):
                mark(statement, "public docstrings")
    return {kind: kinds.count(kind) for kind in KINDS}


def budgeted_files() -> list[Path]:
    """The modules the worker-core line budget counts (see :data:`BUDGETED`)."""
    return sorted({path for pattern in BUDGETED for path in TASKS.glob(pattern)})


def statement_floor(path: Path) -> int:
    """The lines ``path``'s statements take when the formatter writes them and nothing else.

    Each docstring of a public symbol (and the module's) becomes one line, every other
    docstring, every comment and every optional blank line goes, and ``ruff format``
    with the project's settings lays out what is left.
    """
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        definition = isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        public = isinstance(node, ast.Module) or (
            definition and not getattr(node, "name", "_").startswith("_")
        )
        kept: list[ast.stmt] = []
        for index, statement in enumerate(body):
            value = getattr(statement, "value", None)
            text = isinstance(value, ast.Constant) and isinstance(value.value, str)
            if isinstance(statement, ast.Expr) and text:
                if index == 0 and public:
                    kept.append(ast.Expr(ast.Constant("Doc.")))
                continue
            kept.append(statement)
        body[:] = kept or [ast.Pass()]
    config = str(ROOT / "pyproject.toml")
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--config", config, "--stdin-filename", path.name],
        input=ast.unparse(tree) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    return len(formatted.stdout.splitlines())


def line_budget() -> None:
    """Print the budgeted modules' lines by kind, their sum, and those of :data:`BESIDE`."""
    files = budgeted_files()
    total = dict.fromkeys(KINDS, 0)
    print("| module | lines | " + " | ".join(KINDS) + " |")
    print("|---|--:|" + "--:|" * len(KINDS))
    beside = [TASKS / name for name in BESIDE if (TASKS / name).exists()]
    for path in [*files, *beside]:
        counts = line_kinds(path)
        if path in files:
            total = {kind: total[kind] + counts[kind] for kind in KINDS}
        cells = " | ".join(f"{counts[kind]:,}" for kind in KINDS)
        print(f"| {path.stem} | {sum(counts.values()):,} | {cells} |")
    cells = " | ".join(f"{total[kind]:,}" for kind in KINDS)
    print(f"| budgeted modules | {sum(total.values()):,} | {cells} |")
    least = total["code"] + total["public docstrings"] + total["blank"]
    print(f"budgeted modules, code + public docstrings + blank lines: {least:,}")
    floor = sum(statement_floor(path) for path in files)
    print(f"budgeted modules, statement floor (formatted, one-line public docstrings): {floor:,}")


if __name__ == "__main__":
    asyncio.run(main())
    line_budget()
