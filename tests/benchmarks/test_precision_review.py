"""`benchmarks/precision_review.py`: the corpus and its reviews, the sample (stable as findings come and
go, uniform), counting a finding once, the two intervals, and the report and reading aid drawn from a
small fake run (no network, no amplint run)."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import tarfile
import textwrap
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


review = _load("precision_review")


def finding(project: str, path: str, line: int, code: str, source: str, **extra: Any) -> dict[str, Any]:
    return {
        "project": project,
        "path": path,
        "line": line,
        "column": 1,
        "code": code,
        "message": f"{code} message",
        "why": [],
        "source": source,
        "in_package": True,
        **extra,
    }


def units(n: int, project: str = "p", code: str = "AMP007") -> list[Any]:
    return review.dedup(finding(project, f"m{i}.py", 1, code, f"x{i} = y") for i in range(n))


# --- the corpus ----------------------------------------------------------------------------------

MANIFEST = """\
[[review]]
date = "2026-01-01"
seed = 1

[[review]]
seed = 2

[[project]]
name = "old"
version = "1.0"
sdist = false
first_checked = "2026-01-01"

[[project]]
name = "tuned"
version = "1.0"
sdist = false
first_checked = "2026-01-01"
tuned_on = true

[[project]]
name = "new"
version = "2.0"
subdir = "pkg"
sdist = true
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_projects_are_grouped_by_when_they_were_first_checked(tmp_path: Path) -> None:
    corpus = review.load_corpus(write(tmp_path, "c.toml", MANIFEST))
    assert corpus.current.seed == 2
    groups = {p.name: corpus.group(p) for p in corpus.projects}
    assert groups == {"old": review.EARLIER, "tuned": review.TUNED, "new": review.FIRST}
    # Once the current review is dated and its projects carry that date, they stay first contact.
    dated = (
        MANIFEST.replace("seed = 2\n", 'date = "2026-02-01"\nseed = 2\n') + 'first_checked = "2026-02-01"\n'
    )
    corpus = review.load_corpus(write(tmp_path, "d.toml", dated))
    assert corpus.group(corpus.projects[2]) == review.FIRST
    assert corpus.projects[2].sdist and corpus.projects[2].package == "pkg"


def test_two_reviews_on_one_date_are_told_apart_by_id(tmp_path: Path) -> None:
    # The current review shares the earlier one's date: its `id` names it, the date still names the
    # earlier one, so the earlier review's projects are no longer first contact.
    same_day = (
        MANIFEST.replace("seed = 2\n", 'id = "2026-01-01.2"\ndate = "2026-01-01"\nseed = 2\n')
        + 'first_checked = "2026-01-01.2"\n'
    )
    corpus = review.load_corpus(write(tmp_path, "c.toml", same_day))
    assert [r.key for r in corpus.reviews] == ["2026-01-01", "2026-01-01.2"]
    groups = {p.name: corpus.group(p) for p in corpus.projects}
    assert groups == {"old": review.EARLIER, "tuned": review.TUNED, "new": review.FIRST}
    # A review not yet dated is named by its id alone.
    undated = MANIFEST.replace("seed = 2\n", 'id = "next"\nseed = 2\n') + 'first_checked = "next"\n'
    corpus = review.load_corpus(write(tmp_path, "d.toml", undated))
    assert corpus.current.date is None and corpus.group(corpus.projects[2]) == review.FIRST


def test_a_review_selects_the_projects_it_added(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    same_day = (
        MANIFEST.replace("seed = 2\n", 'id = "2026-01-01.2"\ndate = "2026-01-01"\nseed = 2\n')
        + 'first_checked = "2026-01-01.2"\n'
    )
    manifest = write(tmp_path, "c.toml", same_day)
    corpus = review.load_corpus(manifest)
    assert [p.name for p in corpus.added_by("2026-01-01")] == ["old", "tuned"]
    assert [p.name for p in corpus.added_by("2026-01-01.2")] == ["new"]
    with pytest.raises(review.ReviewError, match="no \\[\\[review\\]\\] is named"):
        corpus.added_by("2026-01-02")
    # On the command line: an unknown review is refused before anything runs.
    missing = tmp_path / "no-corpus"
    assert review.main(["run", "--manifest", str(manifest), "--corpus", str(missing), "--review", "x"]) == 1
    assert "no [[review]] is named 'x'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('first_checked = "2026-01-01"\ntuned_on', 'first_checked = "2025-12-31"\ntuned_on'), "must name a"),
        (("seed = 2\n", 'date = "2026-01-01"\nseed = 2\n'), "already names an earlier review"),
        (("seed = 2\n", 'id = "2026-01-01"\nseed = 2\n'), "already names an earlier review"),
        (("seed = 2\n", 'date = "2025-12-31"\nseed = 2\n'), "must not fall"),
        (("seed = 2\n", 'id = "review 5"\nseed = 2\n'), "`id` must be"),
        (("seed = 2", "seed = 1"), "seed no earlier review used"),
        (('date = "2026-01-01"\n', ""), "only the current"),
        (("sdist = true", 'sdist = "yes"'), "`sdist` must be"),
        (("seed = 2\n", 'seed = 2\ncommit = "HEAD"\n'), "`commit` must be"),
        (('first_checked = "2026-01-01"\ntuned_on', "tuned_on"), "checked before"),
    ],
)
def test_a_corpus_that_breaks_the_review_rules_is_refused(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    assert change[0] in MANIFEST
    with pytest.raises(review.ReviewError, match=message):
        review.load_corpus(write(tmp_path, "c.toml", MANIFEST.replace(*change, 1)))


def test_the_repository_corpus_loads_with_a_first_contact_review() -> None:
    corpus = review.load_corpus(review.DEFAULT_MANIFEST)
    first = [p for p in corpus.projects if corpus.group(p) == review.FIRST]
    assert len(first) >= 10
    assert all(p.first_checked in (None, corpus.current.key) for p in first)
    # The sdist, which ships the tests and configs that say how the code runs, wherever one could be
    # prepared; a review takes a wheel only for the few whose sdist could not.
    assert sum(p.sdist for p in first) >= max(10, len(first) * 3 // 4)


def test_only_findings_in_the_package_are_sampled() -> None:
    assert review.in_package("src/pkg/a.py", "src/pkg")
    assert not review.in_package("src/pkg2/a.py", "src/pkg")
    assert not review.in_package("tests/test_a.py", "src/pkg")
    assert review.in_package("tests/test_a.py", ".")


def test_a_run_from_another_commit_than_the_review_reads_is_not_first_contact() -> None:
    review_at = review.Review(None, 2, "abc123def456")
    run = {"commit": "abc123def456", "uncommitted_changes": False}
    assert review.first_contact_warning(review_at, run) == ""
    assert "Not first contact" in review.first_contact_warning(review_at, {**run, "commit": "fff000111222"})
    assert "uncommitted" in review.first_contact_warning(review_at, {**run, "uncommitted_changes": True})
    assert "names no amplint commit" in review.first_contact_warning(review.Review(None, 2), run)


def test_fetch_keeps_source_configuration_scripts_and_docs_only(tmp_path: Path) -> None:
    archive = tmp_path / "demo-1.0.tar.gz"
    files = {
        "demo-1.0/pkg/model.py": b"import torch\n",
        "demo-1.0/configs/train.yaml": b"precision: bf16-mixed\n",
        "demo-1.0/ds_config.json": b'{"bf16": {"enabled": true}}',
        "demo-1.0/data/big.json": b"[" + b"0," * review.MAX_CONFIG_BYTES + b"0]",
        "demo-1.0/README.md": b"# demo\n",
        # A script or a README may turn a flag on (`python train.py --fp16`).
        "demo-1.0/scripts/run.sh": b"python train.py --fp16\n",
        "demo-1.0/assets/logo.png": b"\x89PNG",
    }
    with tarfile.open(archive, "w:gz") as tf:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tf.addfile(info, io.BytesIO(content))
    review.unpack(archive, tmp_path / "demo-1.0")
    unpacked = {p.relative_to(tmp_path / "demo-1.0").as_posix() for p in (tmp_path / "demo-1.0").rglob("*")}
    assert {"pkg/model.py", "configs/train.yaml", "ds_config.json", "README.md", "scripts/run.sh"} <= unpacked
    assert not {"data/big.json", "assets/logo.png"} & unpacked


# --- counting once, sampling ----------------------------------------------------------------------


def test_identical_lines_and_copies_in_one_project_count_once() -> None:
    found = [
        finding("a", "m.py", 10, "AMP003", "p = s.softmax(-1)"),
        finding("a", "m.py", 40, "AMP003", "p = s.softmax(-1)"),  # the same line twice in a file
        finding("a", "modular_m.py", 7, "AMP003", "p = s.softmax(-1)"),  # a copy in another file
        finding("a", "m.py", 10, "AMP002", "p = s.softmax(-1)"),  # another rule
        finding("b", "m.py", 10, "AMP003", "p = s.softmax(-1)"),  # another project
        finding("a", "n.py", 3, "AMP003", ""),  # unreadable lines stand for themselves
        finding("a", "n.py", 9, "AMP003", ""),
        finding("a", "tests/t.py", 1, "AMP003", "q = 1", in_package=False),  # outside the package
        finding("a", "bad.py", 1, "AMP900", "("),  # unparsable: never sampled
    ]
    result = review.dedup(found)
    assert len(result) == 5
    merged = next(u for u in result if u.project == "a" and u.code == "AMP003" and u.first["source"])
    assert [(m["path"], m["line"]) for m in merged.members] == [
        ("m.py", 10),
        ("m.py", 40),
        ("modular_m.py", 7),
    ]
    # A verdict filed under any occurrence is the unit's.
    verdicts = {("a", "modular_m.py", "AMP003", "p = s.softmax(-1)"): review.Verdict("false", "fp32 kernel")}
    assert review.verdict_of(merged, verdicts) == review.Verdict("false", "fp32 kernel")


def test_a_sample_is_stable_as_findings_come_and_go() -> None:
    base = units(300)
    sample = review.draw(base, 40, seed=7)
    assert len(sample) == 40 and review.draw(base, 40, seed=7) == sample
    # Any prefix of a sample is the smaller sample.
    assert review.draw(base, 400, seed=7)[:25] == review.draw(base, 25, seed=7)
    # New findings can push old ones out but never bring an unsampled old one in.
    grown = review.draw([*base, *units(200, project="q")], 40, seed=7)
    kept = {u.key for u in grown if u.project == "p"}
    assert kept <= {u.key for u in sample}
    assert kept and len(kept) < 40
    # Removing unsampled findings changes nothing.
    chosen = {u.key for u in sample}
    assert review.draw([u for u in base if u.key in chosen or u.first["path"] < "m2"], 40, seed=7) == sample
    assert review.draw(base, 40, seed=8) != sample


def test_a_sample_is_uniform_over_projects() -> None:
    population = [*units(1000, project="big"), *units(1000, project="other")]
    for seed in range(5):
        share = sum(u.project == "big" for u in review.draw(population, 400, seed)) / 400
        assert 0.4 < share < 0.6


def test_the_supplement_tops_each_rule_up_from_its_own_findings() -> None:
    population = [*units(50, code="AMP007"), *units(3, code="AMP013"), *units(30, code="AMP017")]
    sample = review.draw(population, 10, seed=3)
    extra = review.supplement(population, sample, 5, seed=3)
    taken = [*sample, *extra]
    assert len({u.key for u in taken}) == len(taken)
    counts = {code: sum(u.code == code for u in taken) for code in ("AMP007", "AMP013", "AMP017")}
    assert counts["AMP013"] == 3  # all it has
    assert counts["AMP007"] >= 5 and counts["AMP017"] >= 5
    assert all(sum(u.code == code for u in extra) <= 5 for code in counts)


# --- intervals -------------------------------------------------------------------------------------


def test_wilson_interval_known_values() -> None:
    assert review.wilson(0, 0) == (0.0, 1.0)
    low, high = review.wilson(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-4) and high == pytest.approx(0.7634, abs=1e-4)
    low, high = review.wilson(10, 10)
    assert low == pytest.approx(0.7225, abs=1e-4) and high == pytest.approx(1.0)
    assert review.wilson(0, 10)[0] == 0.0


def test_cluster_bootstrap_known_cases() -> None:
    assert review.cluster_bootstrap([], seed=1) == (0.0, 1.0)
    # One project: every resample is that project.
    assert review.cluster_bootstrap([(3, 4)], seed=1) == (0.75, 0.75)
    assert review.cluster_bootstrap([(3, 3), (5, 5), (1, 1)], seed=1) == (1.0, 1.0)
    # Two projects that disagree completely: a quarter of the resamples are all one or all the other.
    assert review.cluster_bootstrap([(1, 1), (0, 1)], seed=1) == (0.0, 1.0)
    # Projects without reads are not clusters.
    assert review.cluster_bootstrap([(2, 2), (0, 0)], seed=1) == (1.0, 1.0)
    # Seeded, and wider than Wilson's when the projects disagree.
    clusters = [(20, 20), (0, 20), (10, 20), (15, 20)]
    assert review.cluster_bootstrap(clusters, seed=4) == review.cluster_bootstrap(clusters, seed=4)
    low, high = review.cluster_bootstrap(clusters, seed=4)
    w_low, w_high = review.wilson(45, 80)
    assert low < w_low and high > w_high


def test_a_dismissive_reason_counts_as_false() -> None:
    assert review.Verdict("real", "overflow is unlikely but possible").counted == "false"
    assert review.Verdict("worth a look", "Harmless in bf16").counted == "false"
    assert review.Verdict("real", "fp16 attention overflows").counted == "real"


# --- report and reading aid -------------------------------------------------------------------------


def fake_corpus(tmp_path: Path) -> tuple[Path, Any, Path]:
    corpus_dir = tmp_path / "corpus"
    source = "import torch\n" + "".join(f"x{i} = torch.ones(1).half().cumsum(0)\n" for i in range(60))
    for folder in ("new-2.0/pkg", "old-1.0", "tuned-1.0"):
        (corpus_dir / folder).mkdir(parents=True)
        (corpus_dir / folder / "m.py").write_text(source, encoding="utf-8")
    corpus = review.load_corpus(write(tmp_path, "c.toml", MANIFEST))
    new = [
        finding("new", "pkg/m.py", i + 2, "AMP007", f"x{i} = torch.ones(1).half().cumsum(0)")
        for i in range(16)
    ]
    new.append(finding("new", "pkg/m.py", 30, "AMP007", new[0]["source"]))  # a copy of the first
    new.append(finding("new", "pkg/m.py", 31, "AMP008", "x29 = torch.ones(1).half().cumsum(0)"))
    new.append(finding("new", "tests/t.py", 1, "AMP007", "y = 1", in_package=False))
    run_data = {
        "format": 2,
        "command": "python benchmarks/precision_review.py run",
        "started": "2026-02-01T00:00:00+00:00",
        "amplint": {
            "command": "amplint",
            "version": "amplint 0.2.0",
            "commit": "abc",
            "source": "the working tree",
        },
        "python": "3.11.7",
        "cpus": 2,
        "load_average_1min": [1.0, 1.0],
        "wall_seconds": 3.0,
        "reruns": [],
        "opt_in": ["AMP001"],
        "static_rules": ["AMP001", "AMP007", "AMP008", "AMP017"],
        "show_conditional": True,
        "projects": [
            {
                "name": name,
                "version": version,
                "package": package,
                "archive": archive,
                "files": 1,
                "lines": 41,
                "package_files": 1,
                "package_lines": 41,
                "seconds": 1.0,
                "returncode": 0,
                "findings": findings,
                "package_findings": findings,
                "conditional": 0,
                "by_rule": {"AMP007": findings},
            }
            for name, version, package, archive, findings in (
                ("old", "1.0", ".", "wheel", 1),
                ("tuned", "1.0", ".", "wheel", 1),
                ("new", "2.0", "pkg", "sdist", 19),
            )
        ],
        "findings": [
            *new,
            finding("old", "m.py", 2, "AMP007", "x0 = torch.ones(1).half().cumsum(0)"),
            finding("tuned", "m.py", 2, "AMP007", "x0 = torch.ones(1).half().cumsum(0)"),
        ],
        "conditional": [finding("new", "pkg/m.py", 40, "AMP001", "x38 = 1")],
    }
    (corpus_dir / review.RUN_FILE).write_text(json.dumps(run_data), encoding="utf-8")
    verdicts = ""
    for i, verdict, reason in (
        (0, "real", "a half cumsum over the whole sequence"),
        (1, "real", "the same"),
        (2, "false", "already float32"),
        (3, "worth a look", "overflow is unlikely"),  # counts as false
    ):
        verdicts += textwrap.dedent(
            f"""\
            [[verdict]]
            project = "new"
            path = "pkg/m.py"
            code = "AMP007"
            source = "x{i} = torch.ones(1).half().cumsum(0)"
            verdict = "{verdict}"
            reason = "{reason}"
            """
        )
    verdicts += textwrap.dedent(
        """\
        [[verdict]]
        project = "tuned"
        path = "m.py"
        code = "AMP007"
        source = "x0 = torch.ones(1).half().cumsum(0)"
        verdict = "real"
        reason = "tuned on"
        """
    )
    return corpus_dir, corpus, write(tmp_path, "verdicts.toml", verdicts)


def test_report_headlines_first_contact_and_writes_the_reading_aid(tmp_path: Path) -> None:
    corpus_dir, corpus, verdicts = fake_corpus(tmp_path)
    output = tmp_path / "precision.md"
    review.report(corpus_dir, corpus, verdicts, output, 120, 60, 2, 15, "python report", per_rule=20)
    text = output.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert "## First contact: review 2 (not yet read), projects: 1" in text
    # 17 units in the package (the copy merged): 16 of AMP007 and 1 of AMP008; 4 read, 2 real.
    all_rules = next(line for line in lines if line.startswith("| all default rules |"))
    assert all_rules.startswith(
        "| all default rules | 17 | 17 | 4 | 1 | 2 | 0 | 2 | 13 | 50% (15-85; 50-50) |"
    )
    assert all_rules.endswith("| 50% (15-85; 50-50) |")
    numeric = next(line for line in lines if line.startswith("| numeric rules"))
    assert "| 16 | 16 | 4 |" in numeric
    # The tuned-on project's real verdict is in its own row, not in the headline.
    tuned = next(line for line in lines if line.startswith("| tuned on, all default rules |"))
    assert "| 1 | 1 | 1 | 1 | 1 | 0 | 0 | 0 | 100%" in tuned
    assert "| Useful | 20+ reads |" in text
    per_rule = next(line for line in lines if line.startswith("| AMP007 |"))
    assert per_rule.endswith("| no |")
    assert any(line.startswith("| AMP017 | 0 | 0 | 0 |") for line in lines)  # a rule that found nothing
    assert not any(line.startswith("| AMP001 | 0") for line in lines)  # opt-in: not in the default table
    assert "| AMP001 | 1 | 0 | 0 |" in text  # the conditional run, apart
    assert "1 sampled verdicts are marked real or worth a look" in text
    assert "(2000 resamples, seed 2)" in text
    assert "names no amplint commit: set its `commit` to this run's (`abc`)" in text
    # The reading aid: 17 + 1 + 1 sampled units in parts of 15, each block self-contained.
    aid = corpus_dir / review.AID_DIR
    parts = sorted(aid.glob("part-*.md"))
    assert [p.name for p in parts] == ["part-01.md", "part-02.md"]
    first_part = parts[0].read_text(encoding="utf-8")
    assert first_part.count("[[verdict]]") == 15
    assert "- the same line also at: `pkg/m.py:30` (counted once)" in first_part
    block = first_part.split("\n## ")[0]
    code = block.split("`, ")[1].split()[0]
    assert "- project: new 2.0 (first contact)" in block and f"- message: {code} message" in block
    flagged = [line for line in block.splitlines() if line.startswith(">")]
    assert len(flagged) == 1 and "torch.ones(1).half().cumsum(0)" in flagged[0]
    assert len(block.split("```python")[1].split("```")[0].strip().splitlines()) == 31  # 15 either side
    assert "part-02.md" in (aid / "README.md").read_text(encoding="utf-8")


def test_report_refuses_a_run_of_the_old_format(tmp_path: Path) -> None:
    corpus_dir, corpus, verdicts = fake_corpus(tmp_path)
    (corpus_dir / review.RUN_FILE).write_text(json.dumps({"format": 1}), encoding="utf-8")
    with pytest.raises(review.ReviewError, match="run `run` again"):
        review.report(corpus_dir, corpus, verdicts, tmp_path / "p.md", 10, 10, 2, 15, "python report")


def test_the_numeric_row_extends_the_sample_in_the_same_order(tmp_path: Path) -> None:
    corpus_dir, corpus, verdicts = fake_corpus(tmp_path)
    run_data = json.loads((corpus_dir / review.RUN_FILE).read_text(encoding="utf-8"))
    loaded = review.load_verdicts(verdicts)
    measured = review.measure(run_data, corpus, loaded, 5, 5, 0, seed=2, numeric_size=10)
    in_sample = [r.unit.key for r in measured.sample[review.FIRST] if r.unit.code != "AMP008"]
    numeric = [r.unit.key for r in measured.numeric]
    assert len(numeric) == 10 and numeric[: len(in_sample)] == in_sample
    numeric_units = [u for u in measured.units[review.FIRST] if u.code != "AMP008"]
    assert numeric == [u.key for u in review.draw(numeric_units, 10, seed=2)]
    assert [measured.labels[r.unit.key] for r in measured.more_numeric][:1] == ["N1"]
    # Every first-contact read is counted once, however the samples overlap.
    keys = [r.unit.key for r in measured.first_reads]
    assert len(keys) == len(set(keys))


def test_conditional_findings_are_read_apart_from_every_share(tmp_path: Path) -> None:
    # `--sample-conditional`: the findings amplint hides by default are read to learn what the default
    # leaves out; their verdicts count in their own row, never in the default findings' shares.
    corpus_dir, corpus, verdicts = fake_corpus(tmp_path)
    plain, sampled = tmp_path / "plain.md", tmp_path / "sampled.md"
    review.report(corpus_dir, corpus, verdicts, plain, 120, 60, 2, 15, "python report", per_rule=20)
    verdicts.write_text(
        verdicts.read_text(encoding="utf-8")
        + '[[verdict]]\nproject = "new"\npath = "pkg/m.py"\ncode = "AMP001"\nsource = "x38 = 1"\n'
        + 'verdict = "real"\nreason = "the project runs it in bf16"\n',
        encoding="utf-8",
    )
    review.report(
        corpus_dir,
        corpus,
        verdicts,
        sampled,
        120,
        60,
        2,
        15,
        "python report",
        per_rule=20,
        conditional_size=5,
    )
    before, after = plain.read_text(encoding="utf-8"), sampled.read_text(encoding="utf-8")
    row = "| all default rules |"
    assert next(x for x in after.splitlines() if x.startswith(row)) == next(
        x for x in before.splitlines() if x.startswith(row)
    )
    assert "| conditional, first contact | 1 | 1 | 1 | 1 | 1 | 0 | 0 | 0 | 100%" in after
    assert "conditional, first contact" not in before
    assert "| C1 | new | `pkg/m.py:40` | AMP001 | 1 | real | the project runs it in bf16 |" in after
    aid = "".join(p.read_text(encoding="utf-8") for p in (corpus_dir / review.AID_DIR).glob("part-*.md"))
    assert "## C1: new 2.0, `pkg/m.py:40`, AMP001" in aid


def test_a_hidden_copy_of_a_default_finding_is_counted_once_as_the_default(tmp_path: Path) -> None:
    # The same line text under the same rule, shown in one file and hidden in another, is one finding:
    # the default one. It keeps its label in the sample and is not read again among the hidden ones.
    corpus_dir, corpus, verdicts = fake_corpus(tmp_path)
    run_file = corpus_dir / review.RUN_FILE
    run_data = json.loads(run_file.read_text(encoding="utf-8"))
    shown = run_data["findings"][0]
    run_data["conditional"].append({**shown, "path": "pkg/other.py", "line": 7})
    run_file.write_text(json.dumps(run_data), encoding="utf-8")
    loaded = review.load_verdicts(verdicts)
    measured = review.measure(run_data, corpus, loaded, 120, 60, 20, seed=1, conditional_size=5)
    assert [r.unit.first["source"] for r in measured.hidden] == ["x38 = 1"]
    key = review.unit_key(shown)
    assert measured.labels[key].startswith("F")


def test_report_keeps_the_reviews_counts_and_the_quoted_numbers_render_from_them(tmp_path: Path) -> None:
    corpus_dir, corpus, verdicts = fake_corpus(tmp_path)
    corpus = review.Corpus(corpus.projects, [*corpus.reviews[:-1], replace(corpus.current, id="two")])
    summary = tmp_path / "summary.json"
    page = tmp_path / "precision.md"
    review.report(
        corpus_dir, corpus, verdicts, page, 120, 60, 2, 15, "python report", per_rule=20, summary_path=summary
    )
    kept = json.loads(summary.read_text(encoding="utf-8"))["reviews"]
    assert list(kept) == ["two"]  # the current review, by its id (or its date)
    counts = kept["two"]
    # First contact is "new" only; its 4 reads: 2 real, 2 false (one "worth a look" whose reason
    # calls the problem unlikely); the tuned-on project's real verdict is not in them.
    assert counts["all"] == {"new": [2, 0, 2]} and counts["core"] == {"new": [2, 0, 2]}
    assert counts["api"] == {} and counts["order"] == 2 and counts["findings"] == 17
    # The renderer quotes the shares with the intervals the page prints.
    summary_script = _load("precision_summary")
    table = summary_script.table(counts)
    assert "| All default rules | 4 | 50% (Wilson 15-85%, by project 50-50%) |" in table
    assert "50% (15-85; 50-50)" in page.read_text(encoding="utf-8")
    text = summary_script.readme({"reviews": kept})
    assert "4 of their 17 default findings" in text and "50% were useful (50% real" in text
    # A re-check by another amplint (the review names `abc`, the run `def`) is reported, not kept.
    corpus = review.Corpus(corpus.projects, [*corpus.reviews[:-1], replace(corpus.current, commit="def")])
    summary.write_text("{}", encoding="utf-8")
    review.report(
        corpus_dir, corpus, verdicts, page, 120, 60, 2, 15, "python report", per_rule=20, summary_path=summary
    )
    assert json.loads(summary.read_text(encoding="utf-8")) == {}
    assert "Not first contact: these findings come from amplint `abc`" in page.read_text(encoding="utf-8")


def test_a_review_is_measured_as_it_stood(tmp_path: Path) -> None:
    # As of the first review, its projects are first contact, the tuned one too (it was read before
    # any rule was tuned on it); the later review's project is not in it.
    corpus = review.load_corpus(
        write(tmp_path, "c.toml", MANIFEST.replace("seed = 2\n", 'id = "two"\nseed = 2\n'))
    )
    first = corpus.as_of("2026-01-01")
    assert first.current.key == "2026-01-01" and len(first.reviews) == 1
    assert {p.name: first.group(p) for p in first.projects if p.name != "new"} == {
        "old": review.FIRST,
        "tuned": review.FIRST,
    }
    assert corpus.group(corpus.projects[1]) == review.TUNED  # in the reviews after it, apart
    with pytest.raises(review.ReviewError, match="no \\[\\[review\\]\\] is named"):
        corpus.as_of("three")


def test_the_default_set_follows_the_first_contact_reads() -> None:
    # Issue 33: a rule read 20 or more times on first contact stays on by default only if 80% of
    # those reads were useful; with fewer reads its place is not decided yet.
    summary_script = _load("precision_summary")
    allowed = summary_script.on_by_default_allowed
    assert allowed([16, 0, 4]) and allowed([10, 6, 4]) and allowed([0, 0, 19])
    assert not allowed([15, 0, 5]) and not allowed([0, 4, 21])
    # The committed counts decide, and the catalogue follows them.
    data = json.loads((BENCHMARKS / "precision_summary.json").read_text(encoding="utf-8"))
    counts = summary_script.rule_counts(data)
    assert sum(counts["AMP002"]) >= 20  # a decided rule: the check below is not vacuous
    defaults = summary_script.default_rules()
    assert [code for code, c in counts.items() if defaults[code] and not allowed(c)] == []
