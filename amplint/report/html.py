"""One self-contained HTML page (no scripts, no network): the static findings (`check --format
html`), or a trace (`trace --format html`): the run's settings and counts as the text output gives
them, its findings, the model's modules as a collapsible tree with every op coloured by the dtype it
ran in (autocast's casts and the upcasts marked) and, after `--values`, a chart per layer of the
headroom left below the dtype's largest value (layers whose values became inf or NaN marked so) and
of the share of values that underflowed."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any, NamedTuple

from amplint.diagnostics import Diagnostic
from amplint.runtime.graph import DtypeGraph
from amplint.runtime.numbers import share
from amplint.runtime.report import count_lines, describe_run
from amplint.source import source_line

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:80em;color:#1d1d1f;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}code,pre,.op{font-family:ui-monospace,monospace}
.finding{border-left:4px solid #d97706;background:#fffbeb;padding:.5em .8em;margin:.6em 0}
.finding.error{border-color:#dc2626;background:#fef2f2}.finding.info{border-color:#2563eb;background:#eff6ff}
.finding pre{background:#fff;padding:.4em;margin:.4em 0;overflow-x:auto}.where{color:#555}
details{margin-left:1em}summary{cursor:pointer}.ops{margin:.2em 0 .4em 1.2em;padding:0;list-style:none}
.op{display:inline-block;padding:0 .4em;border-radius:3px;margin:1px 0}
.float32,.float64{background:#dbeafe}.bfloat16{background:#fed7aa}.float16{background:#fecaca}
.other{background:#e5e7eb}.cast{outline:2px dashed #7c3aed}.upcast{outline:2px solid #059669}
.legend span{margin-right:1em}table{border-collapse:collapse}td,th{padding:.2em .6em;text-align:left}
"""
_HALF = ("bfloat16", "float16")
_KNOWN = ("float32", "float64", "bfloat16", "float16")


def _page(title: str, body: list[str]) -> str:
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def _findings(diagnostics: Sequence[Diagnostic], sources: Mapping[str, str]) -> list[str]:
    out = []
    for d in diagnostics:
        severity = getattr(d.severity, "value", str(d.severity))
        parts = [
            f'<div class="finding {escape(severity)}" id="{escape(d.code)}-{d.line}">',
            f"<b>{escape(d.code)}</b> <code>{escape(d.name)}</code> "
            f'<span class="where">{escape(d.location)}:{d.line}:{d.column}</span>',
            f"<div>{escape(d.message)}</div>",
        ]
        line = source_line(sources.get(d.location), d.line)
        if line and line.strip():
            parts.append(f"<pre>{d.line:>5} | {escape(line)}</pre>")
        if d.help:
            parts.append(f"<div>help: {escape(d.help)}</div>")
        if d.fix is not None:
            parts.append(f"<div>fix ({escape(d.fix.applicability)}): {escape(d.fix.description)}</div>")
        out.append("".join(parts) + "</div>")
    return out


def render(diagnostics: Sequence[Diagnostic], *, sources: Mapping[str, str]) -> str:
    """The static report: every finding with its line, grouped by file."""
    count = len(diagnostics)
    body = [f"<h1>amplint: {count} finding{'s' * (count != 1)}</h1>"]
    by_file: dict[str, list[Diagnostic]] = defaultdict(list)
    for d in diagnostics:
        by_file[d.path].append(d)
    for path, found in by_file.items():
        body.append(f"<details open><summary><b>{escape(path)}</b> ({len(found)})</summary>")
        body += _findings(found, sources)
        body.append("</details>")
    if not diagnostics:
        body.append("<p>All checks passed.</p>")
    return _page("amplint", body)


def _dtype_class(dtype: str) -> str:
    return dtype if dtype in _KNOWN else "other"


def _op(node: dict[str, Any], by_id: Mapping[int, dict[str, Any]]) -> str:
    dtype = str(node.get("dtype"))
    classes = ["op", _dtype_class(dtype)]
    note = ""
    if node.get("policy") == "autocast_cast":
        classes.append("cast")
        before = [str(by_id[i].get("dtype")) for i in node.get("inputs", []) if i in by_id]
        note = f" autocast cast {escape(before[0]) if before else '?'}→{escape(dtype)}"
    elif dtype in ("float32", "float64") and any(
        str(by_id[i].get("dtype")) in _HALF for i in node.get("inputs", []) if i in by_id
    ):
        classes.append("upcast")
        note = " upcast"
    source = node.get("source") or {}
    where = (
        f" {escape(str(source.get('path', '')).rsplit('/', 1)[-1])}:{source.get('line')}" if source else ""
    )
    shape = "x".join(str(s) for s in node.get("shape") or [])
    title = escape(f"{node.get('op')} {dtype} [{shape}]{where}")
    return f'<li><span class="{" ".join(classes)}" title="{title}">{escape(str(node.get("op")))} {escape(dtype)}</span>{note}<span class="where">{where}</span></li>'


def _tree(nodes: list[dict[str, Any]], by_id: Mapping[int, dict[str, Any]]) -> list[str]:
    """The modules as nested <details>, each listing the ops that ran in it, in order."""
    tree: dict[str, Any] = {}
    for node in nodes:
        branch = tree
        for part in str(node.get("module") or "(model)").split("."):
            branch = branch.setdefault(part, {})
        branch.setdefault("\0ops", []).append(node)
    out: list[str] = []

    def walk(name: str, branch: dict[str, Any], depth: int) -> None:
        ops = branch.get("\0ops", [])
        dtypes = sorted({str(n.get("dtype")) for n in ops})
        out.append(
            f"<details{' open' * (depth < 1)}><summary><code>{escape(name)}</code> "
            f'<span class="where">{len(ops)} ops {escape(", ".join(dtypes))}</span></summary>'
        )
        if ops:
            out.append('<ul class="ops">' + "".join(_op(n, by_id) for n in ops) + "</ul>")
        for child, sub in branch.items():
            if child != "\0ops":
                walk(child, sub, depth + 1)
        out.append("</details>")

    for name, branch in tree.items():
        walk(name, branch, 0)
    return out


def _layer(module: str) -> str:
    """The layer a module belongs to: up to its first numbered part (`model.layers.3`)."""
    match = re.match(r"(.*?\.\d+)(\.|$)", module)
    return match.group(1) if match else module or "(model)"


class _Row(NamedTuple):
    """One bar: a layer, its value (None when none is finite) and, when its values left the dtype's
    range, what they became ("inf", "NaN", "inf and NaN")."""

    label: str
    value: float | None
    broke: str = ""


def _chart(title: str, rows: list[_Row], limit: float, unit: str, shown: Callable[[float], str]) -> str:
    """Horizontal bars on an inline SVG, one per layer, each with its value written at its end, over
    an axis in `unit`; the limit is a red line. A layer whose values became inf or NaN gets a red
    bar across the limit, labelled with what they became."""
    width, bar, left, right = 760, 18, 220, 150
    top = max([limit, *(r.value for r in rows if r.value is not None)])
    step = _tick_step(top)
    end = step * math.ceil(top / step)
    scale = (width - left - right) / end
    head = 18  # room for the limit's label above the bars
    axis_y = head + bar * len(rows) + 4
    height = axis_y + 44
    parts = [
        f'<h3>{escape(title)}</h3><svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(title)}">'
    ]
    for i, row in enumerate(rows):
        y = head + i * bar
        parts.append(
            f'<text x="{left - 6}" y="{y + 13}" text-anchor="end" font-size="11">{escape(row.label[-32:])}</text>'
        )
        if row.broke:
            span = limit * scale  # no headroom left: the bar fills the zone short of the limit
            parts.append(
                f'<rect class="broke" x="{left}" y="{y + 2}" width="{span:.1f}" height="{bar - 4}" fill="#dc2626">'
                f"<title>{escape(row.label)}: {escape(row.broke)}</title></rect>"
                f'<text class="broke" x="{left + span + 4:.1f}" y="{y + 13}" font-size="11" fill="#dc2626" '
                f'font-weight="bold">{escape(row.broke)}</text>'
            )
            continue
        value = row.value or 0.0
        parts.append(
            f'<rect x="{left}" y="{y + 2}" width="{max(value * scale, 1):.1f}" height="{bar - 4}" fill="#f59e0b">'
            f"<title>{escape(row.label)}: {escape(shown(value))}</title></rect>"
            f'<text class="value" x="{left + max(value * scale, 1) + 4:.1f}" y="{y + 13}" font-size="11">'
            f"{escape(shown(value))}</text>"
        )
    parts.append(
        f'<line x1="{left}" y1="{axis_y}" x2="{left + end * scale:.1f}" y2="{axis_y}" stroke="#555"/>'
    )
    for k in range(round(end / step) + 1):
        x = left + k * step * scale
        parts.append(
            f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 4}" stroke="#555"/>'
            f'<text class="tick" x="{x:.1f}" y="{axis_y + 16}" font-size="10" text-anchor="middle">{k * step:g}</text>'
        )
    parts.append(
        f'<text x="{left + end * scale / 2:.1f}" y="{axis_y + 32}" font-size="11" text-anchor="middle">{escape(unit)}</text>'
    )
    x = left + limit * scale
    parts.append(
        f'<line x1="{x:.1f}" y1="{head - 4}" x2="{x:.1f}" y2="{axis_y}" stroke="#dc2626" stroke-width="2"/>'
        f'<text x="{x:.1f}" y="{head - 7}" font-size="10" fill="#dc2626" text-anchor="middle">limit {escape(shown(limit))}</text></svg>'
    )
    return "".join(parts)


def _tick_step(top: float) -> float:
    """1, 2 or 5 times a power of ten: about five ticks up to `top`."""
    rough = top / 5 if top > 0 else 1.0
    power = 10.0 ** math.floor(math.log10(rough))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= rough)


def _values(data: dict[str, Any], nodes: list[dict[str, Any]]) -> list[str]:
    values = data.get("values") or {}
    stats = values.get("nodes") or {}
    if not stats:
        return []
    headroom: dict[str, float] = {}
    inf: set[str] = set()
    nan: set[str] = set()
    underflow: dict[str, float] = defaultdict(float)
    for node in nodes:
        entry = stats.get(str(node["id"]))
        if not entry or node.get("policy") == "input":
            continue
        layer = _layer(str(node.get("module") or ""))
        headroom.setdefault(layer, math.inf)
        # Only what float64 does not hold: a mask of -inf, or a NaN float64 makes too, is the model's own.
        if entry.get("overflow") and entry.get("inf"):
            inf.add(layer)
        if (entry.get("nan") or 0.0) > (entry.get("reference_nan") or 0.0):
            nan.add(layer)
        if entry.get("headroom") is not None and math.isfinite(entry["headroom"]):
            headroom[layer] = min(headroom[layer], max(float(entry["headroom"]), 0.0))
        underflow[layer] = max(underflow[layer], float(entry.get("underflow") or 0.0))
    limits = values.get("limits") or {}
    # A layer whose values are all zero has no headroom to draw; one that overflowed is drawn as such.
    rows = [
        _Row(layer, bits if math.isfinite(bits) else None, _broke(layer in inf, layer in nan))
        for layer, bits in headroom.items()
        if math.isfinite(bits) or layer in inf | nan
    ]
    return [
        "<h2>Values</h2>",
        _chart(
            "Headroom per layer: bits between the largest magnitude and the dtype's largest value "
            "(a bar short of the line is close to overflow; red: values that became inf or NaN where "
            "float64 stays finite)",
            rows,
            float(limits.get("headroom_bits", 2.0)),
            "bits of headroom",
            lambda bits: f"{bits:.1f} bits",
        ),
        _chart(
            "Share of values that underflowed to zero, per layer (a bar past the line loses precision)",
            [_Row(layer, 100 * fraction) for layer, fraction in underflow.items()],
            100 * float(limits.get("underflow_fraction", 0.01)),
            "% of non-zero values flushed to zero",
            lambda percent: share(percent / 100),
        ),
    ]


def _broke(inf: bool, nan: bool) -> str:
    return " and ".join(kind for kind, found in (("inf", inf), ("NaN", nan)) if found)


def render_trace(
    data: dict[str, Any], findings: Sequence[Diagnostic], *, sources: Mapping[str, str], target: str
) -> str:
    """The trace page, from `trace --format json`'s document."""
    nodes = [n for n in data.get("nodes", []) if n.get("policy") != "input"]
    by_id = {int(n["id"]): n for n in data.get("nodes", [])}
    graph = DtypeGraph.from_dict(data)
    counts = count_lines(data["summary"], autocast=graph.autocast)
    body = [
        f"<h1>amplint trace: <code>{escape(target)}</code></h1>",
        f'<p class="run">{escape(describe_run(graph, target))}.</p>',
        f'<p class="counts">{"<br>".join(escape(line) for line in counts)}</p>',
        '<p class="legend"><span class="op float32">float32</span><span class="op bfloat16">bfloat16</span>'
        '<span class="op float16">float16</span><span class="op other">other</span>'
        '<span class="op cast">autocast cast</span><span class="op upcast">upcast to float32</span></p>',
        f"<h2>Findings ({len(findings)})</h2>",
        *(_findings(findings, sources) or ["<p>None.</p>"]),
        *_values(data, nodes),
        "<h2>Modules</h2>",
        *_tree(nodes, by_id),
    ]
    return _page(f"amplint trace {target}", body)
