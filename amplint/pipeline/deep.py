"""`amplint check --deep`: every candidate of the static pass, in code amplint can run, traced in
the execution modes the project runs that code in, and confirmed or refuted; no target written by
hand.

The model classes of each file that holds a candidate are read from its text: the `nn.Module`
subclasses that no other class of the file builds or extends (the outermost; of a transformers
model family, one head). Each is built from its defaults in the trace's child process
(`amplint.runtime.discover`) and traced once per mode the project-wide pass found for it (for the
class, else for its file), never in another. The traces join the findings through the one confirm
path (`amplint.fixing.confirm`); a candidate no trace reaches stays as the static pass left it,
marked `unreached`, with why.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from amplint.diagnostics import Confidence, Diagnostic
from amplint.fixing.confirm import EVIDENCE, TARGETS, Traced, confirm, finding_lines, rule_is_runtime
from amplint.pipeline.notebook import SUFFIX as NOTEBOOK
from amplint.pipeline.precision import Precision
from amplint.rules import rule_by_code
from amplint.source import SourceError, read_source
from amplint.static.profile import ModeWhy

# The inputs made up for a class built from its defaults: enough tokens to meet every op.
SEQ_LEN, BATCH_SIZE = 32, 2
_MODULE_BASE = re.compile(r"(?:Module|Model|Layer|For[A-Z]\w*)$")
_PRETRAINED = "PreTrainedModel"
# The head kept of a transformers model family, in order of preference: the others share its body.
_HEAD_NAME = re.compile(r"For[A-Z]\w*$")  # a transformers head whose base another file defines
_HEADS = (re.compile(r"ForCausalLM$"), re.compile(r"(?<!PreTrained)Model$"))

NOT_CONFIRMED = "not confirmed"  # reached, but the trace neither confirms nor refutes it
OUTCOMES = ("confirmed", "refuted", "unreached", NOT_CONFIRMED)


@dataclass
class DeepPlan:
    """What `--deep` traces: one spec per model class and mode; and, per file (display path) with
    candidates that nothing traces, why."""

    specs: list[dict[str, Any]] = field(default_factory=list)
    untraced: dict[str, str] = field(default_factory=dict)


def candidates(diagnostics: Sequence[Diagnostic]) -> list[Diagnostic]:
    """The findings a trace can confirm or refute."""
    return [d for d in diagnostics if (rule := rule_by_code(d.code)) is not None and rule.confirmable()]


def plan(diagnostics: Sequence[Diagnostic], precision: Precision, child: dict[str, int]) -> DeepPlan:
    """The traces that reach the candidates among `diagnostics`, in the modes `precision` gives
    their code; `child`: the trace's process limits (`amplint.runtime.target.child_limits`)."""
    deep = DeepPlan()
    for display in dict.fromkeys(d.path for d in candidates(diagnostics)):
        if display.endswith(NOTEBOOK):
            # Building a notebook's class means running the cells before it, training loops included.
            deep.untraced[display] = (
                "not traced: a notebook's classes are not built (move the model into a module)"
            )
            continue
        try:
            text = read_source(Path(display)).text
        except SourceError as exc:
            deep.untraced[display] = f"not traced: {exc.message}"
            continue
        classes = model_classes(text)
        if not classes:
            deep.untraced[display] = "not traced: the file defines no nn.Module class to build"
            continue
        modeless: list[str] = []
        for name in classes:
            modes = class_modes(precision, display, name)
            if not modes:
                modeless.append(name)
            for mode in modes:
                deep.specs.append(_spec(display, name, mode, child))
        if len(modeless) == len(classes):
            deep.untraced[display] = (
                "not traced: nothing in the project runs this code in bf16/fp16 "
                "(`modes` in [tool.amplint], or --modes, names the modes its callers use)"
            )
    return deep


def class_modes(precision: Precision, display: str, name: str) -> list[str]:
    """The modes the project runs class `name` of `display` in: those that reach the class, else
    those of its file."""
    whys: tuple[ModeWhy, ...] = ()
    if precision.modes is not None:
        whys = precision.modes.definitions.get(display, {}).get(name, ())
    whys = whys or precision.of(display).modes
    return list(dict.fromkeys(why.mode.name for why in whys))


def _spec(display: str, name: str, mode: str, child: dict[str, int]) -> dict[str, Any]:
    from amplint.runtime.target import mode_settings  # plain Python: no torch import

    return {
        "name": f"{display}:{name} [{mode}]",
        "target": f"{os.path.abspath(display)}:{name}",
        "auto": True,
        "hf_config": None,
        **mode_settings(mode),
        "seq_len": SEQ_LEN,
        "batch_size": BATCH_SIZE,
        "measure": True,
        "values": True,  # replayed against float64 too: the overflow a cast or a product makes, measured
        "limits": {},
        "weights": None,
        "compare_cpu": False,  # the project runs this mode on the GPU; CPU autocast is not its question
        **child,
    }


def model_classes(text: str) -> list[str]:
    """The outermost model classes of a file: top-level `nn.Module` subclasses (through the file's
    own classes) that no other class of the file builds or derives from; of a transformers model
    family, only its preferred head."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    bases = {name: [_last(base) for base in node.bases] for name, node in classes.items()}
    modules: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, names in bases.items():
            if name not in modules and any(b in modules or _MODULE_BASE.search(b) for b in names):
                modules.add(name)
                changed = True
    used = {b for name in modules for b in bases[name]}
    for name in classes:  # built by any class of the file (a layer that transformers' base wraps)
        used.update(
            called
            for node in ast.walk(classes[name])
            if isinstance(node, ast.Call) and (called := _last(node.func)) != name
        )
    tops = [
        name for name in classes if name in modules and name not in used and not name.endswith(_PRETRAINED)
    ]
    family = [name for name in tops if _pretrained(name, bases) or _HEAD_NAME.search(name)]
    if len(family) > 1:
        keep = next((n for pattern in _HEADS for n in family if pattern.search(n)), family[0])
        tops = [name for name in tops if name not in family or name == keep]
    return tops


def _last(node: ast.expr) -> str:
    """The last name of `a.b.C` (or of `C[...]`)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _pretrained(name: str, bases: dict[str, list[str]], seen: frozenset[str] = frozenset()) -> bool:
    return any(
        b.endswith(_PRETRAINED) or (b in bases and b not in seen and _pretrained(b, bases, seen | {name}))
        for b in bases.get(name, ())
    )


def trace_all(
    specs: Sequence[dict[str, Any]], diagnostics: Sequence[Diagnostic], timeout: float, warnings: list[str]
) -> list[Traced]:
    """Each spec traced in the child process (the lines of the confirmable findings measured). A
    target given by hand that cannot be loaded is a usage error (`TargetError`); the model classes
    `--deep` found are traced together in one process, and one that cannot be built, or a trace
    that fails, leaves its findings unconfirmed."""
    from amplint.runtime.child import ChildError, trace_batch_in_child, trace_in_child
    from amplint.runtime.target import TargetError

    traced = []
    measure_lines = finding_lines(diagnostics)
    for spec in (spec for spec in specs if not spec.get("auto")):
        label = spec["target"] + (f" [{spec['mode']}]" if spec.get("mode") else "")
        try:
            graph = trace_in_child({**spec, "measure_lines": measure_lines}, timeout)
            traced.append(Traced(label, graph=graph))
        except TargetError as exc:  # a target that names no model: a usage error, not a model bug
            raise TargetError(f"{spec['name']}: {exc}") from None
        except ChildError as exc:
            warnings.append(f"could not trace {label}; its findings stay unconfirmed: {exc}")
            traced.append(Traced(label, error=_reason(str(exc))))  # the exception
    found = [{**spec, "measure_lines": measure_lines} for spec in specs if spec.get("auto")]
    for spec, result in zip(found, trace_batch_in_child(found, timeout), strict=True):
        if isinstance(result, Exception):
            said = "could not build" if isinstance(result, TargetError) else "could not trace"
            named = (
                spec["name"].rpartition(" [")[0] if said == "could not build" else spec["name"]
            )  # in no mode
            warnings.append(f"--deep {said} {named}; its findings stay unconfirmed: {_reason(str(result))}")
            traced.append(Traced(spec["name"], error=_reason(str(result))))
        else:
            traced.append(Traced(spec["name"], graph=result))
    return traced


def _reason(message: str) -> str:
    """A failed trace in one line: the exception, after where the model raised it (the
    `cannot trace ... called at FILE:LINE` the tracer writes) when the message says where; without
    the place, an error raised by the project's code reads as amplint's own."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return "failed"
    where = [line for line in lines[:-1] if line.startswith("cannot trace ")]
    return f"{where[-1]} {lines[-1]}" if where else lines[-1]


def judge(
    diagnostics: Sequence[Diagnostic], traced: Sequence[Traced], untraced: dict[str, str]
) -> list[Diagnostic]:
    """The findings joined to the traces (`confirm`); a candidate of a file nothing traced is
    `unreached`, with why."""
    joined = confirm(diagnostics, traced)
    failed = {t.target.partition(" [")[0].rpartition(":")[0]: t.error for t in traced if t.error is not None}
    out = []
    for d in joined:
        targets = [t for t in d.extra.get(TARGETS, []) if " [" in t] if not rule_is_runtime(d.code) else []
        if targets and d.confidence in (Confidence.CONFIRMED, Confidence.REFUTED):
            # The mode is what makes the verdict: say which traces gave it.
            shown = ", ".join(t.rpartition("/")[2] for t in targets)
            d = replace(d, extra={**d.extra, EVIDENCE: f"{d.extra[EVIDENCE]} (traced: {shown})"})
        if d.confidence in (Confidence.STATIC, Confidence.CONDITIONAL, Confidence.UNREACHED):
            why = untraced.get(d.path) or (f"not traced: {failed[d.path]}" if d.path in failed else None)
            rule = rule_by_code(d.code)
            if why is not None and rule is not None and rule.confirmable():
                d = replace(d, confidence=Confidence.UNREACHED, extra={**d.extra, EVIDENCE: why})
        out.append(d)
    return out


def outcome(diagnostic: Diagnostic) -> str:
    """What `--deep` made of a candidate: one of `OUTCOMES`."""
    if diagnostic.confidence in (Confidence.CONFIRMED, Confidence.REFUTED, Confidence.UNREACHED):
        return diagnostic.confidence.value
    return NOT_CONFIRMED


def counts(diagnostics: Sequence[Diagnostic]) -> dict[str, dict[str, int]]:
    """Per file, how many candidates were confirmed, refuted, unreached and not confirmed; the
    findings of the runtime-only rules are no candidates."""
    per_file: dict[str, dict[str, int]] = {}
    for d in candidates(diagnostics):
        tally = per_file.setdefault(d.path, dict.fromkeys(OUTCOMES, 0))
        tally[outcome(d)] += 1
    return dict(sorted(per_file.items()))
