"""The gitignore matcher, feature by feature, and against real `git check-ignore`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from amplint.gitignore import PatternSet, load_gitignore, parse_pattern

BASE = Path("/repo")


def _match(patterns: list[str], rel: str, is_dir: bool = False) -> bool | None:
    return PatternSet(patterns, BASE).match_relative(rel, is_dir)


@pytest.mark.parametrize(
    ("patterns", "rel", "is_dir", "expected"),
    [
        # comments and blank lines are not patterns
        (["# a comment", "", "   "], "# a comment", False, None),
        (["#foo"], "#foo", False, None),
        # escaped '#' and '!' are literal
        (["\\#foo"], "#foo", False, True),
        (["\\!bar"], "!bar", False, True),
        (["\\!bar"], "bar", False, None),
        # trailing spaces are trimmed unless escaped
        (["name   "], "name", False, True),
        (["name   "], "name   ", False, None),
        (["name\\ "], "name ", False, True),
        (["name\\ "], "name", False, None),
        # negation: last matching pattern wins
        (["*.py", "!keep.py"], "keep.py", False, False),
        (["*.py", "!keep.py"], "other.py", False, True),
        (["!keep.py", "*.py"], "keep.py", False, True),
        # trailing '/' matches directories only
        (["out/"], "out", True, True),
        (["out/"], "out", False, None),
        (["out/"], "a/b/out", True, True),
        # leading '/' anchors to the base
        (["/top.txt"], "top.txt", False, True),
        (["/top.txt"], "sub/top.txt", False, None),
        # a middle '/' anchors too
        (["docs/*.md"], "docs/a.md", False, True),
        (["docs/*.md"], "x/docs/a.md", False, None),
        (["docs/*.md"], "docs/sub/a.md", False, None),
        # no slash: the name at any depth
        (["cache"], "a/b/cache", True, True),
        (["cache"], "a/b/cache", False, True),
        (["cache"], "a/cache/b", False, None),
        # '*' and '?' do not cross '/'
        (["*.txt"], "a/b.txt", False, True),
        (["a*c"], "a/c", False, None),
        (["?.txt"], "a.txt", False, True),
        (["?.txt"], "ab.txt", False, None),
        # classes
        (["*.py[cod]"], "m.pyc", False, True),
        (["*.py[cod]"], "m.pyz", False, None),
        (["[!a]*.cfg"], "b.cfg", False, True),
        (["[!a]*.cfg"], "a.cfg", False, None),
        (["[^a]*.cfg"], "a.cfg", False, None),
        (["[a-c]x"], "bx", False, True),
        (["[a-c]x"], "dx", False, None),
        (["[]]x"], "]x", False, True),
        (["[[:digit:]]*"], "1a", False, True),
        (["[[:digit:]]*"], "a1", False, None),
        (["a[/]b"], "a/b", False, None),
        (["[unterminated"], "[unterminated", False, None),
        # '**' leading, trailing, middle, and glued to text (a plain '*')
        (["**/logs"], "logs", True, True),
        (["**/logs"], "x/y/logs", True, True),
        (["**/logs"], "logs2", True, None),
        (["abc/**"], "abc/x", False, True),
        (["abc/**"], "abc/d/e", False, True),
        (["abc/**"], "abc", True, None),
        (["abc/**"], "x/abc/y", False, None),
        (["a/**/b"], "a/b", False, True),
        (["a/**/b"], "a/x/y/b", False, True),
        (["a/**/b"], "x/a/b", False, None),
        (["a**b"], "axyb", False, True),
        (["a**b"], "a/b", False, None),
        (["**"], "any/thing", False, True),
    ],
)
def test_features(patterns: list[str], rel: str, is_dir: bool, expected: bool | None) -> None:
    assert _match(patterns, rel, is_dir) is expected


def test_parse_pattern_fields() -> None:
    assert parse_pattern("# comment") is None
    assert parse_pattern("") is None
    pattern = parse_pattern("!/build/  ")
    assert pattern is not None
    assert (pattern.text, pattern.negated, pattern.dir_only, pattern.anchored) == (
        "!/build/",
        True,
        True,
        True,
    )
    unanchored = parse_pattern("*.log")
    assert unanchored is not None and not unanchored.anchored


def test_match_takes_absolute_and_relative_paths() -> None:
    patterns = PatternSet(["/build", "*.log"], BASE)
    assert patterns.match(Path("/repo/build"), is_dir=True) is True
    assert patterns.match(Path("build"), is_dir=True) is True  # relative to the base
    assert patterns.match(Path("/repo/sub/build"), is_dir=True) is None
    assert patterns.match(Path("/repo"), is_dir=True) is None  # the base itself never matches
    # Outside the base only unanchored patterns apply, to the name.
    assert patterns.match(Path("/elsewhere/build"), is_dir=True) is None
    assert patterns.match(Path("/elsewhere/x.log"), is_dir=False) is True


def test_is_ignored_applies_parent_directories() -> None:
    patterns = PatternSet(["build/", "!build/keep.py"], BASE)
    # match() looks at the path only; the negation matches it ...
    assert patterns.match(Path("/repo/build/keep.py"), is_dir=False) is False
    # ... but git cannot re-include a file whose parent directory is ignored.
    assert patterns.is_ignored(Path("/repo/build/keep.py"), is_dir=False)
    assert patterns.is_ignored(Path("/repo/src/build/deep/x.py"), is_dir=False)
    assert not patterns.is_ignored(Path("/repo/src/x.py"), is_dir=False)


def test_load_gitignore_anchors_at_the_given_directory(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    gitignore = tmp_path / "sub" / ".gitignore"
    gitignore.write_bytes(b"/only-here\r\n*.tmp\n")
    patterns = load_gitignore(gitignore.read_bytes(), gitignore.parent)
    assert patterns.base == tmp_path / "sub"
    assert patterns.match(tmp_path / "sub" / "only-here", is_dir=False) is True  # CRLF stripped
    assert patterns.match(tmp_path / "sub" / "x" / "only-here", is_dir=False) is None
    assert patterns.match(tmp_path / "sub" / "x" / "a.tmp", is_dir=False) is True
    assert len(load_gitignore(gitignore.read_bytes(), tmp_path)) == 2


# --- against git ---------------------------------------------------------------------------------

# (.gitignore text, paths to create: a trailing '/' makes a directory)
GIT_CASES: dict[str, tuple[str, list[str]]] = {
    "comments-blank": ("# comment\n\n*.log\n", ["a.log", "# comment", "dir/b.log", "c.txt"]),
    "escapes": ("\\#hash\n\\!bang\n", ["#hash", "!bang", "hash", "bang"]),
    "trailing-spaces": ("trail   \nkeep\\ \n", ["trail", "trail   ", "keep ", "keep"]),
    "negation": ("*.py\n!keep.py\n", ["a.py", "keep.py", "sub/keep.py", "sub/x.py"]),
    "dir-only": ("out/\n", ["out/f.txt", "x/out/g.txt", "y/out", "file_out"]),
    "leading-slash": ("/top.txt\n", ["top.txt", "sub/top.txt"]),
    "middle-slash": ("docs/*.md\n", ["docs/a.md", "x/docs/a.md", "docs/sub/b.md"]),
    "any-depth": ("cache\n", ["cache/x", "a/b/cache/y", "a/cache", "cachex"]),
    "wildcards": (
        "?.txt\n*.py[cod]\n[!a]*.cfg\n[a-c]x\n[]]y\n",
        ["a.txt", "ab.txt", "m.pyc", "m.pyz", "a.cfg", "b.cfg", "bx", "dx", "]y"],
    ),
    "posix-class": ("[[:digit:]]*.dat\n", ["1a.dat", "a1.dat"]),
    "leading-double-star": ("**/logs\n", ["logs/a", "x/y/logs/b", "logs2/c"]),
    "trailing-double-star": ("abc/**\n", ["abc/x", "abc/d/e", "xabc/y", "d/abc/z"]),
    "middle-double-star": ("a/**/b\n", ["a/b", "a/x/b", "a/x/y/b", "b", "x/a/b"]),
    "glued-double-star": ("a**b\n", ["axyb", "a/b"]),
    "negation-under-ignored-dir": ("logs/\n!logs/keep.txt\n", ["logs/keep.txt", "logs/x.txt"]),
    "negation-of-contents": ("logs/*\n!logs/keep.txt\n", ["logs/keep.txt", "logs/x.txt", "logs/d/y"]),
    "dir-negated-back": ("build\n!build/\n", ["build/x", "sub/build"]),
}


def _git(args: list[str], cwd: Path, stdin: bytes = b"") -> bytes:
    # A private HOME keeps the user's global excludes file out of the comparison.
    env = {**os.environ, "HOME": str(cwd.parent / "home"), "XDG_CONFIG_HOME": str(cwd.parent / "xdg")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return subprocess.run(
        ["git", *args], cwd=cwd, input=stdin, env=env, capture_output=True, check=True
    ).stdout


def _git_like(patterns: PatternSet, rel: str, is_dir: bool) -> bool | None:
    """What `git check-ignore -v -n` reports: an ignored parent decides first, then the path itself."""
    parts = rel.split("/")
    for i in range(1, len(parts)):
        if patterns.match_relative("/".join(parts[:i]), True) is True:
            return True
    return patterns.match_relative(rel, is_dir)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.parametrize("case", sorted(GIT_CASES))
def test_agrees_with_git_check_ignore(tmp_path: Path, case: str) -> None:
    text, paths = GIT_CASES[case]
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(["init", "-q"], repo)
    (repo / ".gitignore").write_text(text)
    queries: dict[str, bool] = {}  # every path and parent directory -> is_dir
    for path in paths:
        target = repo / path
        if path.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("")
        parts = path.rstrip("/").split("/")
        for i in range(1, len(parts)):
            queries["/".join(parts[:i])] = True
        queries[path.rstrip("/")] = path.endswith("/")

    out = _git(
        ["check-ignore", "--no-index", "-v", "-n", "-z", "--stdin"],
        repo,
        stdin=b"".join(q.encode() + b"\0" for q in queries),
    )
    fields = out.split(b"\0")[:-1]
    expected: dict[str, bool | None] = {}
    for i in range(0, len(fields), 4):
        source, _line, pattern, name = (f.decode() for f in fields[i : i + 4])
        expected[name] = None if not source else not pattern.startswith("!")
    assert set(expected) == set(queries)

    patterns = load_gitignore((repo / ".gitignore").read_bytes(), repo)
    actual = {rel: _git_like(patterns, rel, is_dir) for rel, is_dir in queries.items()}
    assert actual == expected
