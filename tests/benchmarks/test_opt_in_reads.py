"""`benchmarks/opt_in_reads.py`: the sample of each off-by-default rule's findings, the verdicts
counted on it (a dismissive reason counts as false), and the table rendered from the counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import opt_in_reads  # benchmarks/ is on the path (pyproject)


def _finding(project: str, code: str, line: int) -> dict[str, Any]:
    return {
        "project": project,
        "path": "pkg/m.py",
        "line": line,
        "column": 1,
        "code": code,
        "message": "",
        "why": [],
        "source": f"y{line} = torch.log_softmax(x{line}, -1)",
        "in_package": True,
    }


def _data(per_rule: int) -> dict[str, Any]:
    findings = [_finding("a", "AMP003", n) for n in range(1, 6)] + [_finding("b", "AMP002", 9)]
    # a line outside the package and an unparsable file are not read
    findings += [{**_finding("b", "AMP003", 20), "in_package": False}, _finding("b", "AMP900", 1)]
    return {
        "commit": "0123456789abcdef",
        "rules": ["AMP002", "AMP003"],
        "from_review": "review-14",
        "projects": 2,
        "findings": findings,
        "seed": 7,
        "per_rule": per_rule,
    }


def test_each_rule_is_sampled_up_to_its_share_in_a_stable_order() -> None:
    three = opt_in_reads.sample(_data(3))
    assert [u.code for u in three] == ["AMP002", "AMP003", "AMP003", "AMP003"]
    # a larger sample keeps the smaller one as its prefix, rule by rule
    five = [u.key for u in opt_in_reads.sample(_data(5)) if u.code == "AMP003"]
    assert five[:3] == [u.key for u in three if u.code == "AMP003"]


def test_verdicts_are_counted_on_the_sample_and_rendered_with_intervals(tmp_path: Path) -> None:
    data = _data(2)
    chosen = [u.first for u in opt_in_reads.sample(data) if u.code == "AMP003"]
    verdicts = tmp_path / "verdicts.toml"
    entries = [
        (chosen[0], "real", "float16 model, loss from these log-probabilities"),
        (chosen[1], "real", "harmless here"),
    ]
    verdicts.write_text(
        "".join(
            f'[[verdict]]\nproject = "{f["project"]}"\npath = "{f["path"]}"\ncode = "{f["code"]}"\n'
            f'source = "{f["source"]}"\nverdict = "{v}"\nreason = "{r}"\n\n'
            for f, v, r in entries
        ),
        encoding="utf-8",
    )
    data["reads"] = opt_in_reads.count(data, verdicts)
    assert data["reads"]["AMP003"] == {"projects": 1, "findings": 5, "real": 1, "worth a look": 0, "false": 1}
    assert data["reads"]["AMP002"]["real"] + data["reads"]["AMP002"]["false"] == 0
    table = opt_in_reads.report(data)["table"]
    assert "| AMP003 | 1 | 5 | 2 | 1 | 0 | 1 | 50% (Wilson 9-91%) | 50% (Wilson 9-91%) |" in table
    assert "| AMP002 | 1 | 1 | 0 | 0 | 0 | 0 | - | - |" in table
    assert "--rev 0123456789ab" in table
