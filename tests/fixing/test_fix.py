"""`--diff` shows, `--fix` writes: atomically, keeping mode and bytes it does not mean to change,
never leaving unparsable code, and a second run changes nothing."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support import HAZARD, HAZARD_CODE, HAZARD_COLUMN, HAZARD_FIXED, HAZARD_LINE, OTHERS, amplint_run, write

import amplint
import amplint.fixing.edits
from amplint.config import load_settings
from amplint.fixing.edits import apply_edits
from amplint.pipeline.check import run_check
from amplint.rules import rule_by_code

FIXED = HAZARD_FIXED
# OTHERS once --fix has run: AMP006's statistic is upcast, AMP011 (no automatic fix) is left alone.
OTHERS_FIXED = OTHERS.replace(
    "var = x.pow(2)", "var = x.to(torch.promote_types(x.dtype, torch.float32)).pow(2)"
).replace("torch.rsqrt(var + 1e-6)", "torch.rsqrt(var + 1e-6).to(x.new_empty(0).pow(0).dtype)")

# The sigmoid-upcast fix of AMP001, on code that runs in its caller's dtype: the finding is
# conditional, so the tests of that fix ask for conditional findings.
SIGMOID = """\
import torch


def decay(x):
    w = torch.sigmoid(x)
    return torch.exp(w)
"""
OPT_IN = ("--show-conditional", "--unsafe-fixes")  # its fix changes the dtype consumers see


def snapshot(directory: Path) -> dict[str, tuple[bytes, int, int, int]]:
    """Every entry's bytes, mode, inode and mtime, links not followed."""
    result = {}
    for path in sorted(directory.rglob("*")):
        st = path.lstat()
        content = (
            os.readlink(path).encode() if path.is_symlink() else path.read_bytes() if path.is_file() else b""
        )
        result[path.relative_to(directory).as_posix()] = (content, st.st_mode, st.st_ino, st.st_mtime_ns)
    return result


# --- --diff -------------------------------------------------------------------------------------


def test_diff_prints_unified_diff_and_writes_nothing(tmp_path: Path) -> None:
    write(tmp_path / "pkg" / "model.py", HAZARD)
    before = snapshot(tmp_path)
    proc = amplint_run(tmp_path, "check", "--diff", "pkg")
    assert proc.returncode == 1, proc.stderr
    assert snapshot(tmp_path) == before
    assert proc.stdout.splitlines() == [
        "--- a/pkg/model.py",
        "+++ b/pkg/model.py",
        "@@ -2,5 +2,5 @@",
        " ",
        " ",
        " def make_scaler():",
        "-    s = torch.cuda.amp.GradScaler()",
        '+    s = torch.amp.GradScaler("cuda")',
        "     return s",
    ]
    # The report goes to stderr so that stdout can be piped to `git apply` / `patch`.
    assert "Would fix 1 finding, 0 remaining." in proc.stderr


def test_diff_applies_with_git_apply(tmp_path: Path) -> None:
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    write(tmp_path / "pkg" / "model.py", HAZARD)
    write(tmp_path / "pkg" / "others.py", OTHERS)
    proc = amplint_run(tmp_path, "check", "--diff", "pkg")
    assert proc.returncode == 1
    (tmp_path / "fix.diff").write_text(proc.stdout, encoding="utf-8")
    applied = subprocess.run(
        [git, "apply", "--unsafe-paths", "fix.diff"], cwd=tmp_path, capture_output=True, text=True
    )
    assert applied.returncode == 0, applied.stderr
    assert (tmp_path / "pkg" / "model.py").read_text(encoding="utf-8") == FIXED
    assert (tmp_path / "pkg" / "others.py").read_text(encoding="utf-8") == OTHERS_FIXED
    # What the diff did is exactly what --fix would have done: nothing is left to fix.
    assert amplint_run(tmp_path, "check", "--diff", "pkg").stdout == ""


def test_diff_on_clean_file_is_empty_and_exits_0(tmp_path: Path) -> None:
    write(tmp_path / "clean.py", "import torch\n\n\ndef f(x):\n    return torch.relu(x)\n")
    proc = amplint_run(tmp_path, "check", "--diff", "clean.py")
    assert proc.returncode == 0
    assert proc.stdout == ""


def test_diff_with_only_unfixable_findings(tmp_path: Path) -> None:
    write(tmp_path / "others.py", OTHERS)
    proc = amplint_run(tmp_path, "check", "--diff", "--select", "AMP011", "others.py")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "AMP011" in proc.stderr


def test_diff_to_output_file(tmp_path: Path) -> None:
    write(tmp_path / "model.py", HAZARD)
    proc = amplint_run(tmp_path, "check", "--diff", "--format", "json", "-o", "report.json", "model.py")
    assert proc.returncode == 1
    assert proc.stdout.startswith("--- a/model.py\n")
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert report["summary"]["diff"] is True
    assert (tmp_path / "model.py").read_text(encoding="utf-8") == HAZARD


# --- --fix --------------------------------------------------------------------------------------


def test_fix_applies_and_exits_0(tmp_path: Path) -> None:
    path = write(tmp_path / "model.py", HAZARD)
    proc = amplint_run(tmp_path, "check", "--fix", "model.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert path.read_text(encoding="utf-8") == FIXED
    assert "Fixed 1 finding" in proc.stdout
    assert amplint_run(tmp_path, "check", "model.py").returncode == 0


def test_fix_reports_fixed_count_in_json(tmp_path: Path) -> None:
    write(tmp_path / "a.py", HAZARD)
    write(tmp_path / "b.py", HAZARD)
    proc = amplint_run(tmp_path, "check", "--fix", "--format", "json", ".")
    assert proc.returncode == 0
    report = json.loads(proc.stdout)
    assert report["diagnostics"] == []
    assert report["summary"]["fixed"] == 2
    assert report["summary"]["fix_applied"] is True


def test_fix_exits_1_when_unfixable_findings_remain(tmp_path: Path) -> None:
    rule = rule_by_code("AMP011")
    assert rule is not None
    assert all(bad.fixed is None for bad in rule.bad)
    path = write(tmp_path / "others.py", OTHERS)
    proc = amplint_run(tmp_path, "check", "--fix", "--format", "json", "others.py")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert [(d["code"], d["line"]) for d in report["diagnostics"]] == [("AMP011", 6)]
    assert report["diagnostics"][0]["fix"] is None
    assert report["summary"]["fixed"] == 1
    text = path.read_text(encoding="utf-8")
    # AMP006 was fixed
    assert "var = x.to(torch.promote_types(x.dtype, torch.float32)).pow(2).mean(-1, keepdim=True)" in text
    assert 'attn_implementation="eager")' in text  # AMP011 left alone
    assert text == OTHERS_FIXED


def test_fix_with_exit_zero(tmp_path: Path) -> None:
    write(tmp_path / "others.py", OTHERS)
    proc = amplint_run(tmp_path, "check", "--fix", "--exit-zero", "others.py")
    assert proc.returncode == 0
    assert "AMP011" in proc.stdout


def test_second_fix_changes_nothing(tmp_path: Path) -> None:
    write(tmp_path / "model.py", HAZARD)
    write(tmp_path / "others.py", OTHERS)
    gates = rule_by_code("AMP001").bad[2]  # type: ignore[union-attr]
    assert gates.fixed is not None
    write(tmp_path / "gates.py", gates.code)  # its fix adds `import torch`: conditional, asked for below
    amplint_run(tmp_path, "check", *OPT_IN, "--fix", ".")
    after_first = snapshot(tmp_path)
    assert after_first["model.py"][0] == FIXED.encode()
    assert after_first["gates.py"][0] == gates.fixed.encode()
    assert after_first["others.py"][0] == OTHERS_FIXED.encode()
    proc = amplint_run(tmp_path, "check", *OPT_IN, "--fix", ".")
    assert proc.returncode == 1  # the AMP011 finding remains
    # Bytes, and even inode and mtime: nothing was rewritten.
    assert snapshot(tmp_path) == after_first
    proc = amplint_run(tmp_path, "check", *OPT_IN, "--diff", ".")
    assert proc.stdout == ""


@pytest.mark.parametrize("mode", [0o755, 0o600, 0o640])  # read-only: tests/fixing/test_write_safety.py
def test_fix_keeps_file_mode(tmp_path: Path, mode: int) -> None:
    path = write(tmp_path / "model.py", HAZARD)
    path.chmod(mode)
    try:
        proc = amplint_run(tmp_path, "check", "--fix", "model.py")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert stat.S_IMODE(path.stat().st_mode) == mode
        assert path.read_bytes() == FIXED.encode()
    finally:
        path.chmod(0o644)


def test_fix_is_atomic_no_temp_files_left(tmp_path: Path) -> None:
    for name in ("a.py", "b.py", "c.py"):
        write(tmp_path / "pkg" / name, HAZARD)
    write(tmp_path / "pkg" / "others.py", OTHERS)
    inode_before = (tmp_path / "pkg" / "a.py").stat().st_ino
    before = sorted(p.name for p in (tmp_path / "pkg").iterdir())
    amplint_run(tmp_path, "check", "--fix", "pkg")
    assert sorted(p.name for p in (tmp_path / "pkg").iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".amplint_cache") == ["pkg"]
    # Written by rename over the old file (a new inode), not in place.
    assert (tmp_path / "pkg" / "a.py").stat().st_ino != inode_before
    assert (tmp_path / "pkg" / "a.py").read_text(encoding="utf-8") == FIXED
    assert (tmp_path / "pkg" / "others.py").read_text(encoding="utf-8") == OTHERS_FIXED


def test_fix_that_breaks_code_leaves_file_untouched_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "model.py", HAZARD)
    other = write(tmp_path / "other.py", HAZARD)
    real_apply = amplint.fixing.edits.apply_edits

    calls: list[str] = []

    def broken_for_model(text: str, edits: object) -> tuple[str, int]:
        calls.append(text)
        new_text, applied = real_apply(text, edits)  # type: ignore[arg-type]
        return new_text.replace("def make_scaler():", "def make_scaler(:"), applied

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(amplint.fixing.edits, "apply_edits", broken_for_model)
    run = run_check([Path("model.py")], load_settings([Path("model.py")]), fix=True)
    assert calls, "apply_edits was not used"
    assert path.read_text(encoding="utf-8") == HAZARD
    assert len(run.errors) == 1
    assert "model.py" in run.errors[0]
    assert "invalid code" in run.errors[0]
    assert "left unchanged" in run.errors[0]
    # The finding is still reported, as it was.
    assert [(d.path, d.code) for d in run.diagnostics] == [("model.py", HAZARD_CODE)]
    assert run.fixed == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.py", "other.py"]

    # --diff shows nothing for a fix that would break the file.
    run = run_check([Path("model.py")], load_settings([Path("model.py")]), diff=True)
    assert run.diffs == []
    assert run.errors

    # Other files are still fixed when one fix fails.
    monkeypatch.setattr(amplint.fixing.edits, "apply_edits", real_apply)
    run = run_check([Path("other.py")], load_settings([Path("other.py")]), fix=True)
    assert run.errors == []
    assert other.read_text(encoding="utf-8") == FIXED


def test_fix_that_breaks_code_exits_2_from_cli(tmp_path: Path) -> None:
    path = write(tmp_path / "model.py", HAZARD)
    script = (
        "import amplint.fixing.edits as fixes\n"
        "real = fixes.apply_edits\n"
        "def broken(text, edits):\n"
        "    new, n = real(text, edits)\n"
        "    return new + 'def (\\n', n\n"
        "fixes.apply_edits = broken\n"
        "from amplint.cli import main\n"
        "raise SystemExit(main())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, "check", "--fix", "model.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "model.py" in proc.stderr
    assert "invalid code" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert path.read_text(encoding="utf-8") == HAZARD
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".amplint_cache") == ["model.py"]


def test_fix_adds_import_torch(tmp_path: Path) -> None:
    rule = rule_by_code("AMP001")
    assert rule is not None
    [example] = [bad for bad in rule.bad if "from torch.nn import functional as F" in bad.code]
    assert "import torch\n" not in example.code
    path = write(tmp_path / "gates.py", example.code)
    proc = amplint_run(tmp_path, "check", *OPT_IN, "--fix", "gates.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = path.read_text(encoding="utf-8")
    assert text == example.fixed
    assert text.startswith("import torch\nfrom torch.nn import functional as F\n")
    assert text.count("import torch\n") == 1
    # A module's output: bound once to read its dtype, which the returned value is cast back to.
    assert "(logsigmoid_input := self.gk_proj(x))" in text and "return gk.to(logsigmoid_input.dtype)" in text


def test_fix_adds_import_torch_once_for_many_findings(tmp_path: Path) -> None:
    source = (
        '"""Docstring."""\n'
        "from __future__ import annotations\n"
        "\n"
        "from torch.nn import functional as F\n"
        "\n"
        "\n"
        "def gates(x, y):\n"
        "    gk = F.logsigmoid(x) / 16\n"
        "    log_w = F.logsigmoid(y) / 16\n"
        "    return gk, log_w\n"
    )
    path = write(tmp_path / "gates.py", source)
    proc = amplint_run(tmp_path, "check", *OPT_IN, "--fix", "gates.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = path.read_text(encoding="utf-8")
    assert text.count("import torch\n") == 1
    assert text.startswith(
        '"""Docstring."""\nfrom __future__ import annotations\n\nimport torch\nfrom torch.nn'
    )
    assert text.count(", torch.float32))") == 2
    compile(text, "gates.py", "exec")


def test_fix_through_symlink_rewrites_target_and_keeps_link(tmp_path: Path) -> None:
    target = write(tmp_path / "real" / "model.py", HAZARD)
    target.chmod(0o640)
    link = tmp_path / "src" / "model.py"
    link.parent.mkdir()
    os.symlink("../real/model.py", link)
    proc = amplint_run(tmp_path, "check", "--fix", "src/model.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert link.is_symlink()
    assert os.readlink(link) == "../real/model.py"
    assert target.read_text(encoding="utf-8") == FIXED
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in link.parent.iterdir()) == ["model.py"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.py"]


def test_fix_through_symlink_found_by_walk(tmp_path: Path) -> None:
    target = write(tmp_path / "shared" / "impl.py", HAZARD)
    (tmp_path / "pkg").mkdir()
    os.symlink("../shared/impl.py", tmp_path / "pkg" / "model.py")
    proc = amplint_run(tmp_path, "check", "--fix", "pkg")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "pkg" / "model.py").is_symlink()
    assert target.read_text(encoding="utf-8") == FIXED


def test_fix_through_chained_symlinks(tmp_path: Path) -> None:
    target = write(tmp_path / "real.py", HAZARD)
    os.symlink("real.py", tmp_path / "one.py")
    os.symlink("one.py", tmp_path / "two.py")
    proc = amplint_run(tmp_path, "check", "--fix", "two.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert os.readlink(tmp_path / "two.py") == "one.py"
    assert os.readlink(tmp_path / "one.py") == "real.py"
    assert target.read_text(encoding="utf-8") == FIXED


def test_fix_of_multiline_call_keeps_indentation(tmp_path: Path) -> None:
    source = SIGMOID.replace("torch.sigmoid(x)", "torch.sigmoid(\n        x\n    )")
    assert source != SIGMOID
    path = write(tmp_path / "model.py", source)
    assert amplint_run(tmp_path, "check", *OPT_IN, "--fix", "model.py").returncode == 0
    text = path.read_text(encoding="utf-8")
    compile(text, "model.py", "exec")
    # The sigmoid and the exp run in float32; the result is cast back where it is returned, to the
    # dtype `exp` gives there (float32 under CUDA autocast, as before the fix).
    expected = source.replace("        x\n", "        x.to(torch.promote_types(x.dtype, torch.float32))\n")
    assert text == expected.replace(
        "return torch.exp(w)", "return torch.exp(w).to(x.new_empty(0).exp().dtype)"
    )


def test_fix_inside_nested_blocks_keeps_indentation(tmp_path: Path) -> None:
    source = (
        "import torch\n\n\nclass Mix:\n    def forward(self, x):\n        if x is not None:\n"
        "            decay = torch.exp(\n                -torch.sigmoid(\n                    x\n"
        "                )\n            )\n            return decay\n"
    )
    path = write(tmp_path / "model.py", source)
    assert amplint_run(tmp_path, "check", *OPT_IN, "--fix", "model.py").returncode == 0
    expected = source.replace(
        "                    x\n", "                    x.to(torch.promote_types(x.dtype, torch.float32))\n"
    )
    assert path.read_text(encoding="utf-8") == expected.replace(
        "return decay\n", "return decay.to(x.new_empty(0).exp().dtype)\n"
    )


def test_fix_keeps_text_without_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_bytes(HAZARD.rstrip("\n").encode())
    assert amplint_run(tmp_path, "check", "--fix", "model.py").returncode == 0
    assert path.read_bytes() == FIXED.rstrip("\n").encode()


# --- Python API ---------------------------------------------------------------------------------


def test_api_diagnostics_carry_applicable_fixes() -> None:
    diagnostics = amplint.check_source(HAZARD, path="model.py")
    assert all(isinstance(d, amplint.Diagnostic) for d in diagnostics)
    [diagnostic] = diagnostics
    assert (diagnostic.code, diagnostic.path) == (HAZARD_CODE, "model.py")
    assert isinstance(diagnostic.fix, amplint.Fix)
    assert all(isinstance(edit, amplint.Edit) for edit in diagnostic.fix.edits)
    new_text, applied = apply_edits(HAZARD, diagnostic.fix.edits)
    assert applied == len(diagnostic.fix.edits)
    assert new_text == FIXED
    assert amplint.check_source(new_text) == []


def test_api_check_paths_does_not_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "pkg" / "model.py", HAZARD)
    monkeypatch.chdir(tmp_path)
    diagnostics = amplint.check_paths([tmp_path / "pkg"])
    assert [(d.path, d.code, d.line, d.column) for d in diagnostics] == [
        ("pkg/model.py", HAZARD_CODE, HAZARD_LINE, HAZARD_COLUMN)
    ]
    assert path.read_text(encoding="utf-8") == HAZARD


def test_a_replaced_file_keeps_its_mode_and_a_new_one_follows_the_umask(tmp_path: Path) -> None:
    from amplint.source import replace_file

    kept = tmp_path / "model.py"
    kept.write_text("old\n", encoding="utf-8")
    kept.chmod(0o751)
    link = tmp_path / "link.py"
    link.symlink_to(kept)
    replace_file(link, b"new\n")
    assert link.is_symlink() and kept.read_bytes() == b"new\n"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o751
    umask = os.umask(0o027)
    try:
        replace_file(tmp_path / "amplint.lock", b"lock\n")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "amplint.lock").stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["amplint.lock", "link.py", "model.py"]


# AMP007 (on by default) has an unsafe fix: the sum meets another tensor, so it is accumulated in
# float32 and cast back at once; AMP008's is safe.
MIXED = """\
import torch


def decay(g, scale):
    g = g.bfloat16()
    g_cumsum = g.cumsum(dim=1)
    return torch.exp(g_cumsum) * scale


def make_scaler():
    return torch.cuda.amp.GradScaler()
"""


def test_fix_applies_safe_fixes_and_unsafe_ones_only_when_asked(tmp_path: Path) -> None:
    path = write(tmp_path / "m.py", MIXED)
    safe = amplint_run(tmp_path, "check", "--fix", "--show-fixes", "m.py")
    assert safe.returncode == 1, safe.stdout + safe.stderr
    assert "Fixed 1 finding, 1 remaining." in safe.stdout
    assert safe.stderr.splitlines() == [
        "amplint: fixed m.py:11:12 AMP008 (safe): Use `torch.amp.GradScaler` with the device"
    ]
    assert path.read_text(encoding="utf-8") == MIXED.replace(
        "torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")'
    )
    write(tmp_path / "m.py", MIXED)
    both = amplint_run(tmp_path, "check", "--fix", "--unsafe-fixes", "--show-fixes", "m.py")
    assert both.returncode == 0, both.stdout + both.stderr
    assert "Fixed 2 findings, 0 remaining." in both.stdout
    assert [line.split(" (")[1].split(")")[0] for line in both.stderr.splitlines()] == ["unsafe", "safe"]
    assert "cumsum(dim=1, dtype=torch.promote_types(g.dtype, torch.float32))" in path.read_text(
        encoding="utf-8"
    )


def test_diff_shows_only_safe_fixes_without_unsafe_fixes(tmp_path: Path) -> None:
    write(tmp_path / "m.py", MIXED)
    diff = amplint_run(tmp_path, "check", "--diff", "m.py")
    assert "torch.amp.GradScaler" in diff.stdout and "dtype=torch.promote_types" not in diff.stdout
    assert "Would fix 1 finding, 1 remaining." in diff.stderr
    unsafe = amplint_run(tmp_path, "check", "--diff", "--unsafe-fixes", "m.py")
    assert "dtype=torch.promote_types" in unsafe.stdout
