"""`benchmarks/recall.py`: the cases file is checked, a case is caught only by a numeric finding on
its lines, and a real amplint run on a small release (the bundled sampler, cast to fp16 by its
script) catches the case on the flagged line and not the one on a harmless line."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[2]


def _load(name: str) -> ModuleType:
    if name not in sys.modules:  # benchmarks/ scripts import each other by name
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


recall = _load("recall")


def _case(case_id: str, lines: tuple[int, int], path: str = "sampling.py", **extra: object) -> str:
    fields = {
        "id": case_id,
        "name": "demo",
        "version": "1.0",
        "sdist": True,
        "path": path,
        "lines": list(lines),
        "fixed_in": "1.1",
        "reference": "https://example.org/issue/1",
        "commit": "",
        "hazard": "top-p sampling from fp16 probabilities",
        "fix": "probabilities in float32",
        "mode": "generate.py casts the model with .half()",
        "named_in_repo": False,
        **extra,
    }
    body = "\n".join(f"{key} = {_toml(value)}" for key, value in fields.items())
    return f"[[case]]\n{body}\n"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(str(item) for item in value) + "]"
    return f'"{value}"'


def _write(tmp_path: Path, *cases: str) -> Path:
    path = tmp_path / "cases.toml"
    path.write_text("".join(cases), encoding="utf-8")
    return path


def test_cases_load_with_their_lines(tmp_path: Path) -> None:
    [case] = recall.load_cases(_write(tmp_path, _case("demo-topp", (17, 20))))
    assert (case.id, case.project.folder, case.path, case.lines) == (
        "demo-topp",
        "demo-1.0",
        "sampling.py",
        (17, 20),
    )


@pytest.mark.parametrize(
    ("cases", "message"),
    [
        ((_case("a", (20, 17)),), "lines must be"),
        ((_case("a", (1, 40)),), "lines must be"),
        ((_case("a", (1, 2)), _case("a", (3, 4))), "used twice"),
        ((_case("A b", (1, 2)),), "is not lower-case"),
        ((_case("a", (1, 2)).replace('fix = "probabilities in float32"\n', ""),), "missing ['fix']"),
        ((_case("a", (1, 2), severity="high"),), "unknown ['severity']"),
    ],
)
def test_a_bad_case_is_refused(tmp_path: Path, cases: tuple[str, ...], message: str) -> None:
    with pytest.raises(recall.ReviewError, match=re.escape(message)):
        recall.load_cases(_write(tmp_path, *cases))


def test_only_numeric_findings_on_the_lines_count(tmp_path: Path) -> None:
    [case] = recall.load_cases(_write(tmp_path, _case("demo", (10, 12))))
    findings = [
        {"path": "sampling.py", "line": 9, "code": "AMP007", "message": "before"},
        {"path": "sampling.py", "line": 10, "code": "AMP008", "message": "deprecated API"},
        {"path": "other.py", "line": 11, "code": "AMP013", "message": "another file"},
        {"path": "sampling.py", "line": 12, "code": "AMP013", "message": "on the lines"},
        {"path": "sampling.py", "line": 13, "code": "AMP007", "message": "after"},
    ]
    assert recall.on_lines(case, findings) == [{"code": "AMP013", "line": 12, "message": "on the lines"}]


GENERATE = textwrap.dedent(
    """\
    import torch
    from sampling import generate
    from sampling_overflow import TinyLM


    def main():
        lm = TinyLM().half()
        print(generate(lm, torch.zeros(1, 1, dtype=torch.long)))
    """
)


def test_a_run_catches_the_flagged_line_only(tmp_path: Path) -> None:
    release = tmp_path / "corpus" / "demo-1.0"
    release.mkdir(parents=True)
    for name in ("sampling.py", "sampling_overflow.py"):
        shutil.copy(ROOT / "fixtures" / name, release / name)
    (release / "generate.py").write_text(GENERATE, encoding="utf-8")
    (release / ".git").mkdir()  # the release is its own repository, as `fetch` unpacks it
    sampler = (release / "sampling.py").read_text(encoding="utf-8").splitlines()
    draw = next(n for n, line in enumerate(sampler, 1) if "torch.multinomial(" in line)
    cases = recall.load_cases(
        _write(
            tmp_path,
            _case("drawn", (draw, draw)),
            _case("header", (1, 2)),
            _case("gone", (1, 1), path="x.py"),
        )
    )
    with pytest.raises(recall.ReviewError, match=re.escape("gone: demo-1.0 has no x.py")):
        recall.run(cases, tmp_path / "corpus", None, 1)
    document = recall.run(cases[:2], tmp_path / "corpus", None, 1)
    drawn, header = document["cases"]
    assert [f["code"] for f in drawn["default"]] == ["AMP013"]
    assert all(f["line"] == draw for way, _ in recall.WAYS for f in drawn[way])
    assert not any(header[way] for way, _ in recall.WAYS)
    with pytest.raises(recall.ReviewError, match=re.escape("judge these findings") + ".*drawn AMP013"):
        recall.report({"runs": [document]}, cases[:2])
    judged = '[[judged]]\ncase = "drawn"\ncode = "AMP013"\nnames_hazard = true\nreason = "the draw"\n'
    cases = recall.load_cases(_write(tmp_path, _case("drawn", (draw, draw)), _case("header", (1, 2)), judged))
    rendered = recall.report({"runs": [document]}, cases)
    first = f"| `{document['commit']}`, first contact | default |"
    assert f"{first} 1/2 (50%; 9%-91%) | 1/2 (50%; 9%-91%) | 1/2 (50%; 9%-91%) |" in rendered["table"]
    assert "| drawn | demo 1.0, `sampling.py`:" in rendered["cases"]
    assert "AMP013 (names it)" in rendered["cases"]
    assert "Judged: the draw" in rendered["cases"]
    # The same finding judged as naming another hazard flags the case without catching it.
    assert "defaults caught 1 on first contact" in rendered["readme"]
    cases[0].judged["AMP013"] = (False, "another")
    rendered = recall.report({"runs": [document]}, cases)
    assert f"{first} 1/2 (50%; 9%-91%) | 0/2 (0%; 0%-66%) | 0/2 (0%; 0%-66%) |" in rendered["table"]
    # A later run is reported after the first contact, and the cases table shows it.
    later = {**document, "commit": "later", "cases": [{**c, "default": []} for c in document["cases"]]}
    rendered = recall.report({"runs": [document, later]}, cases)
    assert "| `later`, after changes | default | 0/2 (0%; 0%-66%) |" in rendered["table"]
    assert "In the latest run (amplint at `later`)" in rendered["cases"]


def test_a_judgement_needs_a_known_case(tmp_path: Path) -> None:
    judged = '[[judged]]\ncase = "nope"\ncode = "AMP013"\nnames_hazard = true\nreason = "x"\n'
    with pytest.raises(recall.ReviewError, match="judged 1"):
        recall.load_cases(_write(tmp_path, _case("demo", (1, 2)), judged))
