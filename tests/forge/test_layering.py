"""The Forge layer assembles the primitives: no claim, lease, heartbeat or schedule logic,
no SQL and no private imports of its own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import aster_forge.forge

FORGE_DIR = Path(aster_forge.forge.__file__).parent
MODULES = sorted(FORGE_DIR.glob("*.py"))

# Defining one of these would be a second implementation of a primitive's job.
_LOGIC_NAME = re.compile(r"claim|lease|heartbeat|renew|fence|next_run|backoff", re.IGNORECASE)
# Store methods only the primitives' workers call (the Forge calls enqueue/get/list only).
_STORE_WRITES = {
    "claim_due_for_lane",
    "renew_task_lease",
    "renew_task_leases_many",
    "mark_task_succeeded",
    "mark_tasks_succeeded_many",
    "mark_task_retry",
    "mark_task_failed",
    "release_task_for_shutdown",
    "claim_scheduled_task",
    "renew_scheduled_task_claim",
    "complete_scheduled_task",
    "try_acquire",
    "renew",
    "release",
}
_SQL = {"select", "insert", "update", "delete", "text"}


def _problems(source: str) -> list[str]:
    problems: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if _LOGIC_NAME.search(node.name):
                problems.append(f"defines {node.name}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            # The root's ``_errors`` (AsterForgeError) is every subpackage's base, and a
            # subpackage's ``_internal`` is what it declares for the others to use.
            parts = module.split(".")
            private = any(part.startswith("_") for part in parts)
            shared = module == "_errors" or (len(parts) == 2 and parts[1] == "_internal")
            if private and node.level >= 2 and not shared:
                problems.append(f"imports a private module {'.' * node.level}{module}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            owner = node.func.value
            if attr in _STORE_WRITES:
                problems.append(f"calls .{attr}()")
            if attr in _SQL and isinstance(owner, ast.Name) and owner.id in {"sa", "sqlalchemy"}:
                problems.append(f"builds SQL with {owner.id}.{attr}()")
    return problems


@pytest.mark.parametrize("module", MODULES, ids=[module.name for module in MODULES])
def test_the_forge_modules_hold_no_primitive_logic(module: Path) -> None:
    assert _problems(module.read_text()) == []


def test_the_check_catches_a_hand_written_lease_renewal() -> None:
    source = (
        "import sqlalchemy as sa\n"
        "from ..tasks._heartbeat import SharedTaskHeartbeat\n"
        "async def renew_lease(store, lease):\n"
        "    await store.renew_task_lease(lease, 30)\n"
        "    return sa.update(table)\n"
    )
    assert sorted(_problems(source)) == [
        "builds SQL with sa.update()",
        "calls .renew_task_lease()",
        "defines renew_lease",
        "imports a private module ..tasks._heartbeat",
    ]


def test_a_subpackages_declared_internals_are_not_private_imports() -> None:
    assert _problems("from ..tasks._internal import TaskStatus\n") == []
    assert _problems("from ..tasks._internal.deeper import TaskStatus\n") == [
        "imports a private module ..tasks._internal.deeper"
    ]
