"""The trace, run in a child process: an abort inside torch (a C++ terminate) ends this process,
not the user's command, and a hang is ended by the parent's timeout. The child runs in a process
group of its own, which the timeout ends whole (processes the target started too), under a memory
limit (`memory-limit`, by default three quarters of the machine's memory), and only the last
`output-limit` bytes of what it prints are shown.

    python -m amplint.runtime.child SPEC_JSON OUTPUT_JSON
    python -m amplint.runtime.child @SPECS_FILE OUTPUT_FOLDER   (a batch: {"batch": [spec, ...]})
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

from amplint.runtime.gpu import BF16_ASKED, DEFAULT_GPU, GPUS
from amplint.runtime.graph import DtypeGraph, ValueLimits

# Exit codes of the child, read by the parent.
USAGE, FACTORY_FAILED, BAD_TARGET = 2, 3, 4


class ChildError(Exception):
    pass


def run_traced(spec: dict[str, Any]) -> DtypeGraph:
    """Load the target, call its factory and trace, in this process."""
    import torch

    from amplint.runtime.target import (
        TargetError,
        apply_replacements,
        call_factory,
        forget_loaded,
        load_factory,
    )
    from amplint.runtime.tracer import TraceError, trace

    forget_loaded()
    apply_replacements(spec.get("replace", ()))
    labels = None
    real_model: Callable[[Any], Any] | None = None
    if spec.get("hf_config"):
        from amplint.runtime.hf import build, with_real_buffers

        real_model = with_real_buffers

        model, args, kwargs = build(
            spec["hf_config"],
            task=spec.get("task"),
            layers=spec.get("layers"),
            seq_len=spec["seq_len"],
            batch_size=spec["batch_size"],
            image_size=spec.get("image_size"),
            attn_implementation=spec["attn_implementation"],
            input_ids=spec.get("input_ids"),
            text=spec.get("text"),
        )
        if spec.get("backward"):
            from amplint.runtime.hf import labels as random_labels

            labels = random_labels(model, kwargs)
    elif spec.get("auto"):  # a model class found by `check --deep`, built from its defaults
        from amplint.runtime.discover import build_class

        path, _, name = spec["target"].rpartition(":")
        model, args, kwargs = build_class(path, name, seq_len=spec["seq_len"], batch_size=spec["batch_size"])
        if any(p.is_meta for p in _floating(model)):
            from amplint.runtime.hf import with_real_buffers

            real_model = with_real_buffers
    else:
        factory = load_factory(spec["target"])
        try:
            model, args, kwargs = call_factory(factory)
        except (TargetError, MemoryError):
            raise
        except Exception as exc:
            if _out_of_memory(exc):
                raise MemoryError(str(exc)) from None
            raise ChildError("the factory raised:\n" + "".join(traceback.format_exception(exc))) from None
    if spec.get("weights"):
        from amplint.runtime.weights import load_weights

        load_weights(model, spec["weights"])
        if spec.get("hf_config"):
            from amplint.runtime.hf import materialize_buffers

            materialize_buffers(model)
    gpu = GPUS[spec.get("gpu") or DEFAULT_GPU]
    dtype, param = spec["dtype"], spec.get("param_dtype")
    notes = []
    filled = getattr(getattr(model, "config", None), "amplint_filled", None)
    if filled:
        notes.append(
            "the default config lacks what every transformers 4 config had and the model reads: set "
            + ", ".join(filled)
        )
    part = getattr(getattr(model, "config", None), "amplint_part", None)
    if part:
        notes.append(f"the model type's class only generates: traced its first part with a forward ({part})")
    held = {str(p.dtype).removeprefix("torch.") for p in _floating(model)}
    if spec.get("as_built") and held and held <= {"bfloat16", "float16"}:
        # Nothing named a mode and the factory's model holds half-precision weights: it is run so,
        # without autocast (autocast would put another dtype on its matmuls).
        notes.append(
            f"the model holds {', '.join(sorted(held))} weights and no mode was given: traced without autocast"
        )
        spec = {**spec, "autocast": False}
        dtype = min(held)
    wanted = {dtype if spec["autocast"] else None, param, *(held if param is None else ())}
    asked = (dtype, param)  # the run as asked for, before a GPU without bf16 changes it
    swapped = spec["device"] == "cuda" and not gpu.native_bf16 and "bfloat16" in wanted
    if swapped:
        # What people do on such a GPU: run the bf16-trained model in float16 (CASES.md, case 3).
        notes.append(
            f"bfloat16 is not native on a {gpu.key.upper()} ({gpu.sm}, {gpu.name}): torch emulates it "
            "slowly, so a bfloat16 model is run in float16 there. This trace is that float16 run: "
            "float16 keeps 5 exponent bits (largest value 65504) where bfloat16 has float32's 8."
        )
        dtype = "float16"
        param = "float16" if param == "bfloat16" or (param is None and "bfloat16" in held) else param
    settings = {
        "dtype": getattr(torch, dtype),
        "autocast": spec["autocast"],
        "param_dtype": getattr(torch, param) if param else None,
    }
    measure = spec.get("measure", False)
    lines = {(path, line) for path, line in spec.get("measure_lines", [])} if measure else None
    values = spec.get("values", False)
    options = {
        "device": spec["device"],
        "measure": measure,
        "measure_lines": lines,
        "values": values,
        "limits": _limits(spec) if values else None,
        "max_memory": spec.get("max_memory"),
        "gpu": gpu.key,
        "backward": spec.get("backward", False),
        "labels": labels,
        "real_model": real_model,
        **settings,
    }
    BF16_ASKED.clear()
    try:
        graph = trace(model, args, kwargs, **options)
    except TraceError as exc:
        recurrent = _NO_ATTENTION_CACHE in str(exc)
        if not spec.get("hf_config") or not (recurrent or _in_cache(exc)):
            raise
        # A hybrid config whose every layer is recurrent (linear attention, Mamba): transformers'
        # cache cannot tell the sequence length then, so the model is run as it can be, without one.
        kwargs = {**kwargs, "use_cache": False}
        graph = trace(model, args, kwargs, **options)
        notes.append(
            "this config has no attention layer, which transformers' cache needs: traced with use_cache=False"
            if recurrent
            else f"transformers' cache cannot be built for this config ({exc.__cause__}): traced with use_cache=False"
        )
    if swapped and BF16_ASKED:
        # The model's code asks torch, which answers True on this GPU too (bf16 is emulated there):
        # a real run takes bfloat16 where that code does, so the trace runs as asked.
        path, line = BF16_ASKED[0]
        notes[notes.index(next(n for n in notes if n.startswith("bfloat16 is not native")))] = (
            f"the model's code asks torch.cuda.is_bf16_supported() at {path}:{line}, which torch answers "
            f"True on a {gpu.key.upper()} ({gpu.sm}: bfloat16 is emulated there): traced in bfloat16, as "
            "that code runs; a float16 run is a choice of the code, not of the GPU"
        )
        options = {
            **options,
            "dtype": getattr(torch, asked[0]),
            "param_dtype": getattr(torch, asked[1]) if asked[1] else None,
        }
        settings = {key: options[key] for key in settings}
        graph = trace(model, args, kwargs, **options)
    graph.notes.extend(notes)
    graph.replayed_on = _replayed_on(spec)
    if spec.get("compare_cpu") and spec["device"] == "cuda" and spec["autocast"]:
        # The same model under CPU autocast's policy, for the ops whose dtype differs (AMP103).
        on_cpu = trace(model, args, kwargs, device="cpu", **settings)
        keys = on_cpu.op_keys()
        graph.cpu_dtypes = {keys[node.id]: node.dtype for node in on_cpu.nodes if node.id in keys}
    return graph


def _replayed_on(spec: dict[str, Any]) -> str:
    """What a replay of this spec's model runs on, in words: a measured error means something
    else on made-up inputs and freshly initialised weights than on a factory's real ones."""
    if not (spec.get("hf_config") or spec.get("auto")):
        return DtypeGraph.replayed_on
    built = "the config's model" if spec.get("hf_config") else "the class built from its defaults"
    weights = "the given weights" if spec.get("weights") else "the weights it initialised"
    return f"inputs made up for {built} and {weights}"


def _limits(spec: dict[str, Any]) -> ValueLimits:
    """The value rules' limits of a spec; AMP111 speaks for a training run or when asked."""
    given = spec.get("limits") or {}
    asked = bool(spec.get("backward")) or "lr" in given or "lost_update_fraction" in given
    return ValueLimits(**given, weight_updates=asked)


_NO_ATTENTION_CACHE = "`get_seq_length` can only be called on Attention layers"


def _in_cache(exc: BaseException) -> bool:
    """Whether the model's failure was raised inside transformers' cache (building it from the
    config: BLT's cache reads a layer count its config keeps on sub-configs), which a forward with
    use_cache=False does not make."""
    cause = exc.__cause__
    frames = traceback.extract_tb(cause.__traceback__) if cause is not None else []
    return any(Path(frame.filename).match("transformers/cache_utils.py") for frame in frames)


def _floating(model: Any) -> list[Any]:
    """The floating-point parameters of a module (none for a plain function)."""
    parameters = getattr(model, "parameters", None)
    return [p for p in parameters() if p.is_floating_point()] if callable(parameters) else []


def default_memory_limit() -> int:
    """Three quarters of the machine's memory: a target that would take it all fails alone."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * 3 // 4)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - no sysconf (Windows)
        return 0


DEFAULT_OUTPUT_LIMIT = 64 * 1024  # bytes of a target's output shown when it fails


def trace_in_child(spec: dict[str, Any], timeout: float) -> DtypeGraph:
    memory = int(spec.get("memory_limit") or default_memory_limit())
    shown = int(spec.get("output_limit") or DEFAULT_OUTPUT_LIMIT)
    with tempfile.TemporaryDirectory(prefix="amplint-trace-") as scratch:
        output = Path(scratch) / "graph.json"
        # Output goes to a file, read back from its end: a target printing without end costs disk,
        # never this process's memory.
        with open(Path(scratch) / "output.txt", "w+b") as printed:
            child = _start([json.dumps(spec), str(output)], printed, memory, warm=warm_modules([spec]))
            try:
                returncode = child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise ChildError(
                    f"the trace did not finish within {timeout:g} s (raise it with --timeout)"
                ) from None
            finally:
                _end_group(child)
            message = _tail(printed, shown)
        if returncode == 0 and output.is_file():
            return DtypeGraph.load(output)
        if returncode == BAD_TARGET:
            from amplint.runtime.target import TargetError

            raise TargetError(message or "the target could not be loaded")
        if returncode == 0:
            raise ChildError(f"the target ended the process before the trace was written\n{message}".rstrip())
        if returncode < 0 or returncode > BAD_TARGET:
            raise ChildError(
                f"the trace aborted inside torch (exit status {returncode}); "
                f"run with --in-process to see where.\n{message[-2000:]}"
            )
        raise ChildError(message)


def trace_batch_in_child(specs: list[dict[str, Any]], timeout: float) -> list[DtypeGraph | Exception]:
    """Several targets traced in one child process (torch is imported once): each one's graph, or
    the error it failed with (`TargetError`, `ChildError`). The batch may take `timeout` seconds per
    target; where the process ends early (an abort inside torch, the time or memory limit) the
    targets it did not finish are traced again one process each, so each failure is its own."""
    from amplint.runtime.target import TargetError

    if not specs:
        return []
    memory = int(specs[0].get("memory_limit") or default_memory_limit())
    results: list[DtypeGraph | Exception | None] = [None] * len(specs)
    with tempfile.TemporaryDirectory(prefix="amplint-trace-") as scratch:
        folder = Path(scratch)
        # The specs go in a file: a batch's measured lines outgrow a command line's argument.
        (folder / "specs.json").write_text(json.dumps({"batch": specs}), encoding="utf-8")
        with open(folder / "output.txt", "w+b") as printed:
            child = _start([f"@{folder / 'specs.json'}", scratch], printed, memory, warm=warm_modules(specs))
            try:
                child.wait(timeout=timeout * len(specs))
            except subprocess.TimeoutExpired:
                pass  # what finished stands; the rest is traced again one by one
            finally:
                _end_group(child)
        for index in range(len(specs)):
            graph, error = folder / f"{index}.json", folder / f"{index}.error"
            if error.is_file():
                code, _, message = error.read_text(encoding="utf-8").partition("\n")
                failed = TargetError if int(code) == BAD_TARGET else ChildError
                results[index] = failed(message.strip() or "the target could not be traced")
            elif graph.is_file():
                results[index] = DtypeGraph.load(graph)
    out: list[DtypeGraph | Exception] = []
    for spec, result in zip(specs, results, strict=True):
        if result is None:
            try:
                result = trace_in_child(spec, timeout)
            except (TargetError, ChildError) as exc:
                result = exc
        out.append(result)
    return out


class _Child(Protocol):
    pid: int

    def wait(self, timeout: float | None = None) -> int: ...

    def poll(self) -> int | None: ...


def _start(args: list[str], printed: IO[bytes], memory: int, *, warm: tuple[str, ...]) -> _Child:
    """`main(args)` in a new process, in a session of its own, its output into `printed`, under
    the memory limit. On Linux it is forked from a process that has imported torch (and the
    `warm` modules) once for this run: importing torch takes seconds, and a check that traces
    again after each fix, or a test session whose `amplint_lock` checks several targets, pays for
    it once. Elsewhere, or where that process cannot be started, a fresh interpreter."""
    if _FORKS:
        with contextlib.suppress(OSError, EOFError, ValueError):
            return _fork(args, printed, memory, warm)
    return subprocess.Popen(
        [sys.executable, "-m", "amplint.runtime.child", *args],
        stdout=printed,
        stderr=printed,
        env=os.environ.copy(),
        start_new_session=True,  # its own process group: ended whole, grandchildren too
        preexec_fn=(lambda: _cap_memory(memory)) if memory and os.name == "posix" else None,
    )


# Where traces fork from a process that imported torch (`_start`); elsewhere each is a new interpreter.
_FORKS = sys.platform.startswith("linux")
# The modules every trace imports, imported once by the process the traces are forked from (the
# tracer's torch layer imports what a trace's first graph would: `amplint.runtime.compat`).
_TRACE_MODULES = (
    "amplint.runtime.child",
    "amplint.runtime.target",
    "amplint.runtime.tracer",
    "amplint.runtime.measure",
)
# What a transformers model needs beyond them: about twice torch's own import time.
_HF_MODULES = ("amplint.runtime.hf", "transformers.modeling_utils", "transformers.generation")
_forkserver: Any = None
_warm: tuple[str, ...] = ()  # what the fork server imports
_running: set[int] = set()  # the pids of forked traces not yet waited for


def warm_modules(specs: list[dict[str, Any]]) -> tuple[str, ...]:
    """The modules the traces of `specs` import, which a process they are forked from imports once."""
    hf = any(spec.get("hf_config") for spec in specs)
    return _TRACE_MODULES + (_HF_MODULES if hf else ())


def prepare(specs: list[dict[str, Any]]) -> None:
    """Have the traces' process import torch now, while this one goes on (with the static pass of
    `check --confirm`): on Linux, the process the traces fork from is started with `specs`' modules."""
    if _FORKS:
        from multiprocessing import forkserver

        _server(warm_modules(specs))
        with contextlib.suppress(OSError, ValueError):
            forkserver.ensure_running()


def _server(warm: tuple[str, ...]) -> Any:
    """multiprocessing's fork server, set to import `warm`: it never runs a torch op, so forking it
    is safe (a process whose torch has run threads is not). A process that lives on (the Python
    API, a test session) and traces a transformers model after a plain one has the server started
    again with both module lists, when no trace forked from it is running."""
    import multiprocessing
    from multiprocessing import forkserver

    global _forkserver, _warm
    if _forkserver is None:
        _forkserver = multiprocessing.get_context("forkserver")
    if set(warm) <= set(_warm) or (_warm and _running):
        return _forkserver
    if _warm:
        forkserver._forkserver._stop()  # type: ignore[attr-defined]  # started again by the next fork
    _warm = (*_warm, *(module for module in warm if module not in _warm))
    _forkserver.set_forkserver_preload(list(_warm))
    return _forkserver


def _fork(args: list[str], printed: IO[bytes], memory: int, warm: tuple[str, ...]) -> _Child:
    """`main(args)` forked from the fork server (`_server`)."""
    import types

    cwd = os.getcwd()
    process = _server(warm).Process(
        target=_forked,
        # `python -m` puts the working folder first on the path (a dotted target imports from it).
        args=(args, printed.name, memory, cwd, dict(os.environ), [cwd, *sys.path[1:]]),
        daemon=False,
    )
    # multiprocessing has the new process run the caller's main script again (as `__mp_main__`):
    # a script that calls amplint with no `if __name__ == "__main__":` guard would run whole.
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        process.start()
    finally:
        sys.modules["__main__"] = main
    _running.add(process.pid)
    return _Forked(process)


class _Forked:
    """A forked trace, waited for as `subprocess.Popen` is."""

    def __init__(self, process: Any) -> None:
        self._process = process
        self.pid: int = process.pid

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired("amplint.runtime.child", timeout or 0)
        return code

    def poll(self) -> int | None:
        code = self._process.exitcode
        if code is None:
            return None
        _running.discard(self.pid)
        return int(code)


def _forked(
    args: list[str], printed: str, memory: int, cwd: str, environ: dict[str, str], path: list[str]
) -> None:
    """The forked process: set up as `python -m amplint.runtime.child ARGS` would be, then `main`;
    it ends by `SystemExit`, so that multiprocessing releases what the trace took of its own
    (semaphores) as a process of its own would."""
    os.setsid()
    output = os.open(printed, os.O_WRONLY | os.O_APPEND)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    code = 1
    try:
        if memory:
            _cap_memory(memory)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path
        sys.argv = [__file__, *args]
        code = main(args)
    except SystemExit as exc:  # as the interpreter ends on one: None is 0, a message is printed and 1
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    raise SystemExit(code)


def _cap_memory(limit: int) -> None:
    import resource

    # The data limit (heap and private writable mappings: what the target allocates), not the
    # address space: a CUDA build of torch maps over 3 GB of libraries on import, which take no
    # memory, and an address-space cap below that stopped torch from importing at all.
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _end_group(child: _Child) -> None:
    """End the child's process group (what the target started lives on otherwise), then the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(child.pid, signal.SIGKILL)
    if child.poll() is None:  # a forked child stopped before it made its own group
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
    child.wait()


def _tail(printed: IO[bytes], limit: int) -> str:
    """The last `limit` bytes of what the child printed, saying how much was left out."""
    size = printed.seek(0, os.SEEK_END)
    printed.seek(max(size - limit, 0))
    text = printed.read().decode("utf-8", "replace").strip()
    if size <= limit:
        return text
    return f"[{size - limit:,} bytes of the target's output left out; the last {limit:,} follow]\n{text}"


def main(argv: list[str]) -> int:
    given = Path(argv[0][1:]).read_text(encoding="utf-8") if argv[0].startswith("@") else argv[0]
    spec, output = json.loads(given), Path(argv[1])
    if "batch" in spec:  # several targets, one process: each one's graph or error in a folder
        for index, one in enumerate(spec["batch"]):
            code = _traced_to(one, output / f"{index}.json")
            if code:
                (output / f"{index}.error").write_text(f"{code}\n{_said.getvalue()}", encoding="utf-8")
            _said.seek(0)
            _said.truncate()
        return 0
    return _traced_to(spec, output)


class _Said(io.StringIO):
    """What the last target failed with, kept for a batch's error file and printed as well."""

    def write(self, text: str) -> int:
        sys.stderr.write(text)
        return super().write(text)


_said = _Said()


def _out_of_memory(exc: BaseException) -> bool:
    """torch's own allocator refuses an allocation with a RuntimeError, not Python's MemoryError."""
    return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)


def _traced_to(spec: dict[str, Any], output: Path) -> int:
    """Trace one target and save its graph to `output`; the exit code that says how it failed."""
    from amplint.runtime.target import TargetError
    from amplint.runtime.tracer import TraceError

    try:
        try:
            graph = run_traced(spec)
        except RuntimeError as exc:
            if _out_of_memory(exc):
                raise MemoryError(str(exc)) from None
            raise
    except TargetError as exc:  # no such file or factory, or a factory that returns no model
        print(exc, file=_said)
        return BAD_TARGET
    except SystemExit as exc:  # `sys.exit()` in the target's code: its error, not a trace's result
        print(f"the target called sys.exit({exc.code!r}) instead of returning (model, args)", file=_said)
        return BAD_TARGET
    except MemoryError:
        print(
            "the target ran out of memory (memory-limit in [tool.amplint.runtime], or --memory-limit)",
            file=_said,
        )
        return FACTORY_FAILED
    except TraceError as exc:  # a ReplayError is a TraceError
        print(exc, file=_said)
        return USAGE
    except ChildError as exc:
        print(exc, file=_said)
        return FACTORY_FAILED
    graph.save(output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
