"""One task's path through ``aster_forge.tasks`` stays short, and the worker core stays small.

The path is traced with ``sys.setprofile`` by :mod:`benchmarks.task_path` (the same tool
``python -m benchmarks.task_path`` prints the figures with): one task runs through a
:class:`~aster_forge.tasks.TaskWorker` on the in-memory store, from the claim to its
stored outcome, and every ``tasks/`` module entered outside the store's own code is
recorded.
"""

from __future__ import annotations

from benchmarks.task_path import budgeted_files, trace_one_task

#: The most ``tasks/`` modules one task's path may enter (the worker, its values, the
#: execution, the lease, the heartbeat, the spec, the context, the success batcher).
MAX_MODULES_ENTERED = 8

#: The most modules the store object may travel through: the worker owns it, and only
#: the parts that call it (execution, context, heartbeat, batcher) hold it.
MAX_MODULES_CARRYING_THE_STORE = 5

#: The lines the worker-core modules hold today (``python -m benchmarks.task_path``).
#: A ratchet, not a goal: a change that adds lines here raises it on purpose, saying
#: what the lines buy, and a change that removes lines lowers it.
WORKER_CORE_LINES = 2_130


async def test_one_task_enters_at_most_eight_tasks_modules() -> None:
    path = await trace_one_task()
    assert len(path.entered) <= MAX_MODULES_ENTERED, path.entered
    assert path.entered[0] == "_worker"  # the worker claims; nothing else starts the path
    assert len(path.carried) <= MAX_MODULES_CARRYING_THE_STORE, sorted(path.carried)


def test_the_worker_core_does_not_grow_unnoticed() -> None:
    files = budgeted_files()
    assert {path.stem for path in files} == {
        "_completion",
        "_dispatch",
        "_execution",
        "_heartbeat",
        "_worker",
    }
    lines = sum(len(path.read_text().splitlines()) for path in files)
    assert lines <= WORKER_CORE_LINES, f"the worker core grew to {lines:,} lines"
