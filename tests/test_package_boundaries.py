"""Subpackages import each other's public names and declared internals only.

A module of one subpackage (``aster_forge.db``, ``aster_forge.web``, ...) may import the
private modules (``_x``) of its own subpackage, and the shared private modules at the
top of the package (``aster_forge._errors``, ``aster_forge._json``, ...), but of another
subpackage only its public names and its ``_internal`` module: what crosses a package
line without being part of a public door (the stores' input checks and bounds, the
clock, the records the front door re-exports) is declared there, in one place per
subpackage. Top-level modules (``aster_forge.cli``, the front door's ``__init__``) and
the private ``aster_forge._cli`` package count as the top-level package.

Every module under ``src/aster_forge`` is parsed with :mod:`ast` (so imports inside
functions and ``TYPE_CHECKING`` blocks count too), in both the relative
(``from ..tasks._records import X``, ``from ..tasks import _records``) and the absolute
(``from aster_forge.tasks._records import X``, ``import aster_forge.tasks._records``)
form.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "aster_forge"
TOP = ""  # the owner of top-level modules and of private top-level packages
INTERNAL = "_internal"  # the one private module a subpackage shares with the others


def _is_private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _owner(parts: tuple[str, ...]) -> str:
    """The subpackage a dotted module path (``aster_forge`` first) belongs to."""
    if len(parts) < 2 or _is_private(parts[1]):
        return TOP
    return parts[1]


def _package_of(path: Path) -> tuple[str, ...]:
    """The dotted path (as a tuple) of the package holding a source file."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return parts[:-1]


def _imported(node: ast.AST, package: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every dotted path an import statement reaches (a module, or a name in it)."""
    if isinstance(node, ast.Import):
        return [tuple(alias.name.split(".")) for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = package[: len(package) - (node.level - 1)]
        module = base + (tuple(node.module.split(".")) if node.module else ())
    else:
        module = tuple((node.module or "").split("."))
    # ``from ..tasks import _records`` reaches the private module through the name.
    return [module] + [(*module, alias.name) for alias in node.names]


def boundary_violations(path: Path, source: str) -> list[str]:
    """The imports in ``source`` (the text of ``path``) of another subpackage's privates."""
    package = _package_of(path)
    mine = _owner(package)
    problems: list[str] = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        for target in _imported(node, package):
            if target[:1] != (PACKAGE,) or _owner(target) == mine:
                continue
            # Position 1 is the top-level package's own shared private module
            # (``aster_forge._errors``); anything private below it is another package's,
            # except the names its ``_internal`` module declares for sharing.
            below = target[3:] if target[2:3] == (INTERNAL,) else target[2:]
            if any(_is_private(part) for part in below):
                lineno = getattr(node, "lineno", 0)
                problems.append(f"{path.relative_to(SRC)}:{lineno}: {'.'.join(target)}")
    return sorted(set(problems))


def _sources() -> list[Path]:
    return sorted((SRC / PACKAGE).rglob("*.py"))


def test_the_source_tree_is_found() -> None:
    names = {path.relative_to(SRC / PACKAGE).as_posix() for path in _sources()}
    assert {"cli.py", "db/__init__.py", "tasks/__init__.py", "web/__init__.py"} <= names


def test_no_module_imports_another_subpackages_private_modules() -> None:
    problems = [
        problem
        for path in _sources()
        for problem in boundary_violations(path, path.read_text(encoding="utf-8"))
    ]
    assert not problems, (
        "import the public name from the owning subpackage's __init__ instead:\n"
        + "\n".join(problems)
    )


_DB_MODULE = SRC / PACKAGE / "db" / "_example.py"


@pytest.mark.parametrize(
    "source",
    [
        "from ..tasks._records import MAX_TASK_ID\n",
        "from ..tasks import _records\n",
        "from aster_forge.tasks._records import MAX_TASK_ID\n",
        "import aster_forge.tasks._records\n",
        "from .._cli._errors import CliError\n",
        "def lazy() -> None:\n    from ..runtime._lease import NEVER_EXPIRES\n",
        "from ..tasks._internal import _private_helper\n",
        "from ..tasks._internal._nested import check_ttl\n",
    ],
)
def test_the_check_catches_every_import_form(source: str) -> None:
    assert boundary_violations(_DB_MODULE, source)


@pytest.mark.parametrize(
    "source",
    [
        "from ._tasks_sql import TaskSql\n",
        "from ..db._tasks_sql import TaskSql\n",
        "from aster_forge.db._tables import CORE_COLUMNS\n",
        "from ..tasks import TaskSpec, TaskWorker\n",
        "from ..tasks._internal import MAX_TASK_ID, TaskStatus\n",
        "from aster_forge.tasks._internal import check_claim_args\n",
        "import aster_forge.runtime._internal\n",
        "from ..runtime import _internal\n",
        "from ..tasks.errors import TaskInvalidValueError\n",
        "from .._errors import AsterForgeError\n",
        "import sqlalchemy._private\n",
    ],
)
def test_own_privates_public_names_and_shared_top_level_modules_pass(source: str) -> None:
    assert boundary_violations(_DB_MODULE, source) == []


def test_top_level_modules_own_the_private_cli_package() -> None:
    cli = SRC / PACKAGE / "cli.py"
    assert boundary_violations(cli, "from aster_forge._cli._errors import CliError\n") == []
    assert boundary_violations(cli, "from aster_forge.tasks._records import MAX_TASK_ID\n")
