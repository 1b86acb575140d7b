"""`amplint check`, `amplint lock`, `amplint trace`, `amplint rule`, `amplint --version`."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from amplint import __version__
from amplint.pipeline.progress import Progress
from amplint.report import FORMATS
from amplint.runtime.gpu import DEFAULT_GPU, GPUS
from amplint.runtime.hf import TASKS as HF_TASKS
from amplint.runtime.target import MODES
from amplint.static.profile import PRECISIONS

if TYPE_CHECKING:
    from amplint.config import Settings
    from amplint.diagnostics import Diagnostic
    from amplint.pipeline.check import CheckRun
    from amplint.pipeline.precision import Precision
    from amplint.report import ReportSummary

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # One line, as every other amplint error: the usage is a `--help` away.
        self.exit(EXIT_ERROR, f"amplint: error: {message} (see `{self.prog} --help`)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="amplint", description="Find PyTorch mixed-precision hazards before they cost a run."
    )
    parser.add_argument("--version", action="version", version=f"amplint {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    check = commands.add_parser("check", help="lint files and directories")
    check.add_argument(
        "paths", nargs="*", metavar="PATH", help="files or directories (default: .); `-` reads standard input"
    )
    check.add_argument(
        "--stdin-filename",
        metavar="PATH",
        help="the file the code on standard input is (its configuration and per-file ignores apply, "
        "reports name it); with --fix the fixed code goes to stdout and the report to stderr",
    )
    check.add_argument("--select", action="append", metavar="CODES", help="rule codes or prefixes to enable")
    check.add_argument(
        "--extend-select", action="append", metavar="CODES", help="rule codes to enable beside the selection"
    )
    check.add_argument("--ignore", action="append", metavar="CODES", help="rule codes or prefixes to disable")
    check.add_argument("--extend-exclude", action="append", metavar="PATTERNS", help="more paths to skip")
    check.add_argument(
        "--format",
        "--output-format",
        dest="format",
        choices=FORMATS,
        help="the report's format (default: text)",
    )
    check.add_argument("--output", "-o", type=Path, metavar="FILE", help="write the report to FILE")
    check.add_argument("--diff", action="store_true", help="show the fixes as a diff; write nothing")
    check.add_argument(
        "--fix", action="store_true", help="apply safe fixes (they change numerics on purpose)"
    )
    check.add_argument(
        "--fix-only",
        action="store_true",
        help="apply safe fixes and report only what was fixed, not the findings left; exit 0 (implies --fix)",
    )
    check.add_argument(
        "--exit-non-zero-on-fix",
        action="store_true",
        help="exit 1 when a fix was applied, even if no finding is left",
    )
    check.add_argument(
        "--unsafe-fixes", action="store_true", help="with --fix or --diff, also the fixes marked unsafe"
    )
    check.add_argument("--show-fixes", action="store_true", help="list the fixes --fix or --diff applied")
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    check.add_argument(
        "--add-noqa", action="store_true", help="add `# noqa: CODE` to the line of every finding; fix nothing"
    )
    check.add_argument(
        "--baseline", type=Path, metavar="FILE", help="report only the findings that FILE does not record"
    )
    check.add_argument(
        "--write-baseline", type=Path, metavar="FILE", help="record the current findings in FILE, then exit 0"
    )
    check.add_argument("--config", type=Path, metavar="FILE", help="pyproject.toml or amplint.toml to use")
    check.add_argument("--quiet", "-q", action="store_true", help="print findings only, no summary")
    check.add_argument(
        "--statistics",
        action="store_true",
        help="count findings per rule (in text, or JSON with --format json)",
    )
    check.add_argument(
        "--show-files", action="store_true", help="print the files a check would read, then exit"
    )
    check.add_argument(
        "--watch",
        "-w",
        action="store_true",
        help="check, then check again whenever a file changes, until interrupted (Ctrl-C)",
    )
    check.add_argument("--no-color", action="store_true", help="never colour the text output")
    check.add_argument("--no-cache", action="store_true", help="neither read nor write .amplint_cache/")
    check.add_argument(
        "--cache-dir", type=Path, metavar="DIR", help="the result cache's folder (default .amplint_cache/)"
    )
    check.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="the half dtypes the code runs in (default: `precision` in [tool.amplint], or auto: detected)",
    )
    check.add_argument(
        "--modes",
        metavar="MODES",
        help="the execution modes the code runs in, e.g. cast-bf16,autocast-fp16 (default: `modes` in "
        "[tool.amplint], else found in the project's scripts, tests and configuration)",
    )
    check.add_argument(
        "--show-conditional",
        action="store_true",
        default=None,
        help="also show findings whose half precision rests on nothing in the project (the caller's choice)",
    )
    check.add_argument(
        "--torch-version",
        metavar="REQUIREMENT",
        help='the torch versions the project supports, e.g. ">=2.1" (default: `torch-version` in '
        "[tool.amplint], else the torch dependency in pyproject.toml)",
    )
    check.add_argument(
        "--explain",
        metavar="FILE:LINE",
        help="print the dtype facts of every expression on that line, and why, then exit",
    )
    check.add_argument(
        "--show-settings",
        nargs="?",
        const=True,
        default=False,
        metavar="PATH",
        help="print the settings (for PATH: the settings that file or folder gets) with where each came "
        "from, and the precision profile, then exit without checking",
    )
    check.add_argument(
        "--confirm",
        action="store_true",
        help="trace the runtime targets and confirm or refute each finding (needs amplint[runtime])",
    )
    check.add_argument(
        "--target",
        action="append",
        metavar="TARGET",
        help="with --confirm: file.py:factory or module:factory to trace (replaces the configured targets)",
    )
    check.add_argument(
        "--deep",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="trace every candidate amplint can run, with no target written: the model classes of the "
        "checked code, built from their defaults, in each mode the project runs them in (needs "
        "amplint[runtime]; `deep = true` in [tool.amplint]; --no-deep: not this run)",
    )
    check.add_argument(
        "--mode",
        choices=MODES,
        help="with --target: the execution mode to trace it in (default: the modes the project runs its file in)",
    )
    check.add_argument("--dtype", choices=("bfloat16", "float16"), help="with --target: autocast dtype")
    check.add_argument("--no-autocast", action="store_true", help="with --target: trace without autocast")
    check.add_argument(
        "--param-dtype", choices=("bfloat16", "float16", "float32"), help="with --target: cast parameters"
    )
    check.add_argument("--show-refuted", action="store_true", help="with --confirm: show refuted findings")
    check.add_argument(
        "--timeout",
        type=_seconds,
        help="with --confirm: seconds each trace may take (default: `timeout` in [tool.amplint.runtime], or 300)",
    )
    check.add_argument(
        "--jobs",
        "-j",
        type=_jobs,
        metavar="N",
        help="worker processes (default: one per CPU when there is enough to check; 1: none)",
    )

    commands.add_parser(
        "server", help="run the language server on stdin/stdout, for editors (needs amplint[lsp])"
    )
    clean = commands.add_parser("clean", help="remove the result cache (.amplint_cache/)")
    clean.add_argument("--config", type=Path, metavar="FILE", help="pyproject.toml or amplint.toml to use")
    clean.add_argument("--cache-dir", type=Path, metavar="DIR", help="the cache folder to remove")

    trace = commands.add_parser("trace", help="trace a model under autocast and show each op's dtype")
    trace.add_argument(
        "target", nargs="?", metavar="TARGET", help="path/to/file.py:factory or package.module:factory"
    )
    hf = trace.add_argument_group(
        "transformers models",
        "--hf-config builds the model of a config.json on the meta device (no weights, no download). "
        "The class: the config's `architectures` entry, else the first head the model type has among "
        "causal LM, seq2seq LM, speech seq2seq, image classification, audio classification, the base "
        "model (seq2seq first for encoder-decoder configs). Inputs follow the model's main input: "
        "token ids drawn from a Zipf law over the vocabulary, pixel values, audio features or "
        "waveforms, and decoder token ids for encoder-decoders; the forward runs as `model(**inputs)` "
        "does, key/value cache included (docs/runtime.md).",
    )
    hf.add_argument("--hf-config", metavar="CONFIG.json", help="trace the transformers model of a config")
    hf.add_argument("--task", choices=sorted(HF_TASKS), help="the head to build (default: see above)")
    hf.add_argument("--layers", type=_count, metavar="N", help="keep N layers of every stack (default: all)")
    hf.add_argument("--seq-len", type=_count, default=128, help="tokens (or audio frames) per sequence (128)")
    hf.add_argument("--batch-size", type=_count, default=1, help="sequences (1)")
    hf.add_argument("--image-size", type=_count, metavar="PIXELS", help="image side (default: the config's)")
    hf.add_argument(
        "--input-ids",
        type=Path,
        metavar="FILE",
        help="token ids to feed instead of drawn ones: a JSON list (or list of lists), or ids separated by spaces",
    )
    hf.add_argument("--text", help="a text to feed, tokenized by the tokenizer saved beside the config")
    hf.add_argument(
        "--attn-implementation",
        choices=("eager", "sdpa"),
        default="eager",
        help="transformers attention (eager: the scores are visible op by op; sdpa: the fused kernel)",
    )
    trace.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="whose autocast policy")
    trace.add_argument(
        "--gpu",
        choices=sorted(GPUS),
        default=DEFAULT_GPU,
        help=f"the GPU emulated without one: its compute capability, bf16 support and attention "
        f"kernels (default {DEFAULT_GPU}; on v100 and t4 a bfloat16 run is traced in float16, as it is run there, "
        "unless the model's code asks torch.cuda.is_bf16_supported(), which torch answers True there)",
    )
    trace.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16", help="autocast dtype")
    trace.add_argument(
        "--mode",
        choices=MODES,
        help="the execution mode to trace in (cast-fp16: --param-dtype float16 --no-autocast; "
        "autocast-fp16: --dtype float16)",
    )
    trace.add_argument("--no-autocast", action="store_true", help="trace without autocast")
    trace.add_argument("--param-dtype", choices=("bfloat16", "float16", "float32"), help="cast parameters")
    trace.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text, json and html report the trace too; the other formats its findings only",
    )
    trace.add_argument("--output", "-o", type=Path, metavar="FILE", help="write the report to FILE")
    trace.add_argument(
        "--ops", action="store_true", help="list every op in a table after the findings (text format)"
    )
    trace.add_argument(
        "--op", metavar="PATTERN", help="only ops matching this glob (e.g. 'soft*'); lists them"
    )
    trace.add_argument(
        "--module", metavar="PATTERN", help="only ops in modules matching this glob; lists them"
    )
    trace.add_argument(
        "--changed-dtype", action="store_true", help="only casts and ops that change dtype; lists them"
    )
    trace.add_argument(
        "--backward",
        action="store_true",
        help="trace the backward pass of a loss too (cross-entropy on random labels for a language "
        "model of --hf-config, else the sum of the outputs) and show each parameter's gradient",
    )
    trace.add_argument(
        "--measure",
        action="store_true",
        help="replay the graph on the target's inputs and weights to measure the error of late upcasts",
    )
    values = trace.add_argument_group(
        "values replay", "run every op on real tensors and against float64 (AMP105-AMP108, AMP111)"
    )
    values.add_argument(
        "--values", action="store_true", help="replay on the target's inputs and weights, against float64"
    )
    values.add_argument(
        "--weights", type=Path, metavar="FILE", help="a .safetensors file or a saved state dict to load first"
    )
    values.add_argument(
        "--graph",
        type=Path,
        metavar="GRAPH.json",
        help="replay with a saved trace's settings (dtype, autocast); another torch version's differences are noted",
    )
    values.add_argument("--headroom-bits", type=float, metavar="BITS", help="AMP106 limit (default 2)")
    values.add_argument("--underflow-fraction", type=float, metavar="F", help="AMP107 limit (default 0.01)")
    values.add_argument(
        "--error-threshold", type=float, metavar="E", help="AMP108: output error that asks (default 0.01)"
    )
    values.add_argument("--error-top", type=_count, metavar="N", help="AMP108: ops to name (default 3)")
    values.add_argument(
        "--lr",
        type=float,
        metavar="LR",
        help="AMP111: the learning rate of the Adam steps checked (default 1e-4)",
    )
    values.add_argument(
        "--lost-update-fraction",
        type=float,
        metavar="F",
        help="AMP111: the share of a parameter's elements whose updates may round away (default 0.1)",
    )
    values.add_argument(
        "--max-memory",
        type=float,
        metavar="GB",
        help="memory the replay may use beyond the weights (default: what is available)",
    )
    trace.add_argument("--timeout", type=_seconds, default=300.0, help="seconds before the trace is given up")
    trace.add_argument(
        "--memory-limit",
        type=_gigabytes,
        metavar="GB",
        help="memory the target's process may take (default: three quarters of the machine's)",
    )
    trace.add_argument(
        "--output-limit",
        type=_count,
        metavar="BYTES",
        help="bytes of a failing target's output shown, from its end (default 65536)",
    )
    trace.add_argument(
        "--replace",
        action="append",
        default=[],
        metavar="MODULE:NAME=FILE.py:FUNCTION",
        help="call FUNCTION where the target's code calls NAME, for the trace only (a kernel that needs a "
        "GPU, for its CPU reference); repeatable, as `replace` in [tool.amplint.runtime]",
    )
    trace.add_argument("--in-process", action="store_true", help="trace in this process (for debugging)")

    lock = commands.add_parser(
        "lock", help="record the dtype every op of the runtime targets runs in (amplint.lock), or check it"
    )
    lock.add_argument(
        "targets",
        nargs="*",
        metavar="TARGET",
        help="file.py:factory or module:factory (default: the configured targets)",
    )
    lock.add_argument(
        "--check",
        action="store_true",
        help="trace again and report each difference from the lock; write nothing",
    )
    lock.add_argument(
        "--update", action="store_true", help="write the lock even where it differs: accept changes"
    )
    lock.add_argument(
        "--lockfile", type=Path, metavar="FILE", help="default: amplint.lock beside the configuration"
    )
    lock.add_argument("--format", choices=FORMATS, default="text")
    lock.add_argument("--output", "-o", type=Path, metavar="FILE", help="write the report to FILE")
    lock.add_argument("--config", type=Path, metavar="FILE", help="pyproject.toml or amplint.toml to use")
    lock.add_argument("--quiet", "-q", action="store_true", help="print findings only, no summary")
    lock.add_argument("--no-color", action="store_true", help="never colour the text output")
    lock.add_argument(
        "--timeout",
        type=_seconds,
        help="seconds each trace may take (default: `timeout` in [tool.amplint.runtime], or 300)",
    )

    rule = commands.add_parser("rule", help="explain a rule, or list them all")
    rule.add_argument("code", nargs="?", help="a rule code such as AMP001")
    rule.add_argument("--all", action="store_true", help="list every rule")
    rule.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _run(argv)
        sys.stdout.flush()  # what is still buffered meets a reader that left here, not at exit
        return code
    except BrokenPipeError:
        # The reader left (`amplint rule AMP001 | head`): stop quietly, with nothing more to write.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR


def _run(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "check":
        if argv is None:  # amplint's own process (not a caller's, which keeps its collector)
            from amplint.pipeline.pool import collect_less

            collect_less()
        return _check(args)
    if args.command == "clean":
        return _clean(args)
    if args.command == "server":
        return _server()
    if args.command == "rule":
        return _rule(args, parser)
    if args.command == "trace":
        return _trace(args)
    if args.command == "lock":
        return _lock(args)
    parser.print_help(sys.stderr)
    return EXIT_ERROR


def _error(message: str) -> int:
    print(f"amplint: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def _check(args: argparse.Namespace) -> int:
    problem = _from_environment(args)
    if problem is not None:
        return _error(problem)
    if args.fix_only:
        args.fix = True
    if args.statistics and args.format not in ("text", "concise", "json"):
        return _error(f"--statistics counts findings in text or json, not in {args.format}")
    if args.watch:
        return _watch(args)
    return _check_once(args)


# Settings an `AMPLINT_*` environment variable gives where no flag does (a flag wins over the
# variable, the variable over the configuration file), as ruff's `RUFF_*` variables: the flag's
# destination, and whether the variable holds a list (comma-separated) or a yes/no.
_ENVIRONMENT: dict[str, tuple[str, str]] = {
    "AMPLINT_SELECT": ("select", "list"),
    "AMPLINT_EXTEND_SELECT": ("extend_select", "list"),
    "AMPLINT_IGNORE": ("ignore", "list"),
    "AMPLINT_EXTEND_EXCLUDE": ("extend_exclude", "list"),
    "AMPLINT_PRECISION": ("precision", "text"),
    "AMPLINT_MODES": ("modes", "text"),
    "AMPLINT_TORCH_VERSION": ("torch_version", "text"),
    "AMPLINT_SHOW_CONDITIONAL": ("show_conditional", "yes/no"),
    "AMPLINT_CACHE_DIR": ("cache_dir", "path"),
    "AMPLINT_NO_CACHE": ("no_cache", "yes/no"),
    "AMPLINT_OUTPUT_FORMAT": ("format", "text"),
    "AMPLINT_OUTPUT_FILE": ("output", "path"),
}
_YES, _NO = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
_CHOICES = {"precision": PRECISIONS, "format": FORMATS}


def _from_environment(args: argparse.Namespace) -> str | None:
    """Fill the `check` flags not given from their `AMPLINT_*` variables (`_ENVIRONMENT`), noting
    which in `args.environment` (for `--show-settings` and error messages); what is wrong with a
    variable's value, or None."""
    args.environment = {}
    for variable, (dest, kind) in _ENVIRONMENT.items():
        value = os.environ.get(variable)
        given = getattr(args, dest)
        if value is None or (given is not None and given is not False):
            continue
        if kind == "yes/no":
            if value.strip().lower() not in _YES + _NO:
                return f"{variable} must be one of {', '.join(_YES)} or {', '.join(_NO[:-1])}, got {value!r}"
            parsed: object = value.strip().lower() in _YES
        elif kind == "list":
            parsed = [value]
        elif kind == "path":
            parsed = Path(value)
        elif dest in _CHOICES and value not in _CHOICES[dest]:
            return f"{variable} must be one of {', '.join(_CHOICES[dest])}, got {value!r}"
        else:
            parsed = value
        setattr(args, dest, parsed)
        args.environment[dest] = variable
    if args.format is None:
        args.format = "text"
    return None


def _named_from_environment(message: str, args: argparse.Namespace) -> str:
    """A settings error naming the `AMPLINT_*` variable a value came from rather than its flag."""
    for dest, variable in args.environment.items():
        message = message.replace("--" + dest.replace("_", "-"), variable)
    return message


def _check_once(args: argparse.Namespace) -> int:
    from amplint.config import ConfigError, load_settings
    from amplint.pipeline.check import run_check
    from amplint.report import ReportSummary, render
    from amplint.rules import check_codes

    if args.fix and args.diff:
        return _error("--fix and --diff cannot be used together")
    if args.add_noqa and (args.fix or args.diff):
        return _error("--add-noqa suppresses findings and --fix/--diff fix them: give one")
    if args.write_baseline is not None and (args.baseline is not None or args.add_noqa or args.fix):
        return _error(
            "--write-baseline records the findings as they are: not with --baseline, --add-noqa or --fix"
        )
    stdin = args.paths == ["-"] or (args.stdin_filename is not None and not args.paths)
    if "-" in args.paths and not stdin:
        return _error("`-` (standard input) cannot be checked together with other paths")
    if args.stdin_filename is not None and not stdin:
        return _error("--stdin-filename names the code on standard input: give `-` as the only path")
    if stdin and (args.confirm or args.deep or args.explain):
        flag = "--confirm" if args.confirm else "--deep" if args.deep else "--explain"
        return _error(f"{flag} reads files: it cannot check standard input")
    if stdin and args.add_noqa:
        return _error("--add-noqa edits files: it cannot suppress findings in standard input")
    if stdin:  # the configuration is found from the named file's folder, or its nearest existing parent
        folder = Path(os.path.abspath(args.stdin_filename or "-")).parent
        paths = [next(p for p in (folder, *folder.parents) if p.is_dir())]
    elif args.show_settings not in (True, False):  # the settings of one file or folder: its nearest
        paths = [Path(args.show_settings)]
    else:
        paths = [Path(p) for p in args.paths] or [Path(".")]
    missing = [str(p) for p in paths if not os.path.lexists(p)]
    if missing:
        return _error(f"path does not exist: {', '.join(missing)}")
    if args.config is not None and not args.config.is_file():
        return _error(f"config file does not exist: {args.config}")
    try:
        settings = load_settings(paths, args.config).with_overrides(
            select=args.select,
            extend_select=args.extend_select,
            ignore=args.ignore,
            extend_exclude=args.extend_exclude,
            precision=args.precision,
            torch_version=args.torch_version,
            cache_dir=args.cache_dir,
            modes=args.modes,
            show_conditional=args.show_conditional,
        )
        check_codes(settings)
    except ConfigError as exc:
        return _error(_named_from_environment(str(exc), args))
    settings = _environment_origins(settings, args)
    _warn_settings(settings)
    if settings.runtime and (problem := _runtime_problem(settings)) is not None:
        return _error(problem)
    from amplint.pipeline.check import write_roots

    roots = write_roots(paths, settings)
    for named in (args.output, args.write_baseline):
        if (refused := _escaping(named, roots)) is not None:
            return refused
    if not (stdin or args.no_cache or args.show_settings or args.explain) and settings.cache_dir is not None:
        from amplint.pipeline.cache import cache_directory, refusal

        if (problem := refusal(cache_directory(settings), settings.root)) is not None:
            return _error(f"{problem}; name a new or empty folder, or run with --no-cache")
    if args.show_settings:
        return _show_settings(paths, settings)
    if args.show_files:
        return _show_files(paths, settings)
    if args.explain:
        return _explain(args.explain, paths, settings)

    fixed_code: bytes | None = None
    try:
        if stdin:
            from amplint.pipeline.check import check_stdin

            run, fixed_code = check_stdin(
                sys.stdin.buffer.read(),
                args.stdin_filename,
                settings,
                fix=args.fix,
                diff=args.diff,
                unsafe_fixes=args.unsafe_fixes,
            )
        elif args.confirm or _deep(args, settings):
            confirmed = _confirmed_run(paths, settings, args)
            if isinstance(confirmed, int):
                return confirmed
            run = confirmed
        else:
            with Progress("checking files", quiet=args.quiet) as progress:
                run = run_check(
                    paths,
                    settings,
                    fix=args.fix,
                    diff=args.diff,
                    unsafe_fixes=args.unsafe_fixes,
                    cache=not args.no_cache,
                    jobs=args.jobs,
                    progress=progress,
                )
    except Exception as exc:  # a bug in amplint, not in the user's code
        import traceback

        traceback.print_exc()
        return _error(f"internal error: {exc}")

    for message in run.warnings:
        print(f"amplint: warning: {message}", file=sys.stderr)
    for message in run.errors:
        print(f"amplint: error: {message}", file=sys.stderr)
    adopted = _adopt(args, run)
    if adopted is not None:
        return adopted
    if args.diff:
        sys.stdout.write("".join(run.diffs))
        sys.stdout.flush()
    if fixed_code is not None:  # standard input fixed: the code owns stdout, as for a formatter
        sys.stdout.buffer.write(fixed_code)
        sys.stdout.flush()
    if args.show_fixes:
        verb = "fixed" if args.fix else "would fix"
        for d in run.applied:
            where = f"{d.path}:{d.line}:{d.column}" if d.cell is None else f"{d.path}:cell {d.cell}:{d.line}"
            assert d.fix is not None
            print(
                f"amplint: {verb} {where} {d.code} ({d.fix.applicability}): {d.fix.description}",
                file=sys.stderr,
            )
    summary = ReportSummary(
        traced=run.traced,
        files_checked=run.files_checked,
        fixed=run.fixed,
        fix_applied=args.fix,
        diff=args.diff,
        unsafe_fixes=args.unsafe_fixes,
        root=str(settings.root),
        quiet=args.quiet,
        conditional=run.conditional,
        unchecked=run.unchecked,
    )
    if args.fix_only and args.format in ("text", "concise"):
        report = _fix_only_summary(run, summary)
    else:  # --fix-only: the findings left are not reported, in any format
        report = render(
            args.format,
            [] if args.fix_only else run.diagnostics,
            sources=run.sources,
            color=_color(args),
            statistics=args.statistics,
            summary=summary,
        )
    # The diff (or the fixed standard input) owns stdout so that it can be piped on; the report goes
    # to stderr.
    written = _write_report(
        report, args.output, sys.stderr if args.diff or fixed_code is not None else sys.stdout
    )
    if written is not None:
        return written
    if run.errors:
        return EXIT_ERROR
    if args.exit_zero:
        return EXIT_CLEAN
    if args.exit_non_zero_on_fix and run.fixed:
        return EXIT_FINDINGS
    if args.fix_only:
        return EXIT_CLEAN
    return EXIT_FINDINGS if run.diagnostics or (args.diff and run.diffs) else EXIT_CLEAN


def _environment_origins(settings: Settings, args: argparse.Namespace) -> Settings:
    """`settings` with the values an `AMPLINT_*` variable gave said to come from that variable."""
    if not args.environment:
        return settings
    from dataclasses import replace

    origins = tuple(
        (key, args.environment.get(key, origin) if origin.startswith("--") else origin)
        for key, origin in settings.origins
    )
    return replace(settings, origins=origins)


def _fix_only_summary(run: CheckRun, summary: ReportSummary) -> str:
    """`--fix-only`'s text report: what was fixed, and what `--unsafe-fixes` would fix more (the
    findings left are not reported)."""
    if summary.quiet:
        return ""
    from amplint.report import fix_counts

    _, hidden = fix_counts(run.diagnostics, summary)
    line = f"Fixed {run.fixed} finding{'s' * (run.fixed != 1)}" if run.fixed else "No findings fixed"
    if hidden:
        line += f" ({hidden} more fix{'es' * (hidden != 1)} available with --unsafe-fixes)"
    return line + ".\n"


def _show_files(paths: list[Path], settings: Settings) -> int:
    """`check --show-files`: the files a check of `paths` reads, one absolute path a line, sorted."""
    from amplint.pipeline.discovery import discover

    for path in sorted(os.path.abspath(path) for path in discover(paths, settings).files):
        print(path)
    return EXIT_CLEAN


# Seconds between two looks at the watched files' sizes and modification times.
_WATCH_EVERY = 0.5


def _watch(args: argparse.Namespace) -> int:
    """`check --watch`: check, then check again whenever a file the check reads, or a configuration
    file beside one, is changed, added or removed, until interrupted (Ctrl-C, or a `kill`: exit 0);
    each check's report is whole. The files' sizes and modification times are polled: no watcher
    library is needed."""
    import signal
    import time
    from datetime import datetime

    if args.paths == ["-"] or args.stdin_filename is not None:
        return _error("--watch checks files again as they change: not standard input")
    for flag in ("diff", "add_noqa", "write_baseline", "show_settings", "show_files", "explain", "confirm"):
        if getattr(args, flag):
            return _error(f"--watch cannot be used with --{flag.replace('_', '-')}")
    paths = [Path(p) for p in args.paths] or [Path(".")]
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        print(f"[{datetime.now():%H:%M:%S}] Watching for changes; Ctrl-C ends.", flush=True)
        while True:
            before = _watched(paths, args.config)
            _check_once(args)
            sys.stdout.flush()
            # A change made while the check ran is checked next; what --fix wrote is no change.
            seen = _watched(paths, args.config) if args.fix else before
            while _watched(paths, args.config) == seen:
                time.sleep(_WATCH_EVERY)
            print(f"[{datetime.now():%H:%M:%S}] A file changed: checking again.", flush=True)
    except KeyboardInterrupt:
        return EXIT_CLEAN


def _watched(paths: list[Path], config: Path | None) -> dict[str, tuple[int, int]]:
    """(modification time, size) of each file a check of `paths` reads and each configuration file
    beside them: a file added or removed adds or removes a key."""
    from amplint.config import ConfigError, load_settings
    from amplint.pipeline.discovery import discover

    files: list[Path] = []
    with contextlib.suppress(ConfigError):  # a configuration being edited: its next save shows
        files = discover(paths, load_settings(paths, config)).files
    folders = {path.parent for path in files} | {p if p.is_dir() else p.parent for p in paths}
    watched = [*files, *(folder / name for folder in folders for name in _CONFIG_FILES)]
    if config is not None:
        watched.append(config)
    state: dict[str, tuple[int, int]] = {}
    for path in watched:
        with contextlib.suppress(OSError):
            status = path.stat()
            state[str(path)] = (status.st_mtime_ns, status.st_size)
    return state


_CONFIG_FILES = ("pyproject.toml", "amplint.toml", ".gitignore")


def _runtime_problem(settings: Settings) -> str | None:
    """What is wrong with `[tool.amplint.runtime]`, checked whether or not this run traces: a wrong
    value there is found when it is written, not on the first `--confirm` (an unknown key is a
    warning)."""
    from amplint.runtime.target import TargetError, target_specs, trace_timeout, unknown_keys

    for message in unknown_keys(settings.runtime):
        print(f"amplint: warning: {settings.config_path}: {message}", file=sys.stderr)
    try:
        target_specs(settings.runtime, None, settings.root)
        trace_timeout(settings.runtime, None)
    except TargetError as exc:
        return f"{settings.config_path}: {exc}"
    return None


_SHOWN_KEYS = (
    "select",
    "extend_select",
    "ignore",
    "per_file_ignores",
    "exclude",
    "extend_exclude",
    "precision",
    "modes",
    "torch_version",
    "target_version",
    "max_file_size",
    "cache_dir",
)


def _show_settings(paths: list[Path], settings: Settings) -> int:
    """`check --show-settings`: what a check of `paths` would run with, the precision profile
    included (detected from the files it would check, as the check does), without checking."""
    from amplint.pipeline.cache import cache_directory
    from amplint.pipeline.discovery import discover
    from amplint.pipeline.precision import project_precision
    from amplint.rules import selected_rules

    found = discover(paths, settings)
    from amplint.source import display_path

    precision = project_precision(settings, found.files)
    rules = [rule.code for rule in selected_rules(settings, precision.default)]
    chain = [
        path for path in dict.fromkeys(origin for _, origin in settings.origins) if path.endswith(".toml")
    ]
    extended = [path for path in chain if path != str(settings.config_path)]
    lines = [
        f"config file: {settings.config_path or 'none (defaults)'}"
        + (f" (extends {', '.join(extended)})" if extended else ""),
        f"root: {settings.root}",
        f"files: {len(found.files)}",
        f"select: {', '.join(settings.select)}",
        f"extend-select: {', '.join(settings.extend_select) or '-'}",
        f"ignore: {', '.join(settings.ignore) or '-'}",
        f"rules: {', '.join(rules) or '-'}",
        "per-file-ignores:" + ("" if settings.per_file_ignores else " -"),
        *(f"  {glob} = {', '.join(codes)}" for glob, codes in settings.per_file_ignores),
        f"exclude: {', '.join(settings.exclude) or '-'}",
        f"extend-exclude: {', '.join(settings.extend_exclude) or '-'}",
        f"precision: {settings.precision}",
        f"modes: {', '.join(settings.modes) or 'auto (found in the project)'}",
        f"torch-version: {settings.torch_version or 'any (none declared)'}",
        f"target-version: {settings.target_version or f'{precision.default.python[0]}.{precision.default.python[1]} (none declared: the newest amplint parses)'}",
        f"max-file-size: {settings.max_file_size}",
        f"cache-dir: {cache_directory(settings)}",
        f"show-conditional: {str(settings.show_conditional).lower()}",
        *_show_modes(precision, [display_path(path) for path in found.files]),
        "from:",
        *(f"  {key.replace('_', '-')}: {settings.origin(key)}" for key in _SHOWN_KEYS),
    ]
    print("\n".join(lines))
    return EXIT_CLEAN


def _show_modes(precision: Precision, files: list[str]) -> list[str]:
    """The execution modes of `--show-settings`: where the project sets a precision (its entry
    points), and per checked file the modes that reach it, with the chain that does."""
    if precision.modes is None:  # configured: one profile for every file
        return [f"profile: {precision.default.describe()}"]
    lines = ["profile: per file, from the execution modes", f"project: {precision.root}"]
    entries = precision.modes.entries
    if not entries:
        lines.append("entry points: none: every finding is conditional (--show-conditional)")
    else:
        lines.append(f"entry points: {len(entries)}")
        shown = [
            f"  {why.path}:{why.line}: {why.mode.name} `{why.what}` ({why.role})" for why in entries[:20]
        ]
        lines += shown + ([f"  ... and {len(entries) - 20} more"] if len(entries) > 20 else [])
    reached = [(file, precision.of(file)) for file in files if precision.of(file).modes]
    if reached:
        lines.append("modes per file:")
        for file, profile in reached:
            lines.append(f"  {file}:")
            lines += [f"    {why.describe()} ({why.role})" for why in profile.modes]
    return lines


def _explain(target: str, paths: list[Path], settings: Settings) -> int:
    """`check --explain FILE:LINE`: the engine's facts on one line, under the file's precision."""
    from amplint.pipeline.discovery import discover
    from amplint.pipeline.precision import project_precision
    from amplint.source import display_path
    from amplint.static.explain import ExplainError, explain

    precision = project_precision(settings, discover(paths, settings).files)
    file = target.rsplit(":", 1)[0]
    try:
        print(explain(target, precision.of(display_path(Path(file)))))
    except ExplainError as exc:
        return _error(str(exc))
    return EXIT_CLEAN


def _confirmed_run(paths: list[Path], settings: Settings, args: argparse.Namespace) -> CheckRun | int:
    """The check with every finding joined to the traced runtime targets (and, with --fix, each
    fix verified by a new trace); with --deep, to the model classes found in the checked code too,
    traced in the modes the project runs them in. An exit code on a usage error. The traces run in
    child processes: this one only needs to know that torch is there, not to import it."""
    deep = _deep(args, settings)
    flag = "--deep" if deep else "--confirm"
    if importlib.util.find_spec("torch") is None:
        return _error(f"{flag} traces the model and needs torch: pip install 'amplint[runtime]'")
    from amplint.diagnostics import Confidence
    from amplint.fixing.confirm import Traced
    from amplint.pipeline import deep as deep_pass
    from amplint.pipeline.check import run_check
    from amplint.pipeline.precision import project_precision
    from amplint.runtime.target import TargetError, child_limits, target_specs, trace_timeout

    try:
        overrides = _mode_overrides(args)
        specs = target_specs(settings.runtime, args.target, settings.root, overrides, as_built=True)
        timeout = trace_timeout(settings.runtime, args.timeout)
        child = child_limits(settings.runtime, settings.root)
    except TargetError as exc:
        return _error(str(exc))
    if not specs and not deep:
        return _error(
            "--confirm needs a runtime target: --target file.py:factory, or `targets` in [tool.amplint.runtime]"
            " (or --deep: amplint finds the models itself)"
        )
    from amplint.runtime.child import prepare

    prepare(specs)  # torch is imported for the traces while the static pass runs
    warnings: list[str] = []
    if args.target and not _given_mode(args):
        # A target given by hand runs in the modes the project runs its file in, when it has any.
        precision = project_precision(settings, paths)
        specs = [
            {**spec, **mode} for spec in specs for mode in _file_modes(precision, spec["target"]) or [{}]
        ]
    untraced: dict[str, str] = {}
    planned: list[dict[str, Any]] = []

    def trace(diagnostics: Sequence[Diagnostic]) -> list[Traced]:
        if deep and not planned:
            # Planned once, from the first check: a fix is judged by tracing the same models again,
            # also when it leaves their file without candidates.
            plan = deep_pass.plan(diagnostics, project_precision(settings, paths), child)
            untraced.update(plan.untraced)
            planned.extend(plan.specs)
        return deep_pass.trace_all([*specs, *planned], diagnostics, timeout, warnings)

    try:  # the first trace comes before any fix is written: a bad target leaves the files alone
        if args.fix:
            from amplint.pipeline.verify import fix_and_verify

            run, outcomes = fix_and_verify(paths, settings, trace, jobs=args.jobs)
            for outcome in outcomes:
                print(f"amplint: fix {outcome}", file=sys.stderr)
        elif args.diff:
            from amplint.pipeline.verify import preview

            run = preview(paths, settings, trace, jobs=args.jobs)
        else:
            # The trace decides: conditional candidates and those of the opt-in rules are traced
            # too, and shown once a trace confirms or refutes them.
            every = settings.with_overrides(
                show_conditional=True, extend_select=(*settings.extend_select, *_opt_in_codes())
            )
            run = run_check(paths, every, cache=not args.no_cache, jobs=args.jobs)
            # Hidden unless a trace confirms or refutes them: the conditional findings (counted, as
            # a plain check counts them) and those of rules the user's settings leave off (not
            # counted: a plain check never makes them).
            off = {d.sort_key for d in run.diagnostics if not _selected(settings, run, d)}
            conditional = {
                d.sort_key
                for d in run.diagnostics
                if d.confidence is Confidence.CONDITIONAL and not settings.show_conditional
            }
            hidden = off | conditional
            traced = trace(run.diagnostics)
            run.diagnostics = deep_pass.judge(run.diagnostics, traced, untraced)
            judged = (Confidence.CONFIRMED, Confidence.REFUTED)
            if deep:
                # A candidate of a rule the settings leave off counts only where a trace judged it:
                # unreached, it stays as the plain check left it, which never made it.
                run.traced = deep_pass.counts(
                    [d for d in run.diagnostics if d.sort_key not in off or d.confidence in judged]
                )
            shown = [d for d in run.diagnostics if d.sort_key not in hidden or d.confidence in judged]
            kept = {d.sort_key for d in shown}
            run.conditional += sum(
                1 for d in run.diagnostics if d.sort_key in conditional - off and d.sort_key not in kept
            )
            run.diagnostics = shown
    except TargetError as exc:
        return _error(f"runtime target {exc}")
    run.warnings.extend(dict.fromkeys(warnings))
    if not args.show_refuted:
        run.diagnostics = [d for d in run.diagnostics if d.confidence is not Confidence.REFUTED]
    _read_sources(run.diagnostics, run.sources)
    return run


def _deep(args: argparse.Namespace, settings: Settings) -> bool:
    """`--deep`, `--no-deep`, else `deep` in the configuration."""
    return settings.deep if args.deep is None else bool(args.deep)


def _opt_in_codes() -> list[str]:
    """The codes of the rules whose candidates a trace judges, those off by default too: a rule no
    trace judges (AMP014's stable forms, the API rules) keeps the user's selection, since its
    findings could only be hidden again."""
    from amplint.rules import all_rules

    return [rule.code for rule in all_rules() if rule.confirmable()]


def _selected(settings: Settings, run: CheckRun, diagnostic: Diagnostic) -> bool:
    """Whether the user's own settings turn on the rule of `diagnostic` for its file."""
    from amplint.rules import rules_for

    path = Path(diagnostic.path)
    return any(
        rule.code == diagnostic.code for rule in rules_for(settings, path, run.precision.of(diagnostic.path))
    )


def _given_mode(args: argparse.Namespace) -> bool:
    return bool(args.mode or args.param_dtype or args.no_autocast or args.dtype)


def _mode_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The trace settings `--mode`, or `--dtype`, `--param-dtype` and `--no-autocast`, give every
    target named on the command line (as `amplint trace` takes them)."""
    from amplint.runtime.target import TargetError, mode_settings

    if args.mode and (args.param_dtype or args.no_autocast or args.dtype):
        raise TargetError("give --mode, or --dtype/--param-dtype/--no-autocast, not both")
    if args.mode:
        return mode_settings(args.mode)
    overrides: dict[str, object] = {}
    if args.dtype:
        overrides["dtype"] = args.dtype
    if args.param_dtype:
        overrides["param_dtype"] = args.param_dtype
    if args.no_autocast:
        overrides["autocast"] = False
    return overrides


def _file_modes(precision: Precision, target: str) -> list[dict[str, object]]:
    """The trace settings of each mode the project runs a target's file in (none for a target
    named by module, or a file no mode reaches)."""
    from amplint.runtime.target import mode_settings
    from amplint.source import display_path

    where = target.rpartition(":")[0]
    if not where.endswith(".py"):
        return []
    names = dict.fromkeys(why.mode.name for why in precision.of(display_path(Path(where))).modes)
    return [mode_settings(name) for name in names]


def _read_sources(diagnostics: Sequence[Diagnostic], sources: dict[str, str]) -> None:
    """The text of each file a runtime finding points at, for the report's snippets. A file the
    static pass had findings in is kept with only their lines (the others emptied): it is read again
    when a runtime finding's line is not among them."""
    from amplint.source import source_line

    missing = {
        d.path
        for d in diagnostics
        if d.cell is None and not (source_line(sources.get(d.path), d.line) or "").strip()
    }
    for path in missing:
        if os.path.isfile(path):
            with contextlib.suppress(OSError, UnicodeDecodeError):
                sources[path] = Path(path).read_text(encoding="utf-8")


def _positive(unit: str) -> Callable[[str], float]:
    """An argparse type for a positive, finite number of `unit`."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of {unit}, got {value!r}") from None
        if not math.isfinite(number) or number <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number of {unit}, got {value}")
        return number

    return parse


_seconds = _positive("seconds")
_gigabytes = _positive("gigabytes")


def _at_least_one(what: str, unit: str = "") -> Callable[[str], int]:
    """An argparse type for a whole number of at least 1, named `what` (and `unit`) in its errors."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}") from None
        if number < 1:
            raise argparse.ArgumentTypeError(f"expected at least 1{unit}, got {number}")
        return number

    return parse


_count = _at_least_one("a whole number")
_jobs = _at_least_one("a number of processes", " process")


def _project_settings(args: argparse.Namespace) -> Settings | int:
    """The settings of the project around the working directory (`--config` if given); an exit code
    on error."""
    from amplint.config import ConfigError, load_settings

    if args.config is not None and not args.config.is_file():
        return _error(f"config file does not exist: {args.config}")
    try:
        settings = load_settings([Path(".")], args.config)
    except ConfigError as exc:
        return _error(str(exc))
    _warn_settings(settings)
    return settings


def _warn_settings(settings: Settings) -> None:
    for message in settings.warnings:
        print(f"amplint: warning: {message}", file=sys.stderr)


def _adopt(args: argparse.Namespace, run: CheckRun) -> int | None:
    """`--write-baseline`, `--add-noqa` (each ends the run: an exit code) and `--baseline` (leaves
    out the recorded findings from `run`)."""
    from amplint.pipeline import baseline

    try:
        if args.write_baseline is not None:
            count = baseline.write(args.write_baseline, run.diagnostics, run.sources)
            print(f"amplint: recorded {count} findings in {args.write_baseline}", file=sys.stderr)
            return EXIT_ERROR if run.errors else EXIT_CLEAN
        if args.baseline is not None:
            run.diagnostics, known = baseline.new_findings(args.baseline, run.diagnostics, run.sources)
            if known:
                print(f"amplint: {known} findings recorded in {args.baseline} left out", file=sys.stderr)
    except baseline.BaselineError as exc:
        return _error(str(exc))
    if not args.add_noqa:
        return None
    from amplint.pipeline.check import add_noqa

    changed, left = add_noqa(run)
    for message in left:
        print(f"amplint: warning: {message}", file=sys.stderr)
    print(f"amplint: added `# noqa` to {changed} line{'s' * (changed != 1)}", file=sys.stderr)
    return EXIT_ERROR if run.errors else EXIT_CLEAN


def _server() -> int:
    if importlib.util.find_spec("pygls") is None:
        return _error("the language server needs pygls: pip install 'amplint[lsp]'")
    from amplint.integrations.lsp import serve

    serve()
    return EXIT_CLEAN


def _clean(args: argparse.Namespace) -> int:
    from amplint.pipeline.cache import cache_directory, clean

    settings = _project_settings(args)
    if isinstance(settings, int):
        return settings
    try:
        print(clean(cache_directory(settings.with_overrides(cache_dir=args.cache_dir)), settings.root))
    except OSError as exc:
        return _error(f"cannot remove the cache: {exc}")
    return EXIT_CLEAN


def _trace(args: argparse.Namespace) -> int:
    from amplint.fixing.confirm import graph_findings
    from amplint.runtime.report import render_json, render_text, select

    if importlib.util.find_spec("torch") is None:
        return _error("tracing needs torch: pip install 'amplint[runtime]'")
    from amplint.runtime.child import ChildError, run_traced, trace_in_child
    from amplint.runtime.target import TargetError, mode_settings, replacements

    if (args.target is None) == (args.hf_config is None):
        return _error("give a TARGET such as fixtures/rwkv7_time_mix.py:factory, or --hf-config CONFIG.json")
    hf_only = {
        "--task": args.task,
        "--layers": args.layers,
        "--image-size": args.image_size,
        "--input-ids": args.input_ids,
        "--text": args.text,
    }
    given = [flag for flag, value in hf_only.items() if value is not None]
    if args.target is not None and given:
        return _error(f"{', '.join(given)}: only for --hf-config (a factory builds its own model and inputs)")
    if args.input_ids is not None and args.text is not None:
        return _error("give --input-ids or --text, not both")
    if args.mode and (args.no_autocast or args.param_dtype or args.dtype != "bfloat16" or args.graph):
        return _error("give --mode, or --dtype/--param-dtype/--no-autocast (or --graph), not both")
    limits = _value_limits(args)
    if isinstance(limits, int):
        return limits
    try:
        replace = replacements(
            dict(entry.partition("=")[::2] for entry in args.replace), Path.cwd(), "--replace"
        )
    except TargetError as exc:
        return _error(str(exc))
    if (args.weights is not None or args.graph is not None) and not args.values:
        return _error("--weights and --graph are for the values replay: add --values")
    saved = None
    if args.graph is not None:
        from amplint.runtime.graph import DtypeGraph

        try:
            saved = DtypeGraph.load(args.graph)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return _error(f"cannot read the saved graph {args.graph}: {exc}")
    spec = {
        "target": args.target,
        "hf_config": args.hf_config,
        "task": args.task,
        "layers": args.layers,
        "seq_len": args.seq_len,
        "batch_size": args.batch_size,
        "image_size": args.image_size,
        "input_ids": None if args.input_ids is None else str(args.input_ids.resolve()),
        "text": args.text,
        "attn_implementation": args.attn_implementation,
        "gpu": args.gpu,
        "device": args.device if saved is None else saved.device,
        "dtype": args.dtype if saved is None else saved.dtype,
        "autocast": not args.no_autocast if saved is None else saved.autocast,
        "param_dtype": args.param_dtype if saved is None else saved.param_dtype,
        **(mode_settings(args.mode) if args.mode else {}),
        # No mode given: a factory's model that holds half-precision weights runs so, without
        # autocast (a config's model takes its dtype from the config, and the autocast given).
        "as_built": saved is None
        and args.target is not None
        and not (args.mode or args.no_autocast or args.param_dtype or args.dtype != "bfloat16"),
        "measure": args.measure,
        "values": args.values,
        "backward": args.backward,
        "weights": None if args.weights is None else str(args.weights.resolve()),
        "limits": limits,
        "max_memory": None if args.max_memory is None else int(args.max_memory * 1024**3),
        "memory_limit": None if args.memory_limit is None else int(args.memory_limit * 1024**3),
        "output_limit": args.output_limit,
        "replace": replace,
    }
    try:
        if args.in_process:
            from amplint.runtime.tracer import TraceError

            try:
                graph = run_traced(spec)
            except TraceError as exc:  # a ReplayError too
                return _error(str(exc))
        else:
            with Progress(f"tracing {args.target or args.hf_config}"):
                graph = trace_in_child(spec, args.timeout)
    except (TargetError, ChildError) as exc:
        return _error(str(exc))
    if saved is not None and graph.values is not None:
        graph.values.notes.extend(graph.differences_from(saved))
    nodes = select(graph, op=args.op, module=args.module, changed_dtype=args.changed_dtype)
    # `trace` applies no fix (`check --confirm --fix` does): the findings are shown without one.
    findings = graph_findings(graph, args.target or args.hf_config, fixes=False)
    sources: dict[str, str] = {}  # the lines the findings show, read unless the JSON holds no snippets
    if args.format != "json":
        _read_sources(findings, sources)
    if args.format == "json":
        report = render_json(graph, nodes, findings)
    elif args.format == "html":
        import json

        from amplint.report.html import render_trace

        document = json.loads(render_json(graph, nodes, findings))
        report = render_trace(document, findings, sources=sources, target=args.target or args.hf_config)
    else:
        from amplint.report import render

        if args.format != "text":
            report = render(args.format, findings, sources=sources, color=False)
        else:
            # A filter asks for the ops it matches: the table is shown for it as for --ops.
            listed = args.ops or args.op is not None or args.module is not None or args.changed_dtype
            shown = render("text", findings, sources=sources, color=False)
            report = render_text(
                graph, nodes, target=args.target or args.hf_config, findings=shown, ops=listed
            )
    if (refused := _escaping(args.output, [Path.cwd()])) is not None:
        return refused
    written = _write_report(report, args.output, sys.stdout)
    if written is not None:
        return written
    if args.values and graph.values is None:  # asked for and not done: never a silent pass
        return _error(f"--values: nothing was replayed: {graph.values_note or 'no values'}")
    return EXIT_FINDINGS if findings else EXIT_CLEAN


def _lock(args: argparse.Namespace) -> int:
    from amplint.lock.command import LockError, Mode, lock_path, run_lock
    from amplint.report import ReportSummary, render

    if args.check and args.update:
        return _error("--check writes nothing and --update writes: give one of them")
    settings = _project_settings(args)
    if isinstance(settings, int):
        return settings
    if importlib.util.find_spec("torch") is None:
        return _error("amplint lock traces the model and needs torch: pip install 'amplint[runtime]'")
    mode: Mode = "check" if args.check else "update" if args.update else "write"
    if (refused := _escaping(args.output, [settings.root])) is not None:
        return refused
    try:
        run = run_lock(
            settings, args.targets, mode=mode, path=lock_path(settings, args.lockfile), timeout=args.timeout
        )
    except LockError as exc:
        return _error(str(exc))
    for message in run.warnings:
        print(f"amplint: warning: {message}", file=sys.stderr)
    print(f"amplint: {run.status}", file=sys.stderr)
    if not run.diagnostics and mode != "check":
        return EXIT_CLEAN  # a lock written or up to date: there is nothing to report
    sources: dict[str, str] = {}
    _read_sources(run.diagnostics, sources)
    summary = ReportSummary(root=str(settings.root), quiet=args.quiet)
    report = render(args.format, run.diagnostics, sources=sources, color=_color(args), summary=summary)
    written = _write_report(report, args.output, sys.stdout)
    if written is not None:
        return written
    return EXIT_FINDINGS if run.differs else EXIT_CLEAN


def _color(args: argparse.Namespace) -> bool:
    """Colour for a text report on stdout: on a terminal, or wherever `FORCE_COLOR` asks for it (a CI
    log); never with `--no-color`, a non-empty `NO_COLOR` (no-color.org) or into a file."""
    if args.output is not None or args.no_color or os.environ.get("NO_COLOR"):
        return False
    return bool(os.environ.get("FORCE_COLOR")) or sys.stdout.isatty()


def _escaping(path: Path | None, roots: Sequence[Path]) -> int | None:
    """An exit code when writing `path`, which lies in one of `roots`, would land outside them through
    a symbolic link (one committed to the repository, say)."""
    from amplint.source import escapes

    if path is None or (target := escapes(path, roots)) is None:
        return None
    return _error(
        f"{path} leads to {target} through a symbolic link, outside the checked folders; not written"
    )


def _write_report(report: str, output: Path | None, stream: TextIO) -> int | None:
    """Write the report to `output` (its folder made) or to `stream`; an exit code if it cannot."""
    if output is None:
        stream.write(report)
        return None
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(report, encoding="utf-8")
    except OSError as exc:
        return _error(f"cannot write {output}: {exc.strerror or exc}")
    return None


def _value_limits(args: argparse.Namespace) -> dict[str, float | int] | int:
    """The value rules' limits: `[tool.amplint.runtime]`'s, then the flags'; an exit code on error."""
    from amplint.config import ConfigError, load_settings
    from amplint.runtime.target import LIMITS, TargetError, value_limits

    try:
        configured = value_limits(load_settings([Path(".")], None).runtime, "[tool.amplint.runtime]")
        flags = {key: getattr(args, key.replace("-", "_")) for key in LIMITS}
        given = value_limits({k: v for k, v in flags.items() if v is not None}, "the command line")
    except (ConfigError, TargetError) as exc:
        return _error(str(exc))
    return {**configured, **given}


def _rule(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from amplint.docs import rule_json, rule_page, rule_table
    from amplint.rules import rule_by_code

    if args.all:
        print(rule_json(None) if args.format == "json" else rule_table(markdown=args.format == "markdown"))
        return EXIT_CLEAN
    if not args.code:
        return _error("give a rule code such as AMP001, or --all")
    rule = rule_by_code(args.code)
    if rule is None:
        return _error(f"unknown rule {args.code!r}; `amplint rule --all` lists them")
    print(rule_json(rule) if args.format == "json" else rule_page(rule))
    return EXIT_CLEAN
