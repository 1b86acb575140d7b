"""Bad input gets a clear AMP900 diagnostic for that file, and the run goes on to the next one."""

from __future__ import annotations

import codecs
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import (
    HAZARD,
    HAZARD_CODE,
    HAZARD_COLUMN,
    HAZARD_FIXED,
    HAZARD_LINE,
    amplint_call,
    amplint_run,
    write,
)

from amplint.config import load_settings
from amplint.pipeline.check import run_check

HAZARD_TEXT = "torch.cuda.amp.GradScaler()"  # what HAZARD flags at HAZARD_LINE:HAZARD_COLUMN
FIXED_LINE = '    s = torch.amp.GradScaler("cuda")'


def check_json(cwd: Path, *args: str | Path) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    proc = amplint_run(cwd, "check", "--format", "json", *args)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return proc, json.loads(proc.stdout)["diagnostics"]


def by_path(diagnostics: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for diagnostic in diagnostics:
        grouped.setdefault(diagnostic["path"], []).append(diagnostic)
    return grouped


def only(diagnostics: dict[str, list[dict]], path: str, code: str = "AMP900") -> dict:
    found = diagnostics.get(path, [])
    assert [d["code"] for d in found] == [code], (path, found)
    return found[0]


def can_read(path: Path) -> bool:
    try:
        with path.open("rb"):
            return True
    except PermissionError:
        return False


@pytest.fixture
def bad_dir(tmp_path: Path) -> Path:
    """One directory with a good (hazardous) file among every kind of bad input."""
    d = tmp_path / "proj"
    d.mkdir()
    (d / "good.py").write_text(HAZARD, encoding="utf-8")
    # A syntax error on line 4 of a file that mentions what the rules look for (libcst path) and
    # one that does not (the fast path): both report Python's message and position.
    (d / "syntax_torch.py").write_text(
        "import torch\n\n\ndef f(x:\n    return torch.cuda.amp.GradScaler()\n", encoding="utf-8"
    )
    (d / "syntax_plain.py").write_text("x = 1\ny = (2,\nz = 3 +\n", encoding="utf-8")
    (d / "undecodable.py").write_bytes(b"x = '\xff\xfe'\n")
    (d / "undecodable_line2.py").write_bytes(b"# plain\ny = '\xff'\n")
    (d / "binary.py").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00torch.cuda.amp\x00\x00")
    (d / "empty.py").write_bytes(b"")
    (d / "unknown_cookie.py").write_bytes(b"# -*- coding: klingon -*-\nx = 1\n")
    os.symlink(".", d / "loop")
    os.symlink("b.py", d / "a.py")
    os.symlink("a.py", d / "b.py")
    os.symlink("nowhere.py", d / "dangling.py")
    return d


def test_bad_inputs_are_reported_and_run_goes_on(bad_dir: Path) -> None:
    proc, diagnostics = check_json(bad_dir.parent, "proj")
    assert proc.returncode == 1
    found = by_path(diagnostics)

    good = only(found, "proj/good.py", HAZARD_CODE)
    assert (good["line"], good["column"]) == (HAZARD_LINE, HAZARD_COLUMN)

    syntax = only(found, "proj/syntax_torch.py")
    assert syntax["message"].startswith("SyntaxError:")
    assert (syntax["line"], syntax["column"]) == (4, 6)  # the '(' that is never closed
    assert "never closed" in syntax["message"] or "invalid syntax" in syntax["message"]
    syntax = only(found, "proj/syntax_plain.py")
    assert syntax["message"].startswith("SyntaxError:")
    assert syntax["line"] == 2

    undecodable = only(found, "proj/undecodable.py")
    assert "decode" in undecodable["message"]
    assert "0xff" in undecodable["message"]
    assert (undecodable["line"], undecodable["column"]) == (1, 6)
    undecodable = only(found, "proj/undecodable_line2.py")
    assert "decode" in undecodable["message"]
    assert (undecodable["line"], undecodable["column"]) == (2, 6)
    cookie = only(found, "proj/unknown_cookie.py")
    assert "klingon" in cookie["message"]

    assert "binary" in only(found, "proj/binary.py")["message"]
    assert "proj/empty.py" not in found

    assert "loop" in only(found, "proj/a.py")["message"]
    assert "loop" in only(found, "proj/b.py")["message"]
    assert "broken symbolic link" in only(found, "proj/dangling.py")["message"]
    # `loop -> .` is a link to a directory: not followed, not walked twice, not reported.
    assert not any("proj/loop" in path for path in found)

    assert all(d["severity"] == "error" for d in diagnostics if d["code"] == "AMP900")
    assert set(found) == {
        "proj/good.py",
        "proj/syntax_torch.py",
        "proj/syntax_plain.py",
        "proj/undecodable.py",
        "proj/undecodable_line2.py",
        "proj/unknown_cookie.py",
        "proj/binary.py",
        "proj/a.py",
        "proj/b.py",
        "proj/dangling.py",
    }


def test_bad_inputs_in_text_format(bad_dir: Path) -> None:
    proc = amplint_run(bad_dir.parent, "check", "proj")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert f"proj/good.py:{HAZARD_LINE}:{HAZARD_COLUMN}: {HAZARD_CODE}" in proc.stdout
    assert "proj/binary.py:1:1: AMP900" in proc.stdout


def test_fix_goes_on_past_bad_inputs(bad_dir: Path) -> None:
    before = {p.name: p.read_bytes() for p in bad_dir.iterdir() if p.is_file() and p.name != "good.py"}
    proc = amplint_run(bad_dir.parent, "check", "--fix", "proj")
    assert proc.returncode == 1  # the AMP900 findings remain
    assert "Traceback" not in proc.stderr
    assert (bad_dir / "good.py").read_text(encoding="utf-8") == HAZARD_FIXED
    assert {name: (bad_dir / name).read_bytes() for name in before} == before


def test_ignoring_amp900_hides_bad_inputs(bad_dir: Path) -> None:
    proc, diagnostics = check_json(bad_dir.parent, "--ignore", "AMP900", "proj")
    assert proc.returncode == 1
    assert [(d["path"], d["code"]) for d in diagnostics] == [("proj/good.py", HAZARD_CODE)]


def test_per_file_ignores_amp900(bad_dir: Path) -> None:
    (bad_dir.parent / "pyproject.toml").write_text(
        '[tool.amplint.per-file-ignores]\n"proj/a.py" = ["AMP900"]\n"proj/binary.py" = ["AMP900"]\n',
        encoding="utf-8",
    )
    _, diagnostics = check_json(bad_dir.parent, "proj")
    paths = {d["path"] for d in diagnostics}
    assert "proj/a.py" not in paths  # a problem found while walking
    assert "proj/binary.py" not in paths  # a problem found while reading
    assert {"proj/b.py", "proj/good.py", "proj/undecodable.py"} <= paths


def test_selecting_other_rules_still_reports_unparsable(bad_dir: Path) -> None:
    # A file that could not be checked is reported unless AMP900 is ignored by name.
    _, diagnostics = check_json(bad_dir.parent, "--select", "AMP006", "proj")
    assert {d["code"] for d in diagnostics} == {"AMP900"}
    assert "proj/binary.py" in {d["path"] for d in diagnostics}


def test_symlink_loop_named_explicitly(bad_dir: Path) -> None:
    proc, diagnostics = check_json(bad_dir, "a.py", "good.py")
    assert proc.returncode == 1
    found = by_path(diagnostics)
    assert "loop" in only(found, "a.py")["message"]
    only(found, "good.py", HAZARD_CODE)


def test_directory_symlink_loop_named_explicitly(bad_dir: Path) -> None:
    # Following `loop -> .` explicitly walks the directory once, not forever.
    proc, diagnostics = check_json(bad_dir, "loop")
    assert proc.returncode == 1
    assert [d["code"] for d in diagnostics if d["path"].endswith("good.py")] == [HAZARD_CODE]


def test_nonexistent_path_exits_2_naming_it(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(HAZARD, encoding="utf-8")
    proc = amplint_run(tmp_path, "check", "good.py", "missing/model.py")
    assert proc.returncode == 2
    assert "missing/model.py" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_empty_file_alone_is_clean(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_bytes(b"")
    (tmp_path / "blank.py").write_bytes(b"\n\n   \n")
    proc = amplint_run(tmp_path, "check", "empty.py", "blank.py")
    assert proc.returncode == 0, proc.stdout


# --- unreadable files -------------------------------------------------------------------------------


def test_permission_denied_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root reads everything, so simulate an unreadable file inside the process."""
    d = tmp_path / "proj"
    d.mkdir()
    (d / "good.py").write_text(HAZARD, encoding="utf-8")
    (d / "secret.py").write_text(HAZARD, encoding="utf-8")
    real_open = os.open

    def open_file(path: str | Path, *args: int) -> int:
        if Path(path).name == "secret.py":
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "open", open_file)
    for fix in (False, True):
        run = run_check([Path("proj")], load_settings([Path("proj")]), fix=fix)
        assert run.errors == []
        found = [(d.path, d.code, d.message) for d in run.diagnostics]
        assert ("proj/secret.py", "AMP900", "permission denied") in found
        if fix:
            assert [f for f in found if f[0] == "proj/good.py"] == []
            assert (d / "good.py").read_text(encoding="utf-8") == HAZARD_FIXED
        else:
            assert [(f[0], f[1]) for f in found if f[0] == "proj/good.py"] == [("proj/good.py", HAZARD_CODE)]
    assert (d / "secret.py").read_text(encoding="utf-8") == HAZARD


def _without_read_override(secret: Path) -> list[str] | None:
    """A command prefix under which `secret` (mode 000) cannot be read: none needed for a normal
    user; for root, `setpriv` dropping the capabilities that bypass file permissions; None when
    neither works."""
    if not can_read(secret):
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--"]
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import sys; open(sys.argv[1], 'rb')", str(secret)],
        capture_output=True,
        text=True,
    )
    return prefix if "PermissionError" in probe.stderr else None


def test_permission_denied_subprocess(tmp_path: Path) -> None:
    d = tmp_path / "proj"
    d.mkdir()
    (d / "good.py").write_text(HAZARD, encoding="utf-8")
    secret = d / "secret.py"
    secret.write_text(HAZARD, encoding="utf-8")
    locked = d / "locked"
    locked.mkdir()
    (locked / "inner.py").write_text(HAZARD, encoding="utf-8")
    secret.chmod(0)
    locked.chmod(0)
    try:
        prefix = _without_read_override(secret)
        if prefix is None:
            pytest.skip("running as root: mode 000 does not stop reads (covered in-process)")
        proc = subprocess.run(
            [*prefix, sys.executable, "-m", "amplint", "check", "--format", "json", "proj"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert "Traceback" not in proc.stderr
        diagnostics = json.loads(proc.stdout)["diagnostics"]
        assert proc.returncode == 1
        found = by_path(diagnostics)
        assert "permission denied" in only(found, "proj/secret.py")["message"]
        assert "permission denied" in only(found, "proj/locked")["message"]
        only(found, "proj/good.py", HAZARD_CODE)
    finally:
        secret.chmod(0o644)
        locked.chmod(0o755)


# --- size -------------------------------------------------------------------------------------------


def test_50000_line_file(tmp_path: Path) -> None:
    lines = ["import torch", ""]
    for i in range(12_500):
        lines += [f"def f{i}(x):", f"    y = x * {i}", "    return y", ""]
    lines += ["", "def make_scaler():", "    s = torch.cuda.amp.GradScaler()", "    return s", ""]
    (tmp_path / "big.py").write_text("\n".join(lines), encoding="utf-8")
    hazard_line = lines.index("    s = torch.cuda.amp.GradScaler()") + 1
    assert hazard_line > 50_000
    proc, diagnostics = check_json(tmp_path, "big.py")
    assert proc.returncode == 1
    assert [(d["code"], d["line"], d["column"]) for d in diagnostics] == [(HAZARD_CODE, hazard_line, 9)]


# --- encodings and line endings -----------------------------------------------------------------------


def test_crlf_positions_and_fix_keeps_crlf(tmp_path: Path) -> None:
    path = tmp_path / "crlf.py"
    path.write_bytes(HAZARD.replace("\n", "\r\n").encode())
    proc, diagnostics = check_json(tmp_path, "crlf.py")
    assert [(d["line"], d["column"], d["end_column"]) for d in diagnostics] == [
        (HAZARD_LINE, HAZARD_COLUMN, HAZARD_COLUMN + len(HAZARD_TEXT))
    ]
    proc = amplint_run(tmp_path, "check", "--fix", "crlf.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = path.read_bytes()
    assert b"\n" not in data.replace(b"\r\n", b""), data
    assert b"\r" not in data.replace(b"\r\n", b""), data
    assert data == HAZARD_FIXED.replace("\n", "\r\n").encode()


def test_crlf_inserted_import_uses_crlf(tmp_path: Path) -> None:
    # AMP008 rewrites `GradScaler()` to `torch.amp.GradScaler("cuda")`, adding `import torch`.
    source = (
        "from torch.cuda.amp import GradScaler\r\n\r\n\r\ndef make_scaler():\r\n    return GradScaler()\r\n"
    )
    path = tmp_path / "scaler.py"
    path.write_bytes(source.encode())
    proc = amplint_run(tmp_path, "check", "--fix", "scaler.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = path.read_bytes()
    assert data.startswith(b"import torch\r\nfrom torch.cuda.amp import GradScaler\r\n")
    assert b"\n" not in data.replace(b"\r\n", b""), data
    assert (
        data == ("import torch\r\n" + source.replace("GradScaler()", 'torch.amp.GradScaler("cuda")')).encode()
    )


def test_cr_only_line_endings(tmp_path: Path) -> None:
    path = tmp_path / "mac.py"
    path.write_bytes(HAZARD.replace("\n", "\r").encode())
    _, diagnostics = check_json(tmp_path, "mac.py")
    assert [(d["line"], d["column"]) for d in diagnostics] == [(HAZARD_LINE, HAZARD_COLUMN)]
    assert amplint_run(tmp_path, "check", "--fix", "mac.py").returncode == 0
    data = path.read_bytes()
    assert b"\n" not in data
    assert FIXED_LINE.encode() + b"\r" in data
    assert data == HAZARD_FIXED.replace("\n", "\r").encode()


def test_bom_positions_and_fix_keeps_bom(tmp_path: Path) -> None:
    path = tmp_path / "bom.py"
    path.write_bytes(codecs.BOM_UTF8 + HAZARD.encode())
    proc, diagnostics = check_json(tmp_path, "bom.py")
    assert [(d["line"], d["column"]) for d in diagnostics] == [(HAZARD_LINE, HAZARD_COLUMN)]
    proc = amplint_run(tmp_path, "check", "--fix", "bom.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = path.read_bytes()
    assert data.startswith(codecs.BOM_UTF8)
    assert not data[3:].startswith(codecs.BOM_UTF8)
    assert data[3:].decode("utf-8") == HAZARD_FIXED


def test_bom_on_first_line_hazard_column(tmp_path: Path) -> None:
    # The BOM is not a column: a hazard on line 1 after `import torch; s = ` starts at column 19.
    (tmp_path / "bom2.py").write_bytes(codecs.BOM_UTF8 + b"import torch; s = torch.cuda.amp.GradScaler()\n")
    _, diagnostics = check_json(tmp_path, "bom2.py")
    assert [(d["line"], d["column"]) for d in diagnostics] == [(1, 19)]


def test_latin1_cookie_fix_keeps_encoding(tmp_path: Path) -> None:
    text = (
        "# -*- coding: latin-1 -*-\n"
        "import torch\n"
        "\n"
        "\n"
        "def make_scaler():\n"
        '    note = "d\xe9croissance"; s = torch.cuda.amp.GradScaler()\n'
        "    return s, note\n"
    )
    path = tmp_path / "latin.py"
    path.write_bytes(text.encode("latin-1"))
    _, diagnostics = check_json(tmp_path, "latin.py")
    # Columns count characters: the one-byte 'é' (two bytes in UTF-8) is one column.
    assert [(d["line"], d["column"]) for d in diagnostics] == [(6, 32)]
    proc = amplint_run(tmp_path, "check", "--fix", "latin.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = path.read_bytes()
    assert b"d\xe9croissance" in data
    assert "é".encode() not in data
    assert data.decode("latin-1") == text.replace(HAZARD_TEXT, 'torch.amp.GradScaler("cuda")')


def test_utf8_non_ascii_columns_count_characters(tmp_path: Path) -> None:
    text = HAZARD.replace(f"    s = {HAZARD_TEXT}", f'    t = "é😀"; s = {HAZARD_TEXT}')
    assert text != HAZARD
    path = tmp_path / "uni.py"
    path.write_text(text, encoding="utf-8")
    _, diagnostics = check_json(tmp_path, "uni.py")
    assert [(d["line"], d["column"], d["end_column"]) for d in diagnostics] == [
        (5, 19, 19 + len(HAZARD_TEXT))
    ]
    assert amplint_run(tmp_path, "check", "--fix", "uni.py").returncode == 0
    assert path.read_text(encoding="utf-8") == text.replace(HAZARD_TEXT, 'torch.amp.GradScaler("cuda")')


def test_a_file_too_deep_to_analyse_is_one_diagnostic(tmp_path: Path) -> None:
    # A 600-branch `elif` chain (valid Python, which Python's parser reads) is deeper than the
    # rendering that places a finding can recurse.
    branches = "".join(f"    elif x == {i}:\n        return torch.exp(y) * {i}\n" for i in range(1, 600))
    deep = (
        "import torch\n\n\ndef f(x):\n    y = torch.sigmoid(x)\n    if x == 0:\n        return torch.exp(y)\n"
    )
    write(tmp_path / "deep.py", deep + branches)
    write(tmp_path / "ok.py", HAZARD)
    # AMP001's findings there rest on the caller: a run that hides them would not run it.
    proc = amplint_run(
        tmp_path, "check", "--extend-select", "AMP001", "--show-conditional", "--format", "json", "."
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert len(proc.stderr) < 10_000  # no traceback per frame
    found = {(d["path"], d["code"]) for d in json.loads(proc.stdout)["diagnostics"]}
    assert found == {("deep.py", "AMP900"), ("ok.py", HAZARD_CODE)}
    (deep_finding,) = [d for d in json.loads(proc.stdout)["diagnostics"] if d["path"] == "deep.py"]
    assert "nesting too deep" in deep_finding["message"] and "AMP001" in deep_finding["message"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("check", ".", "--jobs", "0"), "argument --jobs/-j: expected at least 1 process, got 0"),
        (
            ("check", ".", "--confirm", "--timeout", "nan"),
            "argument --timeout: expected a positive number of seconds, got nan",
        ),
        (
            ("check", ".", "--confirm", "--timeout", "-1"),
            "argument --timeout: expected a positive number of seconds, got -1",
        ),
        (
            ("trace", "--hf-config", "c.json", "--seq-len", "-5"),
            "argument --seq-len: expected at least 1, got -5",
        ),
        (
            ("trace", "--hf-config", "c.json", "--batch-size", "x"),
            "argument --batch-size: expected a whole number, got 'x'",
        ),
        (("lock", "--timeout", "inf"), "argument --timeout: expected a positive number of seconds, got inf"),
    ],
)
def test_a_wrong_argument_is_a_usage_error(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    proc = amplint_run(tmp_path, *args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_a_file_python_accepts_but_libcst_cannot_read_is_a_warning_not_amp900(tmp_path: Path) -> None:
    """5,000 implicitly concatenated strings compile, but libcst's parser gives up on them: the file
    is not broken, so it gets no AMP900, only a warning that it was not checked."""
    strings = "".join(f'    "s{i}"\n' for i in range(5000))
    text = f"import torch\n\nx = (\n{strings})\nscaler = torch.cuda.amp.GradScaler()\n"
    compile(text, "strings.py", "exec")  # Python accepts it
    write(tmp_path / "strings.py", text)
    proc = amplint_run(tmp_path, "check", "strings.py", "--format", "json", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["diagnostics"] == []
    assert "amplint: warning: strings.py:" in proc.stderr
    assert "not checked: Python accepts it, but amplint's parser (libcst) does not" in proc.stderr


def test_a_file_over_max_file_size_is_one_amp900_and_the_rest_is_checked(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nmax-file-size = "2KB"\n')
    write(tmp_path / "big.py", HAZARD + "".join(f"x{i} = {i}\n" for i in range(400)))
    write(tmp_path / "small.py", HAZARD)
    for fix in ((), ("--fix",)):
        proc = amplint_run(tmp_path, "check", ".", "--format", "json", "--no-cache", *fix)
        found = {d["path"]: (d["code"], d["message"]) for d in json.loads(proc.stdout)["diagnostics"]}
        assert found["big.py"] == (
            "AMP900",
            "file too large to check (4.3 KB, over max-file-size 2.0 KB); raise max-file-size in [tool.amplint] to check it",
        )
        assert ("small.py" in found) == (not fix)  # checked, and fixed with --fix
    write(tmp_path / "pyproject.toml", "[tool.amplint]\nmax-file-size = 0\n")
    proc = amplint_run(tmp_path, "check", ".")
    assert proc.returncode == 2 and "'max-file-size' must be a positive size in bytes" in proc.stderr


def test_the_files_own_syntax_warnings_are_not_printed(tmp_path: Path) -> None:
    write(
        tmp_path / "m.py", 'import torch\n\nx = 1if True else 2\ny = "\\d"\ns = torch.cuda.amp.GradScaler()\n'
    )
    proc = amplint_run(tmp_path, "check", "m.py", "--no-cache")
    assert proc.returncode == 1 and "AMP008" in proc.stdout
    assert "SyntaxWarning" not in proc.stderr


def test_running_out_of_memory_on_one_file_is_one_amp900() -> None:
    from amplint.rule import Rule
    from amplint.rules.runner import lint_text

    class Hungry(Rule):
        code, name, summary = "AMP998", "hungry", "runs out of memory"

        def check(self, ctx):  # type: ignore[no-untyped-def]
            raise MemoryError

    result = lint_text("x = 1\n", [Hungry])
    assert [(d.code, d.message) for d in result.diagnostics] == [
        ("AMP900", "out of memory while checking it (lower max-file-size?); the file was not checked")
    ]
    assert result.internal_errors == []


def test_a_tree_of_pathological_files_costs_one_diagnostic_each(tmp_path: Path) -> None:
    """The inputs that once ended a run or flooded stderr, beside one ordinary file with a finding."""
    scaler = "s = torch.cuda.amp.GradScaler()\n"  # a word the rules look for: libcst parses each file
    files = {
        "parens_150.py": "import torch\nx = " + "(" * 150 + "1" + ")" * 150 + "\n" + scaler,
        "parens_250.py": "import torch\nx = " + "(" * 250 + "1" + ")" * 250 + "\n" + scaler,  # Python refuses
        "elif_320.py": "import torch\nif a == 0:\n    pass\n"
        + "".join(f"elif a == {i}:\n    pass\n" for i in range(1, 320))
        + scaler,
        "elif_500.py": "import torch\nif a == 0:\n    pass\n"
        + "".join(f"elif a == {i}:\n    pass\n" for i in range(1, 500))
        + scaler,
        "list_200000.py": "import torch\nx = [\n"
        + "".join(f"    {i},\n" for i in range(200_000))
        + "]\n"
        + scaler,
        "strings_5000.py": "import torch\nx = (\n"
        + "".join(f'    "s{i}"\n' for i in range(5000))
        + ")\n"
        + scaler,
        "tabs.py": "import torch\nif True:\n\tif True:\n\t        " + scaler,
    }
    for name, text in files.items():
        write(tmp_path / name, text)
    write(tmp_path / "model.py", HAZARD)
    proc = amplint_run(tmp_path, "check", ".", "--format", "json", "--no-cache")
    assert proc.returncode == 1, proc.stderr[-2000:]
    found = {(d["path"], d["code"]) for d in json.loads(proc.stdout)["diagnostics"]}
    assert ("model.py", HAZARD_CODE) in found
    refused = {name for name, text in files.items() if _python_refuses(text)}
    assert refused == {"parens_250.py"}
    # AMP900 on the file Python refuses only: the 2 MB list is checked, a part at a time.
    assert {path for path, code in found if code == "AMP900"} == {"parens_250.py"}
    assert len(proc.stderr.encode()) < 100_000 and "Traceback" not in proc.stderr


def _python_refuses(text: str) -> bool:
    try:
        compile(text, "<test>", "exec")
    except (SyntaxError, RecursionError, MemoryError):
        return True
    return False


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("fac.py:nope", "runtime target fac.py:nope: "),
        ("fac.py:three", "runtime target fac.py:three: the factory must return (model, args)"),
        ("missing.py:f", "runtime target missing.py:f: target file "),
    ],
)
def test_a_runtime_target_that_names_no_model_is_a_usage_error(
    tmp_path: Path, target: str, message: str
) -> None:
    pytest.importorskip("torch")
    write(tmp_path / "fac.py", "def three():\n    return 3\n")
    write(tmp_path / "model.py", HAZARD)
    proc = amplint_call(tmp_path, "check", "model.py", "--confirm", "--target", target, "--fix")
    assert proc.returncode == 2
    assert f"amplint: error: {message}" in proc.stderr and "Traceback" not in proc.stderr
    assert (tmp_path / "model.py").read_text(encoding="utf-8") == HAZARD  # nothing written


def _run_in_1gib(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """amplint with its address space capped at 1 GiB: reading a 3 GiB file, or /dev/zero to its end,
    fails there instead of taking the machine."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run(
        [sys.executable, "-m", "amplint", *args], cwd=cwd, capture_output=True, text=True, preexec_fn=cap
    )


def test_a_huge_file_is_refused_from_its_size_before_it_is_read(tmp_path: Path) -> None:
    with open(tmp_path / "huge.py", "wb") as handle:
        handle.truncate(3 << 30)  # sparse: 3 GiB that cost no disk
    write(tmp_path / "model.py", HAZARD)
    for extra in ((), ("--fix",)):
        done = _run_in_1gib(tmp_path, "check", ".", "--no-cache", "--format", "json", *extra)
        assert done.returncode == 1, done.stderr[-2000:]
        found = {d["path"]: d["message"] for d in json.loads(done.stdout)["diagnostics"]}
        assert found["huge.py"].startswith("file too large to check (3221.2 MB, over max-file-size")


def test_an_ignore_file_or_source_that_leads_into_dev_is_not_read(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").symlink_to("/dev/zero")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".gitignore").symlink_to("/dev/urandom")
    write(tmp_path / "sub" / "model.py", HAZARD)
    done = _run_in_1gib(tmp_path, "check", ".", "--no-cache", "--format", "json")
    assert done.returncode == 1, done.stderr[-2000:]
    found = {(d["path"], d["code"]): d["message"] for d in json.loads(done.stdout)["diagnostics"]}
    assert ("sub/model.py", HAZARD_CODE) in found
    assert "leads into /dev" in found[(".gitignore", "AMP900")]
    assert "leads into /dev" in found[("sub/.gitignore", "AMP900")]


def _generated(blocks: int, hazard_every: int) -> str:
    """A generated module: functions, tables, a multi-line string with column-0 lines that look like
    statements (a cut there shows only when compiled), and the hazard every `hazard_every` blocks."""
    parts = ["import torch\nimport torch.nn.functional as F\n\n"]
    for i in range(blocks):
        parts.append(f"\ndef layer_{i}(x, w):\n    y = F.linear(x, w)\n    return y * {i}\n\n")
        if i % 40 == 0:
            parts.append(f"TABLE_{i} = {{" + ", ".join(f"'k{j}': {j}" for j in range(100)) + "}\n")
        if i % 997 == 0:
            parts.append('DOC = """\nx = torch.cuda.amp.GradScaler()\nelse:\n"""\n')
        if i % hazard_every == hazard_every - 1:
            parts.append(f"def scaler_{i}():\n    return torch.cuda.amp.GradScaler()\n\n")
    return "".join(parts)


def test_a_large_valid_module_is_checked_and_fixed(tmp_path: Path) -> None:
    text = _generated(25_000, 5_000)
    assert len(text) > 2_300_000
    write(tmp_path / "generated.py", text)
    lines = [
        n
        for n, line in enumerate(text.splitlines(), 1)
        if line.endswith("return torch.cuda.amp.GradScaler()")
    ]
    _, found = check_json(tmp_path, "generated.py", "--no-cache")
    assert [(d["code"], d["line"], d["column"]) for d in found] == [(HAZARD_CODE, n, 12) for n in lines]
    fixed = amplint_run(tmp_path, "check", "generated.py", "--no-cache", "--fix")
    assert fixed.returncode == 0, fixed.stderr
    expected = text.replace(
        "    return torch.cuda.amp.GradScaler()", '    return torch.amp.GradScaler("cuda")'
    )
    assert (tmp_path / "generated.py").read_text(encoding="utf-8") == expected


def test_a_large_module_broken_late_is_refused_where_python_refuses_it(tmp_path: Path) -> None:
    text = _generated(12_000, 100_000)
    broken = text + "\ndef tail(:\n    pass\n"
    write(tmp_path / "generated.py", broken)
    _, found = check_json(tmp_path, "generated.py", "--no-cache")
    error = only(by_path(found), "generated.py")
    try:
        compile(broken, "generated.py", "exec")
    except SyntaxError as exc:
        assert (error["line"], error["column"]) == (exc.lineno, exc.offset)
        assert error["message"].startswith(f"SyntaxError: {exc.msg}")


def test_a_long_string_of_statement_lines_in_a_large_module_stays_a_string(tmp_path: Path) -> None:
    # Longer than a piece and made of lines that compile alone: pieces cut inside it must not be
    # read as code (no AMP008 for its GradScaler, no AMP900 for its unclosed quotes).
    inner = "".join(f"x_{i} = torch.cuda.amp.GradScaler()\n" for i in range(4_000))
    text = _generated(9_000, 100_000) + f'TEXT = """\n{inner}"""\n' + _generated(9_000, 4_000)
    assert len(inner) > 100_000 and len(text) > 1_500_000
    write(tmp_path / "generated.py", text)
    lines = [n for n, line in enumerate(text.splitlines(), 1) if line.startswith("    return torch.cuda")]
    _, found = check_json(tmp_path, "generated.py", "--no-cache")
    assert [(d["code"], d["line"]) for d in found] == [(HAZARD_CODE, n) for n in lines]
    assert len(lines) == 2


def test_only_the_pieces_of_a_large_module_holding_a_rules_word_become_syntax_trees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cost of a large file follows the code the rules read: Python compiles every piece, but
    builds a syntax tree only of the pieces that hold a word some rule looks for."""
    from amplint.rules import all_rules, runner

    parsed: list[str] = []

    def python_ast(text: str, *args: object, **kwargs: object) -> object:
        parsed.append(text)
        return source_python_ast(text, *args, **kwargs)

    source_python_ast = runner.python_ast
    monkeypatch.setattr(runner, "python_ast", python_ast)
    text = _generated(25_000, 5_000)
    found = runner.lint_text(text, all_rules(), "generated.py").diagnostics
    assert [d.line for d in found if d.code == HAZARD_CODE] == [
        n
        for n, line in enumerate(text.splitlines(), 1)
        if line.endswith("return torch.cuda.amp.GradScaler()")
    ]
    assert all("amp" in piece for piece in parsed)
    assert 0 < sum(map(len, parsed)) < len(text) / 2
