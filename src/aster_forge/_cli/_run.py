"""``aster-forge run module:factory``: run a product's ``AsterRuntime``."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from aster_forge.runtime import AsterRuntime, AsterRuntimeError

from ._errors import EXIT_FAILED, EXIT_UNREACHABLE, CliError
from ._reports import print_runtime_error, print_shutdown_report

__all__ = ["load_factory", "load_object", "run_factory"]


def load_object(target: str, what: str = "FACTORY") -> Any:
    """Import ``module:attribute`` (dotted attribute paths allowed) and return the object.

    Raises:
        CliError: Malformed target, module not importable, attribute missing.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"expected MODULE:{what}, got {target!r}", EXIT_UNREACHABLE)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"cannot import {module_name!r}: {exc}", EXIT_UNREACHABLE) from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CliError(
                f"module {module_name!r} has no attribute {attr!r}", EXIT_UNREACHABLE
            ) from None
    return obj


def load_factory(target: str) -> Any:
    """Import ``module:attribute`` and return it, checking that it is callable.

    Raises:
        CliError: Malformed target, module not importable, attribute missing, not callable.
    """
    obj = load_object(target)
    if not callable(obj):
        raise CliError(f"{target} is not callable", EXIT_UNREACHABLE)
    return obj


async def _build(target: str) -> AsterRuntime:
    factory = load_factory(target)
    built = factory()
    if inspect.isawaitable(built):
        built = await built
    if not isinstance(built, AsterRuntime):
        raise CliError(
            f"{target}() returned {type(built).__name__}, expected an AsterRuntime",
            EXIT_UNREACHABLE,
        )
    return built


async def run_factory(target: str) -> int:
    """Build the runtime and run it until it ends or SIGINT/SIGTERM; print the report."""
    runtime = await _build(target)
    try:
        result = await runtime.run()
    except AsterRuntimeError as exc:
        print_runtime_error(exc)
        return EXIT_FAILED
    finally:
        print_shutdown_report(runtime.last_shutdown_report)
    return result if isinstance(result, int) and not isinstance(result, bool) else 0
