"""Every subpackage re-exports a sorted, complete ``__all__`` of names that exist."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
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


# Every name in the ``__all__`` of a public module (one without a ``_`` part in its
# path) counts; the three doors and the extras stay within this many.
SURFACE_CEILING = 150
FRONT_DOOR_CEILING = 40


def _public_modules() -> list[types.ModuleType]:
    import aster_forge

    names = ["aster_forge"] + [
        info.name
        for info in pkgutil.walk_packages(aster_forge.__path__, "aster_forge.")
        if not any(part.startswith("_") for part in info.name.split("."))
    ]
    return [importlib.import_module(name) for name in names]


def _exports() -> dict[str, list[str]]:
    return {
        module.__name__: list(module.__all__)
        for module in _public_modules()
        if hasattr(module, "__all__")
    }


def test_the_front_door_stays_small() -> None:
    import aster_forge

    assert len(aster_forge.__all__) <= FRONT_DOOR_CEILING


def test_the_public_surface_does_not_grow() -> None:
    exports = _exports()
    assert set(PACKAGES) | {"aster_forge.cli"} <= set(exports)
    names = sum(len(exported) for exported in exports.values())
    assert names <= SURFACE_CEILING, f"{names} public names; the ceiling is {SURFACE_CEILING}"


def test_every_public_name_has_one_home() -> None:
    homes: dict[str, list[str]] = {}
    for module, exported in _exports().items():
        for name in exported:
            homes.setdefault(name, []).append(module)
    shared = {name: modules for name, modules in homes.items() if len(modules) > 1}
    assert not shared, f"exported by more than one public module: {shared}"
