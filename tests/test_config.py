"""Settings: finding and validating `[tool.amplint]`, selection, per-file ignores and excludes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import HAZARD, HAZARD_CODE, amplint_run, write

from amplint.config import DEFAULT_EXCLUDE, ConfigError, Settings, find_config, load_settings


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _load_table(tmp_path: Path, body: str) -> Settings:
    config = _write(tmp_path / "pyproject.toml", "[tool.amplint]\n" + body)
    return load_settings([tmp_path], config_file=config)


# --- finding the config ----------------------------------------------------------------------------


def test_find_config_walks_up(tmp_path: Path) -> None:
    config = _write(tmp_path / "proj" / "pyproject.toml", "[tool.amplint]\n")
    start = tmp_path / "proj" / "src" / "pkg"
    start.mkdir(parents=True)
    assert find_config(start) == config


def test_find_config_skips_pyproject_without_table(tmp_path: Path) -> None:
    config = _write(tmp_path / "pyproject.toml", "[tool.amplint]\nselect = ['AMP0']\n")
    _write(tmp_path / "sub" / "pyproject.toml", "[project]\nname = 'x'\n[tool.ruff]\n")
    (tmp_path / "sub" / "deep").mkdir()
    assert find_config(tmp_path / "sub" / "deep") == config


def test_find_config_rejects_invalid_toml_on_the_way(tmp_path: Path) -> None:
    _write(tmp_path / "pyproject.toml", "[tool.amplint]\n")
    bad = _write(tmp_path / "sub" / "pyproject.toml", "[project\n")
    with pytest.raises(ConfigError) as info:
        find_config(tmp_path / "sub")
    assert str(bad) in str(info.value) and "invalid TOML" in str(info.value)


def test_load_settings_uses_common_parent_of_paths(tmp_path: Path) -> None:
    config = _write(tmp_path / "proj" / "pyproject.toml", "[tool.amplint]\nignore = ['AMP002']\n")
    a = _write(tmp_path / "proj" / "a" / "x.py", "")
    b = _write(tmp_path / "proj" / "b" / "y.py", "")
    settings = load_settings([a, b])
    assert settings.config_path == config
    assert settings.root == config.parent
    assert settings.ignore == ("AMP002",)


def test_load_settings_relative_paths_use_cwd(tmp_path: Path) -> None:
    config = _write(tmp_path / "pyproject.toml", "[tool.amplint]\n")
    (tmp_path / "src").mkdir()
    assert load_settings([Path("src")], cwd=tmp_path).config_path == config


def test_no_config_gives_defaults_rooted_at_cwd(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    settings = load_settings([Path("src")], cwd=tmp_path)
    assert settings.config_path is None
    assert settings.root == tmp_path
    assert settings.select == ("AMP",)
    assert settings.exclude == DEFAULT_EXCLUDE


def test_explicit_pyproject_without_table_is_an_error(tmp_path: Path) -> None:
    config = _write(tmp_path / "pyproject.toml", "[tool.ruff]\n")
    with pytest.raises(ConfigError, match=r"no \[tool\.amplint\] table"):
        load_settings([], config_file=config)


def test_explicit_other_toml_uses_top_level_keys(tmp_path: Path) -> None:
    config = _write(tmp_path / "conf" / "amplint.toml", "select = ['amp001']\n[runtime]\nsteps = 3\n")
    settings = load_settings([], config_file=config)
    assert settings.select == ("AMP001",)
    assert settings.root == tmp_path / "conf"
    assert settings.runtime == {"steps": 3}


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: config file not found"):
        load_settings([], config_file=Path("nope.toml"), cwd=tmp_path)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    config = _write(tmp_path / "amplint.toml", "select = [\n")
    with pytest.raises(ConfigError) as info:
        load_settings([], config_file=config)
    assert str(info.value).startswith(f"{config}: invalid TOML: ")


# --- validation ------------------------------------------------------------------------------------


def test_unknown_key_is_a_warning_naming_the_key_and_the_known_ones(tmp_path: Path) -> None:
    settings = _load_table(tmp_path, "selct = ['AMP001']\n")
    (message,) = settings.warnings
    assert message.startswith(f"{tmp_path / 'pyproject.toml'}: [tool.amplint] unknown key 'selct' ignored")
    assert (
        "known keys: cache-dir, deep, exclude, extend, extend-exclude, extend-select, ignore, max-file-size, modes, "
        "per-file-ignores, precision, runtime, select, show-conditional, target-version, torch-version"
        in message
    )
    assert "did you mean 'select'?" in message
    assert settings.select == Settings().select  # ignored: the defaults stand


def test_underscore_key_suggests_dashes(tmp_path: Path) -> None:
    assert "did you mean 'per-file-ignores'" in _load_table(tmp_path, "per_file_ignores = {}\n").warnings[0]


def test_an_unknown_key_warns_and_the_run_goes_on(tmp_path: Path) -> None:
    write(
        tmp_path / "pyproject.toml",
        "[tool.amplint]\nselct = ['AMP001']\n[tool.amplint.runtime]\nseq-len = -5\n",
    )
    write(tmp_path / "m.py", "x = 1\n")
    proc = amplint_run(tmp_path, "check", ".")
    assert proc.returncode == 0, proc.stderr
    assert "amplint: warning: " in proc.stderr and "unknown key 'selct' ignored" in proc.stderr
    assert "[tool.amplint.runtime] unknown key 'seq-len' ignored" in proc.stderr


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "select = 42\n",
            "[tool.amplint] 'select' must be a list of rule codes such as \"AMP001\", "
            'prefixes such as "AMP0", or "ALL", got 42',
        ),
        ("ignore = 'AMP001'\n", "'ignore' must be a list of rule codes such as \"AMP001\""),
        ("select = ['E501']\n", "'select' has an invalid rule code 'E501'"),
        ("select = ['AMP0001']\n", "'select' has an invalid rule code 'AMP0001'"),
        ("exclude = 'build'\n", "'exclude' must be a list of gitignore-style patterns"),
        ("extend-exclude = [1]\n", "'extend-exclude' must be a list of gitignore-style patterns"),
        ("per-file-ignores = ['tests/*']\n", "'per-file-ignores' must be a table"),
        ("[tool.amplint.per-file-ignores]\n'tests/*' = 'AMP001'\n", "'per-file-ignores' entry 'tests/*'"),
        ("runtime = 1\n", "'runtime' must be a table, got 1"),
    ],
)
def test_bad_values(tmp_path: Path, body: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load_table(tmp_path, body)
    assert expected in str(info.value)
    assert str(tmp_path / "pyproject.toml") in str(info.value)


def test_table_must_be_a_table(tmp_path: Path) -> None:
    config = _write(tmp_path / "pyproject.toml", "[tool]\namplint = 3\n")
    with pytest.raises(ConfigError, match=r"\[tool\.amplint\] must be a table, got 3"):
        load_settings([], config_file=config)


def test_valid_table_is_loaded(tmp_path: Path) -> None:
    settings = _load_table(
        tmp_path,
        "select = ['amp0', 'AMP1']\nignore = ['Amp003']\nextend-exclude = ['tests/data']\n"
        "[tool.amplint.per-file-ignores]\n'tests/*' = ['AMP001']\n'conftest.py' = ['AMP0']\n"
        "[tool.amplint.runtime]\nanything = {goes = 'here'}\n",
    )
    assert settings.select == ("AMP0", "AMP1")
    assert settings.ignore == ("AMP003",)
    assert settings.extend_exclude == ("tests/data",)
    assert settings.exclude == DEFAULT_EXCLUDE
    assert settings.per_file_ignores == (("tests/*", ("AMP001",)), ("conftest.py", ("AMP0",)))
    assert settings.runtime == {"anything": {"goes": "here"}}


# --- selection -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("select", "ignore", "code", "expected"),
    [
        (("AMP",), (), "AMP001", True),
        (("AMP",), ("AMP001",), "AMP001", False),
        (("AMP",), ("AMP001",), "AMP002", True),
        (("AMP001",), ("AMP",), "AMP001", True),  # the more specific select wins
        (("AMP001",), ("AMP",), "AMP002", False),
        (("AMP0",), ("AMP0",), "AMP001", False),  # a tie goes to ignore
        (("AMP1",), (), "AMP001", False),  # not selected at all
        (("AMP",), ("AMP0",), "AMP101", True),
        (("AMP",), (), "amp001", True),  # case-insensitive
    ],
)
def test_is_selected(select: tuple[str, ...], ignore: tuple[str, ...], code: str, expected: bool) -> None:
    assert Settings(select=select, ignore=ignore).is_selected(code) is expected


def test_overrides_select_replaces_and_ignore_adds(tmp_path: Path) -> None:
    base = Settings(select=("AMP",), ignore=("AMP001", "AMP002"), root=tmp_path)
    over = base.with_overrides(select=["AMP0,amp1"], ignore=["AMP003"])
    assert over.select == ("AMP0", "AMP1")
    assert over.ignore == ("AMP001", "AMP002", "AMP003")
    assert not over.is_selected("AMP003") and not over.is_selected("AMP001") and over.is_selected("AMP004")
    assert base.is_selected("AMP003")  # the original is untouched


def test_overrides_cli_select_beats_the_same_code_ignored_in_config(tmp_path: Path) -> None:
    base = Settings(ignore=("AMP001", "AMP0"), root=tmp_path)
    over = base.with_overrides(select=["AMP001"])
    assert over.is_selected("AMP001")
    assert over.ignore == ("AMP0",)
    # ...but naming it in --ignore too turns it off again (a tie goes to ignore).
    assert not base.with_overrides(select=["AMP001"], ignore=["AMP001"]).is_selected("AMP001")


@pytest.mark.parametrize("flag", ["select", "ignore"])
def test_overrides_validate_codes_and_name_the_flag(tmp_path: Path, flag: str) -> None:
    with pytest.raises(ConfigError, match=f"--{flag} has an invalid rule code 'F401'"):
        Settings(root=tmp_path).with_overrides(**{flag: ["AMP001", "F401"]})


def test_overrides_excludes(tmp_path: Path) -> None:
    base = Settings(extend_exclude=("a",), root=tmp_path)
    over = base.with_overrides(exclude=["only"], extend_exclude=["b"])
    assert over.exclude == ("only",)
    assert over.extend_exclude == ("a", "b")
    assert base.with_overrides() is base


# --- per-file-ignores ------------------------------------------------------------------------------


def test_per_file_ignores(tmp_path: Path) -> None:
    settings = Settings(
        per_file_ignores=(
            ("tests/*", ("AMP001",)),
            ("docs/", ("AMP002",)),
            ("conftest.py", ("AMP0",)),
            ("src/gen/*.py", ("AMP1",)),
        ),
        root=tmp_path,
    )
    assert settings.is_ignored_for("AMP001", tmp_path / "tests" / "deep" / "down" / "test_x.py")
    assert settings.is_ignored_for("AMP001", tmp_path / "tests" / "test_x.py")
    assert not settings.is_ignored_for("AMP002", tmp_path / "tests" / "test_x.py")
    assert not settings.is_ignored_for("AMP001", tmp_path / "src" / "tests.py")
    assert not settings.is_ignored_for("AMP001", tmp_path / "src" / "tests" / "x.py")  # anchored at root
    assert settings.is_ignored_for("AMP002", tmp_path / "docs" / "a" / "b.py")
    assert settings.is_ignored_for("AMP005", tmp_path / "pkg" / "sub" / "conftest.py")  # prefix, any depth
    assert not settings.is_ignored_for("AMP105", tmp_path / "pkg" / "conftest.py")
    assert settings.is_ignored_for("amp105", tmp_path / "src" / "gen" / "x.py")
    assert not settings.is_ignored_for("AMP105", tmp_path / "other" / "src" / "gen" / "x.py")
    assert settings.ignored_codes_for(tmp_path / "tests" / "conftest.py") == frozenset({"AMP001", "AMP0"})


def test_per_file_ignores_relative_path_and_negation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(per_file_ignores=(("!src/", ("AMP003",)),), root=tmp_path)
    monkeypatch.chdir(tmp_path)
    assert settings.is_ignored_for("AMP003", Path("scripts/run.py"))
    assert not settings.is_ignored_for("AMP003", Path("src/model.py"))


# --- excludes --------------------------------------------------------------------------------------


def test_default_excludes(tmp_path: Path) -> None:
    settings = Settings(root=tmp_path)
    assert settings.is_excluded(tmp_path / "build", is_dir=True)
    assert settings.is_excluded(tmp_path / "a" / ".venv" / "lib" / "x.py", is_dir=False)  # via a parent
    assert settings.is_excluded(tmp_path / "pkg.egg-info", is_dir=True)
    assert not settings.is_excluded(tmp_path / "src" / "builder.py", is_dir=False)


def test_exclude_replaces_defaults_and_extend_exclude_adds(tmp_path: Path) -> None:
    replaced = _load_table(tmp_path, "exclude = ['generated']\n")
    assert not replaced.is_excluded(tmp_path / "build", is_dir=True)
    assert replaced.is_excluded(tmp_path / "x" / "generated", is_dir=True)

    extended = _load_table(tmp_path, "extend-exclude = ['tests/data', '*_pb2.py']\n")
    assert extended.is_excluded(tmp_path / "build", is_dir=True)
    assert extended.is_excluded(tmp_path / "tests" / "data" / "bad" / "x.py", is_dir=False)
    assert not extended.is_excluded(tmp_path / "other" / "tests" / "data" / "x.py", is_dir=False)
    assert extended.is_excluded(tmp_path / "pkg" / "model_pb2.py", is_dir=False)


def test_is_excluded_relative_to_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(extend_exclude=("tests/data",), root=tmp_path)
    monkeypatch.chdir(tmp_path / ".")
    assert settings.is_excluded(Path("tests/data/x.py"), is_dir=False)
    assert not settings.is_excluded(Path("tests/x.py"), is_dir=False)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("targets = 3", "'targets' must be a list of FILE.py:FACTORY strings or tables"),
        (
            'targets = [{ target = "m.py:f", dtype = "float8" }]',
            "'dtype' must be one of 'bfloat16', 'float16'",
        ),
        ("timeout = -1", "'timeout' must be a positive number of seconds, got -1"),
    ],
)
def test_a_wrong_runtime_table_stops_a_plain_check(tmp_path: Path, table: str, message: str) -> None:
    """`[tool.amplint.runtime]` is checked when it is read, not only when a run traces."""
    config = write(tmp_path / "pyproject.toml", f"[tool.amplint.runtime]\n{table}\n")
    write(tmp_path / "m.py", "x = 1\n")
    proc = amplint_run(tmp_path, "check", ".")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"amplint: error: {config}: [tool.amplint.runtime]")
    assert message in proc.stderr and "Traceback" not in proc.stderr


# --- the nearest configuration per file, `extend`, --show-settings PATH -----------------------------

# One AMP014 (opt-in), and one AMP008 (on by default) that the configurations here leave alone.
_SAMPLER = """\
import torch


def log_probs(logits):
    return torch.log(torch.softmax(logits, dim=-1))


def make_scaler():
    return torch.cuda.amp.GradScaler()
"""


def _monorepo(tmp_path: Path) -> None:
    """A root configuration that turns AMP014 on, and a package whose `amplint.toml` extends it."""
    write(
        tmp_path / "pyproject.toml",
        '[tool.amplint]\nextend-select = ["AMP014"]\n\n[tool.amplint.per-file-ignores]\n"tests/*" = ["AMP014"]\n',
    )
    write(tmp_path / "pkg_a" / "sample.py", _SAMPLER)
    write(tmp_path / "pkg_b" / "sample.py", _SAMPLER)
    write(tmp_path / "pkg_b" / "tests" / "sample.py", _SAMPLER)
    write(tmp_path / "pkg_c" / "sample.py", _SAMPLER)


def _flagged(proc_stdout: str) -> list[str]:
    """The files AMP014, the rule the configurations here turn on and off, is reported in."""
    return sorted(line.split(":")[0] for line in proc_stdout.splitlines() if " AMP014 " in line)


def test_each_file_gets_the_nearest_configuration(tmp_path: Path) -> None:
    _monorepo(tmp_path)
    # pkg_b's own file inherits the root's selection and per-file ignores (anchored at pkg_b) and
    # adds nothing; pkg_c's pyproject.toml stands alone, so AMP014 (opt-in) is off there.
    write(tmp_path / "pkg_b" / "amplint.toml", 'extend = "../pyproject.toml"\n')
    write(tmp_path / "pkg_c" / "pyproject.toml", '[tool.amplint]\nselect = ["AMP"]\n')
    proc = amplint_run(tmp_path, "check", "--no-cache", "--format", "concise", ".")
    assert proc.returncode == 1, proc.stderr
    assert _flagged(proc.stdout) == ["pkg_a/sample.py", "pkg_b/sample.py"]
    # Run from inside the package: the same configuration, found the same way.
    inside = amplint_run(tmp_path / "pkg_b", "check", "--no-cache", "--format", "concise")
    assert _flagged(inside.stdout) == ["sample.py"]
    # A flag applies under every configuration; --config makes one configuration apply to all.
    flagged = amplint_run(tmp_path, "check", "--no-cache", "--format", "concise", "--ignore", "AMP014", ".")
    assert flagged.returncode == 1 and not _flagged(flagged.stdout), flagged.stdout  # AMP008 stays
    one = amplint_run(
        tmp_path, "check", "--no-cache", "--format", "concise", "--config", "pyproject.toml", "."
    )
    # ... its "tests/*" is anchored at the root, where there is no tests/ folder.
    expected = ["pkg_a/sample.py", "pkg_b/sample.py", "pkg_b/tests/sample.py", "pkg_c/sample.py"]
    assert _flagged(one.stdout) == expected


def test_a_nested_configuration_excludes_its_own_files(tmp_path: Path) -> None:
    _monorepo(tmp_path)
    write(
        tmp_path / "pkg_a" / ".amplint.toml", 'extend = "../pyproject.toml"\nextend-exclude = ["sample.py"]\n'
    )
    proc = amplint_run(tmp_path, "check", "--no-cache", "--format", "json", ".")
    report = json.loads(proc.stdout)
    assert sorted({d["path"] for d in report["diagnostics"]}) == [
        "pkg_b/sample.py",
        "pkg_b/tests/sample.py",  # the root's "tests/*" is anchored at the root
        "pkg_c/sample.py",
    ]
    assert report["summary"]["files_checked"] == 3


def test_extend_overrides_and_chains(tmp_path: Path) -> None:
    base = write(
        tmp_path / "base.toml", 'ignore = ["AMP003"]\nextend-select = ["AMP013"]\nprecision = "bf16"\n'
    )
    middle = write(tmp_path / "mid" / "amplint.toml", 'extend = "../base.toml"\nextend-select = ["AMP002"]\n')
    leaf = write(
        tmp_path / "mid" / "leaf" / "pyproject.toml",
        '[tool.amplint]\nextend = "../amplint.toml"\nprecision = "fp16"\n',
    )
    settings = load_settings([leaf.parent])
    assert settings.config_path == leaf and settings.root == leaf.parent
    assert settings.ignore == ("AMP003",)
    assert settings.extend_select == ("AMP013", "AMP002")  # extend-select adds along the chain
    assert settings.precision == "fp16"
    assert settings.origin("ignore") == str(base)
    assert settings.origin("extend_select") == str(middle)
    assert settings.origin("precision") == str(leaf)
    assert settings.origin("select") == "default"


def test_extend_errors_name_the_file(tmp_path: Path) -> None:
    write(tmp_path / "a" / "amplint.toml", 'extend = "../b/amplint.toml"\n')
    write(tmp_path / "b" / "amplint.toml", 'extend = "../a/amplint.toml"\n')
    with pytest.raises(ConfigError, match="'extend' makes a cycle"):
        load_settings([tmp_path / "a"])
    write(tmp_path / "c" / "amplint.toml", 'extend = "missing.toml"\n')
    with pytest.raises(
        ConfigError, match=r"c/amplint.toml: 'extend' names .*missing.toml, which does not exist"
    ):
        load_settings([tmp_path / "c"])
    write(tmp_path / "d" / "amplint.toml", "extend = 3\n")
    proc = amplint_run(tmp_path / "d", "check", ".")
    assert proc.returncode == 2
    assert "'extend' must be the path of a configuration file, got 3" in proc.stderr


def test_show_settings_for_a_file_says_where_each_setting_came_from(tmp_path: Path) -> None:
    _monorepo(tmp_path)
    own = write(tmp_path / "pkg_b" / "amplint.toml", 'extend = "../pyproject.toml"\nprecision = "fp16"\n')
    proc = amplint_run(tmp_path, "check", "--show-settings", "pkg_b/tests/sample.py", "--ignore", "AMP002")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert f"config file: {own} (extends {tmp_path / 'pyproject.toml'})" in lines
    assert f"root: {tmp_path / 'pkg_b'}" in lines
    assert "files: 1" in lines
    assert "profile: float16 only (configured)" in lines
    origins = lines[lines.index("from:") + 1 :]
    assert f"  extend-select: {tmp_path / 'pyproject.toml'}" in origins
    assert f"  per-file-ignores: {tmp_path / 'pyproject.toml'}" in origins
    assert f"  precision: {own}" in origins
    assert "  ignore: --ignore" in origins
    assert "  select: default" in origins
    root = amplint_run(tmp_path, "check", "--show-settings", "pkg_a/sample.py").stdout.splitlines()
    assert f"config file: {tmp_path / 'pyproject.toml'}" in root
    assert "precision: auto" in root


# --- clear failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "config", "expected"),
    [
        (("--select", "AMP08"), "", "--select names 'AMP08', which matches no rule; did you mean 'AMP008'?"),
        (("--ignore", "AMP2"), "", "--ignore names 'AMP2', which matches no rule; did you mean"),
        (
            (),
            'select = ["AMP999"]\n',
            "'select' names 'AMP999', which matches no rule; did you mean 'AMP900'?",
        ),
        ((), 'extend-select = ["AMP0021"]\n', "'extend-select' has an invalid rule code 'AMP0021'"),
        (
            (),
            '[tool.amplint.per-file-ignores]\n"tests/*" = ["AMP07"]\n',
            "'per-file-ignores 'tests/*'' names 'AMP07'",
        ),
    ],
)
def test_a_code_that_matches_no_rule_is_an_error_naming_the_nearest(
    tmp_path: Path, args: tuple[str, ...], config: str, expected: str
) -> None:
    write(tmp_path / "pyproject.toml", "[tool.amplint]\n" + config)
    write(tmp_path / "a.py", HAZARD)
    done = amplint_run(tmp_path, "check", ".", "--no-cache", *args)
    assert done.returncode == 2, done.stdout
    assert expected in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def test_a_broken_configuration_in_a_subfolder_is_one_diagnostic_and_the_run_goes_on(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.amplint]\n")
    write(tmp_path / "a.py", HAZARD)
    write(tmp_path / "vendor" / "pyproject.toml", "[tool.amplint\nselect =")  # not TOML
    write(tmp_path / "vendor" / "deep" / "b.py", HAZARD)
    write(tmp_path / "vendor" / "c.py", HAZARD)
    write(tmp_path / "tests" / "data" / "amplint.toml", 'select = ["AMP999"]\n')
    write(tmp_path / "tests" / "data" / "d.py", HAZARD)
    done = amplint_run(tmp_path, "check", ".", "--no-cache", "--format", "json")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    found = [(d["path"], d["code"], d["message"]) for d in json.loads(done.stdout)["diagnostics"]]
    assert [(path, code) for path, code, _ in found] == [
        ("a.py", HAZARD_CODE),
        ("tests/data/amplint.toml", "AMP900"),
        ("vendor/pyproject.toml", "AMP900"),
    ]
    assert "invalid TOML" in found[2][2] and "matches no rule" in found[1][2]


def test_a_deep_extend_chain_is_one_line(tmp_path: Path) -> None:
    for depth in range(500):
        write(tmp_path / f"c{depth}.toml", f'extend = "c{depth + 1}.toml"\n')
    write(tmp_path / "c500.toml", 'select = ["AMP"]\n')
    write(tmp_path / "a.py", HAZARD)
    done = amplint_run(tmp_path, "check", ".", "--no-cache", "--config", "c0.toml")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"amplint: error: {tmp_path / 'c0.toml'}: 'extend' chain deeper than 64 files (reached {tmp_path / 'c64.toml'})"
    ]
