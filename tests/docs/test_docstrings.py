"""Every public symbol of every subpackage has its own docstring.

Checked: each class and function named in a subpackage's ``__all__`` (or, in the public
``errors`` and ``protocols`` modules, which have none, each one defined there), and the public
methods, properties, class methods and static methods each public class defines itself.
A class's docstring must be its own (not inherited from a base class, not the signature
a ``dataclass`` generates); a method may inherit its docstring from a base class it
overrides, because the reference renders it that way too.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import sys
import types
from typing import Any

import pytest

PACKAGES = [
    "aster_forge",
    "aster_forge.runtime",
    "aster_forge.tasks",
    "aster_forge.db",
    "aster_forge.testing",
    "aster_forge.forge",
    "aster_forge.metrics",
    "aster_forge.web",
    "aster_forge.db.errors",
    "aster_forge.forge.errors",
    "aster_forge.runtime.errors",
    "aster_forge.runtime.protocols",
    "aster_forge.tasks.errors",
    "aster_forge.tasks.protocols",
]

# Docstrings Python writes itself, which say nothing to a reader.
_GENERATED = {"An enumeration.", None, ""}


def _own_class_doc(cls: type) -> str | None:
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str) or doc.strip() in _GENERATED:
        return None
    if dataclasses.is_dataclass(cls) and doc.startswith(f"{cls.__name__}("):
        return None  # the signature dataclasses writes when there is no docstring
    return doc


def _member_function(value: Any) -> Any:
    if isinstance(value, (staticmethod, classmethod)):
        return value.__func__
    if isinstance(value, property):
        return value.fget
    if inspect.isfunction(value):
        return value
    return None


def _class_violations(qualname: str, cls: type) -> list[str]:
    problems: list[str] = []
    if _own_class_doc(cls) is None:
        problems.append(f"{qualname} (class)")
    for name, value in vars(cls).items():
        if name.startswith("_") or (isinstance(cls, enum.EnumMeta) and name in cls.__members__):
            continue
        function = _member_function(value)
        if function is None:
            continue
        if not inspect.getdoc(getattr(cls, name, function)) and not inspect.getdoc(function):
            problems.append(f"{qualname}.{name}")
    return problems


def _public_names(module: types.ModuleType) -> list[str]:
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    ]


def undocumented(package: str) -> list[str]:
    """The public names of ``package`` (and their public members) without a docstring."""
    module = importlib.import_module(package)
    problems: list[str] = []
    for item in _public_names(module):
        value = getattr(module, item)
        qualname = f"{package}.{item}"
        if inspect.isclass(value):
            problems.extend(_class_violations(qualname, value))
        elif (inspect.isfunction(value) or inspect.isbuiltin(value)) and not inspect.getdoc(value):
            problems.append(f"{qualname} (function)")
    return problems


@pytest.mark.parametrize("package", PACKAGES)
def test_public_symbols_and_methods_have_docstrings(package: str) -> None:
    problems = undocumented(package)
    assert not problems, f"{package}: {len(problems)} public symbol(s) without a docstring:\n" + (
        "\n".join(f"  - {problem}" for problem in problems)
    )


def test_the_check_names_each_kind_of_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclasses.dataclass
    class Record:
        value: int

        def method(self) -> None:
            pass

        @property
        def prop(self) -> int:
            return self.value

    class Colour(enum.Enum):
        RED = 1

    class Failure(ValueError):
        pass

    class Documented:
        """Has a docstring."""

        def documented(self) -> None:
            """Also documented."""

        def _private(self) -> None:
            pass

    def bare() -> None:
        pass

    module = types.ModuleType("docstring_probe")
    for value in (Record, Colour, Failure, Documented, bare):
        setattr(module, value.__name__, value)
    vars(module)["__all__"] = ["Colour", "Documented", "Failure", "Record", "bare"]
    monkeypatch.setitem(sys.modules, "docstring_probe", module)
    assert undocumented("docstring_probe") == [
        "docstring_probe.Colour (class)",
        "docstring_probe.Failure (class)",
        "docstring_probe.Record (class)",
        "docstring_probe.Record.method",
        "docstring_probe.Record.prop",
        "docstring_probe.bare (function)",
    ]
