"""Load a trace target `path/to/file.py:factory` or `package.module:factory` and call its factory."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

EXAMPLE = "fixtures/rwkv7_time_mix.py:factory  or  mypackage.models:build"


@cache
def _not_user() -> tuple[str, ...]:
    """Where code that is not the user's lives: torch, amplint, the standard library."""
    spec = importlib.util.find_spec("torch")
    torch_dir = os.path.dirname(spec.origin) if spec is not None and spec.origin else None
    amplint_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return tuple(p + os.sep for p in (torch_dir, amplint_dir, sysconfig.get_paths()["stdlib"]) if p)


def is_user_code(filename: str) -> bool:
    """Whether a frame's file is the model's (the user's, or a library such as transformers)."""
    return not filename.startswith(_not_user()) and not filename.startswith("<")


def user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the exception's traceback in the model's code."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if is_user_code(f.filename)]
    return frames[-1] if frames else None


class TargetError(Exception):
    """The target cannot be loaded or its factory misbehaves; the message says what to do."""


_LOADED: dict[Path, Any] = {}


def forget_loaded() -> None:
    """Load target files afresh from now on: each trace runs the files as they are then (a process
    that traces again, such as `amplint lock` in one process, must not see the old ones)."""
    for path, module in _LOADED.items():
        if sys.modules.get(path.stem) is module:
            del sys.modules[path.stem]
    _LOADED.clear()


def load_factory(target: str) -> Any:
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise TargetError(f"target {target!r} is not FILE.py:FACTORY or MODULE:FACTORY, e.g. {EXAMPLE}")
    module = load_module(where)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise TargetError(f"{where} has no callable {name!r}")
    return factory


def load_module(where: str) -> Any:
    """The module a target's file path or dotted name names, imported (its folder on `sys.path`).
    A file is run once per process and is also the module its name imports (`from gate import Gate`
    in a factory beside `gate.py`) unless one of that name is already imported: what a `replace`
    entry swaps in it is what the trace sees."""
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where)
        if not path.is_file():
            raise TargetError(f"target file {where} does not exist (expected e.g. {EXAMPLE})")
        resolved = path.resolve()
        if resolved in _LOADED:
            return _LOADED[resolved]
        spec = importlib.util.spec_from_file_location(f"amplint_target_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.parent.resolve()))
        named = sys.modules.setdefault(path.stem, module) is module
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:
            if named:
                del sys.modules[path.stem]
            if isinstance(exc, SyntaxError):
                raise TargetError(f"{where}:{exc.lineno}: syntax error: {exc.msg}") from None
            raise
        _LOADED[resolved] = module
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            raise TargetError(f"cannot import {where!r}: {exc}") from None
    return module


@dataclass(frozen=True)
class MadeInTrace:
    """An input the trace makes inside the traced call, `make(device, dtype)`: an object holding
    tensors (a video tracker's inference session), which, made before the trace, would hold real
    CPU tensors that never become fake nor move to the traced device. `dtype`: the one floating-point
    inputs take."""

    make: Callable[[str, Any], Any]


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


# `[tool.amplint.runtime]` keys a target (or the table, as defaults for every target) may set.
_CHOICES: dict[str, tuple[object, ...]] = {
    "device": ("cuda", "cpu"),
    "dtype": ("bfloat16", "float16"),
    "autocast": (True, False),
    "param-dtype": ("bfloat16", "float16", "float32"),
    "measure": (True, False),  # replay the graph on the factory's weights: a real forward pass on CPU
    "values": (True, False),  # replay every op against float64 for AMP105-AMP108: about 3 forward passes
}
# The value rules' limits (`amplint.runtime.graph.ValueLimits`): key -> (field, type, lowest, highest).
LIMITS: dict[str, tuple[str, type, float, float | None]] = {
    "headroom-bits": ("headroom_bits", float, 0.0, None),
    "underflow-fraction": ("underflow_fraction", float, 0.0, 1.0),
    "error-threshold": ("error_threshold", float, 0.0, None),
    "error-top": ("error_top", int, 1, None),
    "lr": ("lr", float, 1e-12, None),
    "lost-update-fraction": ("lost_update_fraction", float, 0.0, 1.0),
}
_DEFAULTS: dict[str, object] = {
    "device": "cuda",
    "dtype": "bfloat16",
    "autocast": True,
    "param-dtype": None,
    "measure": True,
    "values": False,
}


# The execution modes a trace runs in, as `modes` in [tool.amplint] names them (`:cpu` after an
# autocast mode: CPU autocast's policy).
MODES = ("autocast-bf16", "autocast-fp16", "cast-bf16", "cast-fp16")
_SHORT = {"bf16": "bfloat16", "fp16": "float16"}


def mode_settings(name: str) -> dict[str, Any]:
    """The trace settings of an execution mode: autocast on a device in a dtype (the weights stay
    float32), or the model cast to a dtype and run without autocast."""
    base, _, device = name.partition(":")
    kind = base.partition("-")[0]
    if base not in MODES or device not in ("", "cuda", "cpu") or (kind == "cast" and device):
        raise TargetError(
            f"unknown mode {name!r}: expected one of {', '.join(MODES)} (autocast ones may add ':cpu')"
        )
    dtype = _SHORT[base.partition("-")[2]]
    if kind == "autocast":
        return {
            "mode": name,
            "device": device or "cuda",
            "dtype": dtype,
            "autocast": True,
            "param_dtype": None,
        }
    return {"mode": name, "device": "cuda", "dtype": dtype, "autocast": False, "param_dtype": dtype}


def unknown_keys(runtime: dict[str, Any]) -> list[str]:
    """What `[tool.amplint.runtime]` (and each of its target tables) holds that amplint does not
    read, said as warnings: ignored, never fatal, as for `[tool.amplint]`."""
    where = "[tool.amplint.runtime]"
    said = [
        f"{where} unknown key {key!r} ignored"
        for key in sorted(set(runtime) - {"targets", "timeout", "replace", *_CHOICES, *LIMITS, *_CHILD})
    ]
    for entry in runtime.get("targets", []) if isinstance(runtime.get("targets"), list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("target"), str):
            extra = sorted(set(entry) - {"target", "weights", *_CHOICES, *LIMITS})
            said += [f"{where} target {entry['target']!r}: unknown key {key!r} ignored" for key in extra]
    return said


def target_specs(
    runtime: dict[str, Any],
    targets: list[str] | None,
    root: Path,
    overrides: dict[str, Any] | None = None,
    *,
    as_built: bool = False,
) -> list[dict[str, Any]]:
    """The trace specs for `amplint check --confirm`: the `--target` values when given, else the
    `targets` of `[tool.amplint.runtime]` (each a string or a table with its own settings); the
    table's own keys are the defaults, `overrides` (the command line's mode: `device`, `dtype`,
    `autocast`, `param_dtype`) beat both. A relative file path is relative to `root` (the
    config's). With `as_built`, a target whose mode nothing sets is traced in the dtype its
    factory's model holds when that is half precision (a float16 model runs without autocast); the
    lock records the settings it is given."""
    overrides = overrides or {}
    mode_keys = ("device", "dtype", "autocast", "param-dtype")
    where = "[tool.amplint.runtime]"
    defaults = {key: _choice(runtime, key, _DEFAULTS[key], where) for key in _CHOICES}
    limits = value_limits(runtime, where)
    child = child_limits(runtime, root)
    entries: list[object] = list(targets) if targets else runtime.get("targets", [])
    if not isinstance(entries, list):
        raise TargetError(f"{where} 'targets' must be a list of FILE.py:FACTORY strings or tables")
    specs = []
    for entry in entries:
        table = {"target": entry} if isinstance(entry, str) else entry
        if not isinstance(table, dict) or not isinstance(table.get("target"), str):
            raise TargetError(f"{where} target {entry!r} must be a string or a table with a 'target' key")
        named = f"{where} target {table['target']!r}"
        settings = {key: _choice(table, key, defaults[key], named) for key in _CHOICES}
        weights = table.get("weights")
        if weights is not None and not isinstance(weights, str):
            raise TargetError(f"{named} 'weights' must be a path to a .safetensors file or a state dict")
        chosen = any(key in table or key in runtime for key in mode_keys) or bool(overrides)
        specs.append(
            {
                "name": table["target"],  # as written: how amplint.lock names the target
                "target": _anchored(table["target"], root),
                "hf_config": None,
                "device": settings["device"],
                "dtype": settings["dtype"],
                "autocast": settings["autocast"],
                "param_dtype": settings["param-dtype"],
                "measure": settings["measure"],
                "values": settings["values"],
                "limits": {**limits, **value_limits(table, named)},
                "weights": None if weights is None else str(root / weights),
                "compare_cpu": True,
                "as_built": as_built and not chosen,
                **child,
                **overrides,
            }
        )
    return specs


# What the trace's child process may use (`amplint.runtime.child`): key -> the spec's key.
_CHILD = {"memory-limit": "memory_limit", "output-limit": "output_limit"}


def child_limits(runtime: dict[str, Any], root: Path) -> dict[str, Any]:
    """What every trace's child process takes from `[tool.amplint.runtime]`, as a spec's keys:
    `memory-limit` and `output-limit` in bytes (those not set take the child's defaults), and the
    `replace` table (`replacements`)."""
    from amplint.config import ConfigError, parse_size

    try:
        limits: dict[str, Any] = {
            name: parse_size(runtime[key], f"[tool.amplint.runtime] '{key}'")
            for key, name in _CHILD.items()
            if key in runtime
        }
    except ConfigError as exc:
        raise TargetError(str(exc)) from None
    replace = replacements(runtime.get("replace", {}), root, "[tool.amplint.runtime] replace")
    return {**limits, "replace": replace} if replace else limits


def replacements(table: object, root: Path, where: str) -> list[tuple[str, str, str]]:
    """The functions `table` swaps, for the trace only, for ones that run on CPU, such as a triton
    kernel for the package's own PyTorch reference of it (`replace` of `[tool.amplint.runtime]`, or
    `trace --replace`; `where` says which, in errors). Each key names the function as the module
    that calls it sees it, `MODULE:NAME` (`"fla.layers.rwkv7:token_shift"`) or `FILE.py:NAME`; each
    value is `FILE.py:FUNCTION` or `MODULE:FUNCTION`, files relative to `root`. Each entry as its
    errors name it, then the key and value with their files anchored."""
    if not isinstance(table, dict):
        raise TargetError(f'{where} must be a table of "MODULE:NAME" = "FILE.py:FUNCTION" entries')
    resolved = []
    for key, value in table.items():
        for part, spelled in ((key, "the key"), (value, "the value")):
            if (
                not isinstance(part, str)
                or not part.rpartition(":")[0]
                or not part.rpartition(":")[2].isidentifier()
            ):
                raise TargetError(
                    f"{where} {key!r}: {spelled} {part!r} is not MODULE:NAME or FILE.py:NAME, "
                    'e.g. "fla.layers.rwkv7:token_shift" = "refs.py:token_shift"'
                )
        resolved.append((f"{where} {key!r}", _anchored(key, root), _anchored(value, root)))
    return resolved


def apply_replacements(replace: Sequence[Sequence[str]]) -> None:
    """Swap each function `replace` names (`replacements`) in the module that calls it; in the
    trace's own process, so only the trace sees it."""
    for entry, key, value in replace:
        module_name, _, name = key.rpartition(":")
        try:
            module = load_module(module_name)
        except TargetError as exc:
            raise TargetError(f"{entry}: {exc}") from None
        if not hasattr(module, name):
            raise TargetError(f"{entry}: the module has no {name!r}")
        try:
            reference = load_factory(value)
        except TargetError as exc:
            raise TargetError(f"{entry}: {exc}") from None
        setattr(module, name, reference)


def trace_timeout(runtime: dict[str, Any], given: float | None) -> float:
    """Seconds each trace may take: `--timeout` when given, else the table's `timeout`, else 300."""
    if given is not None:
        return given
    value = runtime.get("timeout", 300.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise TargetError(
            f"[tool.amplint.runtime] 'timeout' must be a positive number of seconds, got {value!r}"
        )
    return float(value)


def value_limits(table: dict[str, Any], where: str) -> dict[str, float | int]:
    """The value rules' limits a table sets, by `ValueLimits` field, checked."""
    limits: dict[str, float | int] = {}
    for key, (name, kind, lowest, highest) in LIMITS.items():
        if key not in table:
            continue
        value = table[key]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if (
            not number
            or (kind is int and not isinstance(value, int))
            or value < lowest
            or (highest is not None and value > highest)
        ):
            bound = f"between {lowest:g} and {highest:g}" if highest is not None else f"at least {lowest:g}"
            what = "an integer" if kind is int else "a number"
            raise TargetError(f"{where} '{key}' must be {what} {bound}, got {value!r}")
        limits[name] = kind(value)
    return limits


def _choice(table: dict[str, Any], key: str, default: object, where: str) -> object:
    value = table.get(key, default)
    if value is not None and value not in _CHOICES[key]:
        allowed = ", ".join(repr(choice) for choice in _CHOICES[key])
        raise TargetError(f"{where} '{key}' must be one of {allowed}, got {value!r}")
    return value


def _anchored(target: str, root: Path) -> str:
    where, sep, name = target.rpartition(":")
    is_file = where.endswith(".py") or "/" in where or "\\" in where
    if sep and is_file and not Path(where).is_absolute():
        return f"{root / where}:{name}"
    return target
