"""Every subpackage re-exports a sorted, complete ``__all__`` of names that exist."""

from __future__ import annotations

import importlib
import inspect
import types

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
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_exists(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported), f"{name}.__all__ is not sorted"
    assert len(exported) == len(set(exported)), f"{name}.__all__ has duplicates"
    missing = [item for item in exported if not hasattr(module, item)]
    assert not missing, f"{name}.__all__ names missing attributes: {missing}"


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_complete(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and not isinstance(value, types.ModuleType)
        and attr not in {"annotations"}
    }
    assert public <= set(module.__all__), (
        f"{name} exposes names not in __all__: {public - set(module.__all__)}"
    )


@pytest.mark.parametrize("name", PACKAGES)
def test_public_symbols_have_docstrings(name: str) -> None:
    module = importlib.import_module(name)
    undocumented = [
        item
        for item in module.__all__
        if (inspect.isclass(getattr(module, item)) or inspect.isfunction(getattr(module, item)))
        and not inspect.getdoc(getattr(module, item))
    ]
    assert not undocumented, f"{name}: public symbols without docstrings: {undocumented}"
