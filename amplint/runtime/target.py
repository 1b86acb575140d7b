"""Load a trace target `path/to/file.py:factory` or `package.module:factory` and call its factory."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

EXAMPLE = "fixtures/rwkv7_time_mix.py:factory  or  mypackage.models:build"


class TargetError(Exception):
    """The target cannot be loaded or its factory misbehaves; the message says what to do."""


def load_factory(target: str) -> Any:
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise TargetError(f"target {target!r} is not FILE.py:FACTORY or MODULE:FACTORY, e.g. {EXAMPLE}")
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where)
        if not path.is_file():
            raise TargetError(f"target file {where} does not exist (expected e.g. {EXAMPLE})")
        spec = importlib.util.spec_from_file_location(f"amplint_target_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.parent.resolve()))
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            raise TargetError(f"{where}:{exc.lineno}: syntax error: {exc.msg}") from None
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            raise TargetError(f"cannot import {where!r}: {exc}") from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise TargetError(f"{where} has no callable {name!r}")
    return factory


def call_factory(factory: Any) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """`(model, args)` or `(model, args, kwargs)` from the factory, checked."""
    result = factory()
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise TargetError(
            f"the factory must return (model, args) or (model, args, kwargs), not {type(result).__name__}"
        )
    model, args, *rest = result
    kwargs = rest[0] if rest else {}
    if not callable(model):
        raise TargetError(f"the model returned by the factory is not callable ({type(model).__name__})")
    if not isinstance(args, (tuple, list)) or not isinstance(kwargs, dict):
        raise TargetError("the factory's args must be a tuple or list and its kwargs a dict")
    return model, tuple(args), kwargs
