"""How many transformers model types `amplint trace --hf-config` traces.

Every model type that has a model class in the installed transformers is built from its default
config with every stack shrunk to 2 layers, and traced under emulated bf16 CUDA autocast at
sequence length 64 (the head and inputs `amplint trace` picks). Each trace runs in its own forked
process with a timeout.

    python benchmarks/hf_coverage.py run [--jobs 2] [--timeout 120] [--types a,b] [--sample N] [--failed]
    python benchmarks/hf_coverage.py run --types a,b --update   (measure these again, keep the rest)
    python benchmarks/hf_coverage.py report > docs/hf-coverage.md
    python benchmarks/hf_coverage.py inputs --output inputs.json [--types a,b] [--sample N]

`inputs` builds each model type and its inputs as `run` does, without tracing, and writes each
input's shape and dtype: two such files compare the inputs two versions of amplint make.
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "hf_coverage.json"
SETTINGS = {"layers": 2, "seq_len": 64, "batch_size": 1, "dtype": "bfloat16", "attn": "eager"}

# The fixed sample that tests/runtime/test_hf_coverage.py and benchmarks/version_matrix.py trace.
# Decoder LMs, MoE, hybrids and state-space models, encoder-decoders, speech, vision, multimodal.
SAMPLE = [
    "bart",
    "bert",
    "clip",
    "deepseek_v3",
    "falcon_h1",
    "gemma2",
    "gpt2",
    "gpt_oss",
    "granitemoehybrid",
    "jamba",
    "llama",
    "llava",
    "mamba2",
    "mistral",
    "mixtral",
    "phi3",
    "qwen2",
    "qwen3_next",
    "rwkv",
    "siglip",
    "swin",
    "t5",
    "vit",
    "wav2vec2",
    "whisper",
]


def model_types() -> list[str]:
    """Every model type some transformers auto mapping gives a model class that transformers has."""
    import transformers
    from transformers.models.auto import modeling_auto

    types: set[str] = set()
    for name in dir(modeling_auto):
        if name.startswith("MODEL") and name.endswith("_MAPPING_NAMES"):
            for model_type, classes in getattr(modeling_auto, name).items():
                names = classes if isinstance(classes, (list, tuple)) else [classes]
                if any(isinstance(getattr(transformers, c, None), type) for c in names):
                    types.add(model_type)
    return sorted(types)


def _listed() -> list[str]:
    """`model_types()` from another process: finding the classes imports every model's module,
    which forked children would inherit, and their peak memory with it."""
    code = f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import hf_coverage; "
    code += "print(json.dumps(hf_coverage.model_types()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(json.loads(done.stdout))


# Where transformers' default config cannot build or run its own model (a key left None, a rotary
# split that does not fit the head, a backbone from a package that is not installed), the keys a
# published checkpoint's config.json sets for it, and that checkpoint. Nothing else is changed.
# Each key (`a.b`: key b of the sub-config a) has its value and the source that states it: a file
# of transformers at a version, with its line; a copy of the checkpoint's config in a public GitHub
# repository at a commit, with its line (`quote`: that line, word for word); or "unverified" where no
# source at hand states it.
KEYS_FILE = "benchmarks/hf_checkpoint_keys.json"
CHECKPOINT_KEYS: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parents[1] / KEYS_FILE).read_text(encoding="utf-8")
)
UNVERIFIED = "unverified"


def checkpoint_keys(model_type: str) -> dict[str, Any]:
    """The keys set on the model type's default config, nested as its config.json nests them."""
    nested: dict[str, Any] = {}
    for row in CHECKPOINT_KEYS.get(model_type, {}).get("keys", []):
        *parents, last = row["key"].split(".")
        at = nested
        for part in parents:
            at = at.setdefault(part, {})
        at[last] = row["value"]
    return nested


def unverified(model_type: str) -> list[str]:
    """The keys of the model type whose value no recorded source states."""
    return [
        row["key"]
        for row in CHECKPOINT_KEYS.get(model_type, {}).get("keys", [])
        if row["source"] == UNVERIFIED
    ]


def spec_for(model_type: str, scratch: Path, gpu: str | None = None) -> dict[str, Any]:
    config = scratch / f"{model_type}.json"
    keys = checkpoint_keys(model_type)
    config.write_text(json.dumps({"model_type": model_type, **keys}), encoding="utf-8")
    return {
        "hf_config": str(config),
        "layers": SETTINGS["layers"],
        "seq_len": SETTINGS["seq_len"],
        "batch_size": SETTINGS["batch_size"],
        "attn_implementation": SETTINGS["attn"],
        "device": "cuda",
        "dtype": SETTINGS["dtype"],
        "autocast": True,
        "param_dtype": None,
        "gpu": gpu,
    }


def _one(model_type: str, scratch: str, out: Any) -> None:
    """Trace one model type (in a forked child) and send a result row."""
    row: dict[str, Any] = {"type": model_type}
    start = time.perf_counter()
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        from amplint.runtime.child import run_traced
        from amplint.runtime.hf import model_class, runnable_part
        from amplint.runtime.hf_config import read_config

        spec = spec_for(model_type, Path(scratch))
        _, cls = model_class(runnable_part(read_config(spec["hf_config"]), None)[0])
        row["head"] = cls.__name__
        graph = run_traced(spec)
        row["result"] = "traced"
        row["ops"] = sum(1 for node in graph.nodes if node.policy != "input")
    except BaseException as exc:  # every failure is a row of the table
        row["result"] = "failed"
        text = f"{type(exc).__name__}: {exc}".strip()
        row["reason"] = text
    row["seconds"] = round(time.perf_counter() - start, 2)
    row["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out.send(row)
    out.close()


def _inputs_of(model_type: str, scratch: str, out: Any) -> None:
    """Build one model type and its inputs (in a forked child) and send their shapes and dtypes."""
    row: dict[str, Any] = {"type": model_type}
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        from amplint.runtime.hf import build

        spec = spec_for(model_type, Path(scratch))
        model, _, kwargs = build(
            spec["hf_config"],
            layers=spec["layers"],
            seq_len=spec["seq_len"],
            batch_size=spec["batch_size"],
            attn_implementation=spec["attn_implementation"],
        )
        row["head"] = type(model).__name__
        row["inputs"] = {name: _described(value) for name, value in kwargs.items()}
        row["result"] = "built"
    except BaseException as exc:  # a type that does not build is a row too
        row["result"] = "failed"
        row["reason"] = f"{type(exc).__name__}: {exc}".strip()[:400]
    out.send(row)
    out.close()


def _described(value: Any) -> Any:
    """A tensor's shape and dtype, and an integer one's sum (ids and masks are drawn from fixed
    seeds; random floats are not), nested in tuples and dicts; else its type's name."""
    import torch

    if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_meta):
        return [list(value.shape), str(value.dtype)]
    if isinstance(value, torch.Tensor):
        return [list(value.shape), str(value.dtype), int(value.long().sum())]
    if isinstance(value, (tuple, list)):
        return [_described(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _described(item) for key, item in value.items()}
    return type(value).__name__


def run(types: list[str], jobs: int, timeout: float, work: Any = _one) -> list[dict[str, Any]]:
    from amplint.runtime.child import warm_modules

    for module in warm_modules([{"hf_config": "any"}]):  # imported once here, by every forked child
        importlib.import_module(module)

    context = multiprocessing.get_context("fork")
    rows: list[dict[str, Any]] = []
    pending = list(types)
    running: dict[str, tuple[Any, Any, float]] = {}
    with tempfile.TemporaryDirectory(prefix="hf-coverage-") as scratch:
        while pending or running:
            while pending and len(running) < jobs:
                model_type = pending.pop(0)
                receive, send = context.Pipe(duplex=False)
                process = context.Process(target=work, args=(model_type, scratch, send))
                process.start()
                send.close()
                running[model_type] = (process, receive, time.perf_counter())
            time.sleep(0.05)
            for model_type, (process, receive, started) in list(running.items()):
                row = None
                if receive.poll():
                    try:
                        row = receive.recv()
                    except EOFError:
                        row = None
                    process.join()
                elif not process.is_alive():
                    process.join()
                    code = process.exitcode
                    row = {
                        "type": model_type,
                        "result": "failed",
                        "reason": f"the process died (exit {code})",
                    }
                elif time.perf_counter() - started > timeout:
                    process.kill()
                    process.join()
                    row = {"type": model_type, "result": "timeout", "reason": f"over {timeout:g} s"}
                if row is None:
                    continue
                del running[model_type]
                rows.append(row)
                print(
                    f"{len(rows):4}/{len(types)} {model_type:32} {row['result']:8} "
                    f"{row.get('seconds', '')!s:>7} {row.get('reason', '')[:90]}",
                    file=sys.stderr,
                    flush=True,
                )
    return sorted(rows, key=lambda row: row["type"])


# Why a trace failed, by what its message says, first match wins.
KINDS = (
    ("timeout", re.compile(r"^over \d")),
    # what the GPU itself refuses (cuFFT has no bfloat16): the trace says it and where, as it should
    ("raises on a GPU too", re.compile(r"raises here on a GPU too")),
    ("control flow on values", re.compile(r"data-dependent|DataDependentOutput|DynamicOutputShape")),
    (
        "emulation gap",
        re.compile(r"not linked with support for cuda|not compiled with CUDA|aten::empty_strided"),
    ),
    ("needs a package", re.compile(r"pip install|requires the \w+ library")),
    ("default config does not build", re.compile(r"cannot build|cannot read it|validation error")),
    (
        "needs inputs amplint does not make",
        re.compile(r"missing \d+ required|have to specify|must specify|unexpected keyword|'NoneType' object"),
    ),
)


def kind(row: dict[str, Any]) -> str:
    """Why a row's trace failed (empty for a traced one): as recorded when it ran, which saw the
    whole message (the table shows its first and last lines)."""
    if row["result"] == "traced":
        return ""
    if "kind" in row:
        return str(row["kind"])
    reason = row.get("reason") or ""
    return next(
        (name for name, pattern in KINDS if pattern.search(reason)), "the model's code on these inputs"
    )


def _portable(text: str) -> str:
    """Paths as a reader's machine would have them: from the installed package's name on."""
    text = re.sub(r"\S*site-packages/", "", text)
    return re.sub(r"\S*hf-coverage-[^/\s]+/", "", text)


def report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    traced = [row for row in rows if row["result"] == "traced"]
    seconds = [row["seconds"] for row in traced]
    peaks = [row["peak_mb"] for row in traced]
    share = 100 * len(traced) / len(rows) if rows else 0.0
    bare = sum(row["type"] not in CHECKPOINT_KEYS for row in traced)
    keyed = [row for row in rows if row["type"] in CHECKPOINT_KEYS]
    sourced = [row for row in keyed if row["result"] == "traced" and not unverified(row["type"])]
    keys = [key for entry in CHECKPOINT_KEYS.values() for key in entry["keys"]]
    lines = [
        "# transformers model types traced by `amplint trace --hf-config`",
        "",
        "Each model type that has a model class in transformers "
        f"{meta['transformers']} is built from its default config, every stack shrunk to "
        f"{SETTINGS['layers']} layers, and traced under emulated {SETTINGS['dtype']} CUDA autocast "
        f"at sequence length {SETTINGS['seq_len']} with {SETTINGS['attn']} attention, on torch "
        f"{meta['torch']} (CPU build), with the head and inputs `amplint trace` picks. Produced by:",
        "",
        "```",
        "python benchmarks/hf_coverage.py run --jobs 2",
        *(["python benchmarks/hf_coverage.py run --jobs 2 --failed"] if meta.get("failed_again") else []),
        *(
            [f"python benchmarks/hf_coverage.py run --types {','.join(meta['updated'])} --update"]
            if meta.get("updated")
            else []
        ),
        "python benchmarks/hf_coverage.py report > docs/hf-coverage.md",
        "```",
        "",
        f"**{len(traced)} of {len(rows)} model types traced ({share:.1f}%).**",
        f"{bare} of them from their bare default config, "
        f"{len(traced) - bare} with keys a published checkpoint sets (below): "
        f"{len(sourced)} with every key's value stated by a cited source, "
        f"{len(traced) - bare - len(sourced)} with at least one key whose value no source at hand states "
        f"({sum(key['source'] == UNVERIFIED for key in keys)} of the {len(keys)} keys are unverified).",
    ]
    # Where transformers itself cannot build the model from its default config (or lacks a
    # package it needs), the trace never starts, and where the GPU itself refuses an op the trace
    # rightly stops: the share of the others is amplint's own.
    outside = {"default config does not build", "needs a package", "raises on a GPU too"}
    buildable = [row for row in rows if kind(row) not in outside]
    if buildable:
        lines.append(
            f"Of the {len(buildable)} that build with the packages installed and that a GPU runs, "
            f"{len(traced)} traced ({100 * len(traced) / len(buildable):.1f}%)."
        )
    if traced:
        lines.append(
            f"Traced: median {statistics.median(seconds):.1f} s (max {max(seconds):.1f} s), "
            f"median peak {statistics.median(peaks):.0f} MB (max {max(peaks):.0f} MB), "
            f"{meta['cores']} cores, {meta['jobs']} at a time."
        )
    kinds = Counter(kind(row) for row in rows if row["result"] != "traced")
    if keyed:
        lines += [
            "",
            f"For {len(keyed)} types transformers' default config cannot build or run its own model; "
            "they are traced with the keys a published checkpoint sets (nothing else changed). "
            f"Each key's source is in `{KEYS_FILE}`: a transformers file and line that states its "
            "value, a line of a copy of the checkpoint's config.json in a public GitHub repository at "
            "a commit, or unverified where none at hand does (the Hub's config.json was not read).",
            "",
            "| model type | checkpoint | keys | unverified keys |",
            "|---|---|---|---|",
        ]
        for row in keyed:
            given = CHECKPOINT_KEYS[row["type"]]
            shown = f"`{json.dumps(checkpoint_keys(row['type']), sort_keys=True)}`"
            if len(shown) > 160:  # the values of a long one are in the keys file
                tops = dict.fromkeys(key["key"].split(".")[0] for key in given["keys"])
                shown = ", ".join(f"`{key}`" for key in tops) + f" (values in `{KEYS_FILE}`)"
            shown = shown.replace("|", "\\|")
            doubtful = len(unverified(row["type"]))
            lines.append(
                f"| {row['type']} | {given['checkpoint']} | {shown} | {doubtful} of {len(given['keys'])} |"
            )
    lines += ["", "| why a trace failed | model types |", "|---|---|"]
    lines += [f"| {name} | {count} |" for name, count in kinds.most_common()]
    lines += [
        "",
        "| model type | head | ops | seconds | peak MB | result | why | message |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        reason = [line for line in _portable(row.get("reason") or "").splitlines() if line.strip()]
        # The first line names the op, the model's line and module; the last one the exception.
        text = "" if not reason else reason[0] if len(reason) < 2 else f"{reason[0]} {reason[-1]}"
        text = text.replace("|", "\\|")[:400]
        lines.append(
            f"| {row['type']} | {row.get('head', '')} | {row.get('ops', '')} | {row.get('seconds', '')} "
            f"| {row.get('peak_mb', '')} | {row['result']} | {kind(row)} | {text} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    # What `run` and `inputs` both take: which model types, and how they are run.
    chosen = argparse.ArgumentParser(add_help=False)
    chosen.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    chosen.add_argument("--timeout", type=float, default=120.0)
    chosen.add_argument("--types", help="comma-separated model types (default: all)")
    chosen.add_argument("--sample", type=int, help="a random sample of this many types")
    chosen.add_argument("--seed", type=int, default=0)
    go = commands.add_parser("run", parents=[chosen])
    go.add_argument("--output", type=Path, default=RESULTS)
    go.add_argument("--failed", action="store_true", help="run again the types that failed in --output")
    go.add_argument(
        "--update", action="store_true", help="with --types: measure them again, keep --output's other rows"
    )
    dump = commands.add_parser("inputs", parents=[chosen])
    dump.add_argument("--output", type=Path, required=True)
    show = commands.add_parser("report")
    show.add_argument("--input", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.command == "report":
        data = json.loads(args.input.read_text(encoding="utf-8"))
        sys.stdout.write(report(data["rows"], data["meta"]))
        return 0
    if args.command == "run" and args.update and not args.types:
        parser.error("--update measures again the model types --types names")
    import torch
    import transformers

    types = args.types.split(",") if args.types else _listed()
    if args.sample:
        types = sorted(random.Random(args.seed).sample(types, min(args.sample, len(types))))
    if args.command == "inputs":
        rows = run(types, args.jobs, args.timeout, work=_inputs_of)
        args.output.write_text(json.dumps({"rows": rows}, indent=1) + "\n", encoding="utf-8")
        return 0
    kept: list[dict[str, Any]] = []
    earlier_meta: dict[str, Any] = {}
    if args.failed or args.update:
        earlier_data = json.loads(args.output.read_text(encoding="utf-8"))
        earlier, earlier_meta = earlier_data["rows"], earlier_data["meta"]
        if args.failed:  # the traced rows stay as they are, the others are measured again
            kept = [row for row in earlier if row["result"] == "traced"]
            types = [row["type"] for row in earlier if row["result"] != "traced"]
        else:  # the rows of the types named are measured again, the others stay
            kept = [row for row in earlier if row["type"] not in set(types)]
    rows = sorted(kept + run(types, args.jobs, args.timeout), key=lambda row: row["type"])
    for row in rows:
        if row["result"] != "traced":
            row["kind"] = kind(row)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    if args.update and any(earlier_meta.get(k) != v for k, v in versions.items()):
        parser.error(f"--update keeps rows measured on other versions ({args.output}): run them all")
    meta = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cores": os.cpu_count(),
        "jobs": earlier_meta.get("jobs", args.jobs) if args.update else args.jobs,  # the full run's
        "failed_again": args.failed or earlier_meta.get("failed_again", False),
        # Model types measured again after the full run (`--update`), with the rest kept.
        "updated": sorted({*earlier_meta.get("updated", []), *types}) if args.update else [],
    }
    args.output.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n", encoding="utf-8")
    done = sum(row["result"] == "traced" for row in rows)
    print(f"{done}/{len(rows)} traced", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
