"""The first-contact precision that README.md and docs/measured.md quote, rendered from the counts
`python benchmarks/precision_review.py report` keeps for each review in precision_summary.json
(per project: real, worth a look and false verdicts).

    python benchmarks/precision_summary.py report [--write]

Each review's table gives the shares with the two intervals of its page (docs/precision.md for the
current review, docs/precision-review-<n>.md for earlier ones); the reviews together are summed.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docs_blocks  # this folder is on sys.path when a script in it runs
from precision_review import MIN_READS, cluster_bootstrap, wilson

RESULTS = Path(__file__).resolve().parent / "precision_summary.json"
PAGE = "measured.md"
# The bar issue 29 sets for first contact: default findings real, numeric ones real.
BAR_ALL, BAR_NUMERIC = 0.85, 0.80

Counts = Mapping[str, list[int]]  # project -> [real, worth a look, false]


def _totals(counts: Counts) -> tuple[int, int, int]:
    """(real, useful, read) over every project."""
    real = sum(c[0] for c in counts.values())
    useful = real + sum(c[1] for c in counts.values())
    return real, useful, sum(sum(c) for c in counts.values())


def _percent(hits: int, read: int) -> str:
    return f"{100 * hits / read:.0f}%" if read else "-"


def _by_project(counts: Counts, useful: bool, seed: int) -> tuple[float, float]:
    """The share's 95% interval from a bootstrap over projects, as the review's page computes it."""
    return cluster_bootstrap([(c[0] + (c[1] if useful else 0), sum(c)) for c in counts.values()], seed)


def share(counts: Counts, useful: bool, seed: int) -> str:
    """'46% (Wilson 35-58%, by project 31-61%)', as the review's page computes it."""
    real, useful_hits, read = _totals(counts)
    hits = useful_hits if useful else real
    if not read:
        return "-"
    low, high = wilson(hits, read)
    b_low, b_high = _by_project(counts, useful, seed)
    return (
        f"{100 * hits / read:.0f}% (Wilson {100 * low:.0f}-{100 * high:.0f}%, "
        f"by project {100 * b_low:.0f}-{100 * b_high:.0f}%)"
    )


def table(review: dict[str, Any]) -> str:
    seed = review["seed"]
    lines = ["| | Read | Real | Useful (real + worth a look) |", "| --- | ---: | --- | --- |"]
    for label, key in (
        ("All default rules", "all"),
        ("Numeric rules (all but AMP008)", "numeric"),
        ("AMP008 (deprecated API)", "api"),
    ):
        counts = review[key]
        read = _totals(counts)[2]
        lines.append(f"| {label} | {read} | {share(counts, False, seed)} | {share(counts, True, seed)} |")
    return "\n".join(lines)


def _summed(reviews: list[dict[str, Any]], key: str) -> tuple[int, int, int, int]:
    """(real, useful, read, projects read) of one row over several reviews."""
    real = useful = read = 0
    projects: set[str] = set()
    for review in reviews:
        r, u, n = _totals(review[key])
        real, useful, read = real + r, useful + u, read + n
        projects |= {name for name, counts in review[key].items() if sum(counts)}
    return real, useful, read, len(projects)


def _names(reviews: list[dict[str, Any]]) -> str:
    numbers = [str(review["order"]) for review in reviews]
    return " and ".join([", ".join(numbers[:-1]), numbers[-1]] if len(numbers) > 1 else numbers)


def together(data: dict[str, Any]) -> str:
    reviews = list(data["reviews"].values())
    real, useful, read, projects = _summed(reviews, "all")
    n_real, n_useful, n_read, _ = _summed(reviews, "numeric")
    c_real, c_useful, c_read, _ = _summed(reviews, "core")
    met = real >= BAR_ALL * read and n_real >= BAR_NUMERIC * n_read
    return (
        f"Reviews {_names(reviews)} together read {read} first-contact findings from {projects} projects: "
        f"{_percent(real, read)} real, {_percent(useful, read)} useful; {n_read} of them numeric: "
        f"{_percent(n_real, n_read)} real, {_percent(n_useful, n_read)} useful. The bar of issue 29 "
        f"({BAR_ALL:.0%} of the default findings real, {BAR_NUMERIC:.0%} of the numeric ones) is "
        f"{'met' if met else 'not met'}. The core numeric rules (AMP001-AMP005, AMP007, AMP013) were "
        f"read {c_read} times, {c_real} real and {c_useful - c_real} worth a look."
    )


def rule_counts(data: dict[str, Any]) -> dict[str, list[int]]:
    """Real, worth a look and false first-contact verdicts per rule, over every review."""
    totals: dict[str, list[int]] = {}
    for review in data["reviews"].values():
        for code, counts in review.get("rules", {}).items():
            totals[code] = [a + b for a, b in zip(totals.get(code, [0, 0, 0]), counts, strict=True)]
    return dict(sorted(totals.items()))


def on_by_default_allowed(counts: list[int]) -> bool:
    """The default-set policy: a rule with MIN_READS or more first-contact reads stays on by default
    only if BAR_NUMERIC of them were useful; one with fewer keeps its place until it has them."""
    read = sum(counts)
    return read < MIN_READS or counts[0] + counts[1] >= BAR_NUMERIC * read


def rules_table(data: dict[str, Any], defaults: dict[str, bool]) -> str:
    lines = [
        "| Rule | Default | Read | Real | Worth a look | False | Useful | Policy |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for code, counts in rule_counts(data).items():
        read = sum(counts)
        if read < MIN_READS:
            policy = f"fewer than {MIN_READS} reads: not decided"
        else:
            policy = "may be on" if on_by_default_allowed(counts) else "off by default"
        default = "on" if defaults.get(code, False) else "opt-in"
        lines.append(
            f"| {code} | {default} | {read} | {counts[0]} | {counts[1]} | {counts[2]} | "
            f"{_percent(counts[0] + counts[1], read)} | {policy} |"
        )
    return "\n".join(lines)


def readme(data: dict[str, Any]) -> str:
    *earlier, latest = data["reviews"].values()
    real, useful, read = _totals(latest["all"])
    n_real, n_useful, n_read = _totals(latest["numeric"])
    if not earlier:
        projects_read = sum(1 for counts in latest["all"].values() if sum(counts))
        b_low, b_high = _by_project(latest["all"], True, latest["seed"])
        text = (
            f"- **Precision, first contact**: {latest['projects']} pinned public PyTorch projects from "
            f"PyPI that nobody here had checked before (review {latest['order']}), each checked whole "
            f"with amplint's defaults; {read} of their {latest['findings']} default findings (counted "
            f"once per line, on {projects_read} of the projects) were read in their code, by readers "
            "outside the rules' development, before any rule changed because of them. "
            f"{_percent(useful, read)} were useful ({_percent(real, read)} real; 95% interval by project "
            f"{100 * b_low:.0f}-{100 * b_high:.0f}%), and {_percent(n_useful, n_read)} of the {n_read} "
            f"about numerics (all but the deprecated-API rule AMP008), {_percent(n_real, n_read)} of "
            "them real."
        )
    else:
        # The reviews together lead: one review on first contact now reads a handful of findings.
        reviews = [*earlier, latest]
        t_real, t_useful, t_read, _ = _summed(reviews, "all")
        tn_real, tn_useful, tn_read, _ = _summed(reviews, "numeric")
        c_real, _, c_read, _ = _summed(reviews, "core")
        text = (
            f"- **Precision, first contact**: reviews {_names(reviews)} checked "
            f"{sum(r['projects'] for r in reviews)} pinned public PyTorch projects from PyPI that nobody "
            "here had checked before, each whole with amplint's defaults, and read "
            f"{t_read} of their default findings (counted once per line) in their code, by readers "
            "outside the rules' development, before any rule changed because of them: "
            f"{_percent(t_useful, t_read)} useful, {_percent(t_real, t_read)} real; the {tn_read} about "
            f"numerics (all but the deprecated-API rule AMP008) {_percent(tn_useful, tn_read)} useful, "
            f"{_percent(tn_real, tn_read)} real."
        )
        if t_real < BAR_ALL * t_read:
            text += (
                " Far from good enough: the core numeric rules (AMP001-AMP005, AMP007, AMP013) were "
                f"read {c_read} times and {c_real} of them {'was' if c_real == 1 else 'were'} real."
            )
        text += (
            f" The latest, review {latest['order']} ({latest['projects']} projects), had "
            f"{latest['findings']} default finding{'s' if latest['findings'] != 1 else ''}: {read} read, "
            f"{_percent(useful, read)} useful, {_percent(real, read)} real."
        )
    return text + (
        " The measurement, per rule, with every verdict and its reason, is in "
        "[docs/precision.md](docs/precision.md); the earlier reviews are reported apart in "
        "[docs/measured.md](docs/measured.md), each with its own page."
    )


def default_rules() -> dict[str, bool]:
    """Which rules amplint turns on by default (the catalogue of this checkout)."""
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)
    from amplint.rules import all_rules

    return {rule.code: rule.default_on for rule in all_rules()}


def report(data: dict[str, Any], defaults: dict[str, bool] | None = None) -> dict[str, str]:
    blocks = {key: table(review) for key, review in data["reviews"].items()}
    rules = rules_table(data, default_rules() if defaults is None else defaults)
    return {**blocks, "together": together(data), "rules": rules, "readme": readme(data)}


def main(argv: list[str] | None = None) -> int:
    parser, commands = docs_blocks.script_parser(__doc__)
    docs_blocks.add_report(commands, RESULTS, PAGE, readme=True)
    docs_blocks.report_args(parser.parse_args(argv), PAGE, "precision_summary", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
