"""`amplint trace` output: the run, its findings, the counts of its ops and a table of them, or JSON.
No torch needed."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Any

from amplint.diagnostics import Diagnostic
from amplint.runtime.chains import VIEWS
from amplint.runtime.formats import FLOAT16_TINIEST, LossScale, grad_scaler, loss_scale
from amplint.runtime.graph import FLOATING, DtypeGraph, DtypeNode, Magnitudes, NodeValues
from amplint.runtime.numbers import share


def select(
    graph: DtypeGraph, *, op: str | None = None, module: str | None = None, changed_dtype: bool = False
) -> list[DtypeNode]:
    """Nodes matching `--op` / `--module` glob patterns; with `changed_dtype`, only the nodes whose
    output dtype differs from an input's, and casts."""
    chosen = []
    for node in graph.nodes:
        if node.policy == "input":
            continue
        if op is not None and not fnmatchcase(node.op, op):
            continue
        if module is not None and not fnmatchcase(node.module or "", module):
            continue
        if changed_dtype and not (
            node.policy in {"explicit_cast", "autocast_cast"}
            or (node.dtype is not None and any(d is not None and d != node.dtype for d in node.input_dtypes))
        ):
            continue
        chosen.append(node)
    return chosen


def _where(node: DtypeNode) -> str:
    if node.source is None:
        return ""
    path = node.source.path
    with contextlib.suppress(ValueError):  # another drive on Windows
        path = os.path.relpath(path)
    return f"{path}:{node.source.line}"


def render_text(
    graph: DtypeGraph, nodes: list[DtypeNode], *, target: str, findings: str = "", ops: bool = False
) -> str:
    """The trace as text: what was traced and how, the findings (`findings`, rendered), then the
    counts; with `ops`, the table of `nodes` between them."""
    lines = [f"# {describe_run(graph, target)}"]
    lines += [f"# note: {note}" for note in graph.notes]
    lines += ["", *findings.rstrip("\n").splitlines()] if findings else []
    if ops:
        lines += ["", *_op_table(graph, nodes)]
    counted = count_lines(graph.summary(), autocast=graph.autocast)
    counted[0] += "" if ops else "; --ops lists each op"
    lines += ["", *counted]
    lines += _attention_lines(graph)
    if graph.loss is not None:
        lines += _gradient_lines(graph)
    if graph.values_note:
        lines.append(f"values: not replayed: {graph.values_note}")
    lines += _values_lines(graph)
    return "\n".join(lines) + "\n"


def describe_run(graph: DtypeGraph, target: str) -> str:
    """What was built and from where, and the run's settings: `traced Qwen2ForCausalLM from
    config.json: cuda autocast bfloat16, torch 2.13.0`."""
    mode = (
        f"{graph.device} autocast {graph.dtype}"
        + (f", parameters cast to {graph.param_dtype}" if graph.param_dtype else "")
        if graph.autocast
        else f"no autocast, parameters {'cast to ' + graph.param_dtype if graph.param_dtype else 'in their own dtype'}"
    )
    if graph.emulated:
        mode += f" (emulated on fake cuda:0 as {_gpu_name(graph.gpu)})"
    built = f"{graph.model} from {target}" if graph.model else target
    return f"traced {built}: {mode}, torch {graph.torch_version}"


def _op_table(graph: DtypeGraph, nodes: list[DtypeNode]) -> list[str]:
    """One row per op: its dtypes, policy, line and module, and its values when replayed."""
    values = graph.values
    backward = graph.loss is not None
    phase = ("phase",) if backward else ()
    rows = [("id", "op", "dtypes", "policy", *phase, "source", "module", *(_VALUE_COLUMNS if values else ()))]
    for node in nodes:
        inputs = ",".join(d or "-" for d in node.input_dtypes) or "-"
        row: tuple[str, ...] = (
            str(node.id),
            node.op,
            f"{inputs} -> {node.dtype or '-'}",
            node.policy,
            *((node.phase,) if backward else ()),
            _where(node),
            node.module or "",
        )
        if values is not None:
            found = values.nodes.get(node.id)
            row += _value_cells(found) if found is not None else ("",) * len(_VALUE_COLUMNS)
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def count_lines(summary: dict[str, Any], *, autocast: bool) -> list[str]:
    """The ops of a graph's `summary()` counted so that each count's parts add up to it: the
    computing ops by the dtype they produced, and the casts by who inserted them."""
    parts = _per_dtype(summary["ops_per_dtype"], summary["ops_without_tensor"])
    casts = summary["autocast_casts"] + summary["explicit_casts"]
    lines = [
        f"{summary['ops']} ops: {summary['ops'] - casts} computing ({parts}), {casts} cast{'s' * (casts != 1)} "
        f"({summary['autocast_casts']} inserted by autocast, {summary['explicit_casts']} explicit)"
    ]
    if autocast:
        computing32 = summary["ops_per_dtype"].get("float32", 0)
        islands = len(summary["fp32_islands"])
        lines.append(
            f"{islands} of the {computing32} float32 ops {'is a float32 island' if islands == 1 else 'are float32 islands'} "
            "inside the low-precision region (fed by a cast)"
        )
    if "backward_ops" in summary:
        parts = _per_dtype(summary["backward_ops_per_dtype"], summary["backward_ops_without_tensor"])
        lines.append(
            f"{summary['backward_ops']} backward ops: {summary['backward_ops'] - summary['autograd_casts']} "
            f"computing ({parts}), {summary['autograd_casts']} casts of a gradient to the dtype its "
            "forward value had"
        )
    return lines


def _per_dtype(counts: dict[str, int], untyped: int) -> str:
    """`200 bfloat16, 33 float32, 2 with no tensor output`, the largest first."""
    parts = [f"{count} {dtype}" for dtype, count in sorted(counts.items(), key=lambda item: -item[1])]
    return ", ".join(parts + ([f"{untyped} with no tensor output"] if untyped else [])) or "none"


def _values_lines(graph: DtypeGraph) -> list[str]:
    """How much of the graph the values replay ran, in counts that add up to the ops traced."""
    values = graph.values
    if values is None:
        return []
    ops = [n for n in graph.nodes if n.policy != "input"]
    replayed = sum(1 for n in ops if n.id in values.nodes)
    other = sum(1 for n in ops if n.id not in values.nodes and n.dtype not in FLOATING)
    missed = len(ops) - replayed - other
    peak = f", peak memory {values.peak_bytes / 1024**2:,.0f} MB" if values.peak_bytes else ""
    parts = [f"{other} produce no floating-point value"] if other else []
    if missed:
        parts.append(
            f"{missed} not replayed" + (" (the replay stopped)" if values.stopped_at is not None else "")
        )
    lines = [
        f"values: {replayed} of the {len(ops)} ops{' (forward and backward)' * (graph.loss is not None)} "
        "replayed against float64" + (f" ({', '.join(parts)})" if parts else "") + peak
    ]
    if values.stopped_at is not None:
        stopped = graph.nodes[values.stopped_at]
        lines.append(f"values: the replay stopped at `{stopped.op}` ({_where(stopped)}): {values.stopped}")
    return lines + [f"values: {note}" for note in values.notes]


def _gpu_name(key: str | None) -> str:
    from amplint.runtime.gpu import GPUS

    gpu = GPUS.get(key or "")
    return f"{gpu.key.upper()}, {gpu.sm}" if gpu else "a GPU"


def _attention_lines(graph: DtypeGraph) -> list[str]:
    """One line per `scaled_dot_product_attention` call site: the kernel and its dtypes."""
    calls: dict[tuple[str, str], list[DtypeNode]] = {}
    for node in graph.nodes:
        if node.attention is not None:
            calls.setdefault((_where(node), node.attention), []).append(node)
    lines = []
    for (where, kernel), nodes in calls.items():
        if kernel == "math":
            what = "math (torch's decomposition: the ops above)"
        else:
            fused = next((n for n in nodes if n.op.startswith("_scaled_dot_product")), nodes[-1])
            what = f"{kernel} (`{fused.op}`, {','.join(d or '-' for d in fused.input_dtypes[:3])} -> {fused.dtype})"
        lines.append(f"attention at {where or 'an unknown line'}: {what}")
    return lines


def _gradient_lines(graph: DtypeGraph) -> list[str]:
    """The table of every trainable parameter's gradient: its dtype and shape, and the op that
    computed it (before the cast back to the parameter's dtype); with values, how much of it
    float16 flushes without loss scaling, and the loss scale that float16 needs overall."""
    values = graph.values
    found = values.gradients if values is not None else {}
    columns = _GRADIENT_VALUE_COLUMNS if found else ()
    rows = [("parameter", "dtype", "shape", "gradient", "computed by", *columns)]
    for name, placeholder in graph.parameters.items():
        parameter = graph.nodes[placeholder]
        shape = "x".join(map(str, parameter.shape or ())) or "scalar"
        node_id = graph.gradients.get(name)
        if node_id is None:
            blank = ("",) * (1 + len(columns))
            rows.append((name, parameter.dtype or "-", shape, "none: the loss does not reach it", *blank))
            continue
        gradient = graph.nodes[node_id]
        computing = gradient
        while computing.inputs and (computing.policy == "autograd_cast" or computing.op in VIEWS):
            computing = graph.nodes[computing.inputs[0]]
        row: tuple[str, ...] = (
            name,
            parameter.dtype or "-",
            shape,
            gradient.dtype or "-",
            f"{computing.op} ({computing.dtype})",
        )
        magnitudes = found.get(node_id)
        if columns:  # a gradient the replay did not reach (it stopped) has blank cells
            blank = ("",) * len(columns)
            row += _gradient_cells(loss_scale(magnitudes), magnitudes) if magnitudes else blank
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["", f"gradients of {graph.loss}:"]
    lines += [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    if found:
        total = loss_scale(sum(found.values(), Magnitudes({}, 0, 0)))
        lines += [
            "",
            f"float16 without loss scaling (the float64 gradients of this one batch): "
            f"{share(total.flushed)} of the {total.counts.nonzero:,} non-zero gradient elements flush to zero "
            f"(below 2^{FLOAT16_TINIEST}), {share(total.subnormal)} lie below the normal range (2^-14)",
            f"float16 loss scaling: {grad_scaler(total)}",
        ]
    return lines


# zero: share of the gradient's elements that are exactly zero; flushed and subnormal: shares of its
# non-zero elements below float16's smallest subnormal (2^-24) and smallest normal (2^-14);
# float16 scales: the loss scales (powers of two) that keep all but 0.1% from flushing and none
# from overflowing.
_GRADIENT_VALUE_COLUMNS = ("zero", "flushed", "subnormal", "float16 scales")


def _gradient_cells(scale: LossScale, magnitudes: Magnitudes) -> tuple[str, ...]:
    zero = magnitudes.zeros / max(magnitudes.count, 1)
    scales = "-" if scale.lowest is None else f"2^{scale.lowest}..2^{scale.highest}"
    return (share(zero), share(scale.flushed), share(scale.subnormal), scales)


# absmax: largest finite magnitude; headroom: bits to the dtype's largest value; inf/nan and
# underflow (non-zero values flushed to zero): fractions; error: norm-wise, against float64.
_VALUE_COLUMNS = ("absmax", "headroom", "inf/nan", "underflow", "error")


def _value_cells(found: NodeValues) -> tuple[str, ...]:
    bad = found.inf + found.nan
    return (
        "-" if bad >= 1.0 else f"{found.absmax:.3g}",
        "-" if found.headroom is None else f"{found.headroom:.1f}",
        share(bad) if bad else "",
        share(found.underflow) if found.underflow else "",
        f"{found.error:.1e}" if found.error else "",
    )


def render_json(graph: DtypeGraph, nodes: list[DtypeNode], findings: Sequence[Diagnostic] = ()) -> str:
    """The graph (the chosen nodes and every input) and the runtime-only rules' findings, in the
    shape of `amplint check --format json`'s diagnostics."""
    data = graph.to_dict()
    chosen = {node.id for node in nodes}
    data["nodes"] = [raw for raw in data["nodes"] if raw["id"] in chosen or raw["policy"] == "input"]
    data["findings"] = [finding.to_dict() for finding in findings]
    return json.dumps(data, indent=2) + "\n"
