"""`benchmarks/corpus_pick.py`: review 5's written rule applied to PyPI names. The index is replaced
by real archives built here (the tests must not need the network); the rule is what is tested."""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any

import corpus_pick  # benchmarks/ is on the path (pyproject)
import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

TORCH_FP16 = b"import torch\n\n\ndef f(x):\n    return x.half()\n"
TORCH_ONLY = b"import torch\n\n\ndef f(x):\n    return x + 1\n"


def sdist(top: str, files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for name, content in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(content)
            tf.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


class Index:
    """Serves `corpus_pick._get` from releases given as (author, upload time, sdist files)."""

    def __init__(self, releases: dict[str, tuple[str, str, dict[str, bytes]]]) -> None:
        self.releases = releases

    def __call__(self, url: str) -> bytes:
        for name, (author, uploaded, files) in self.releases.items():
            if url == f"https://pypi.org/pypi/{name}/json":
                meta: dict[str, Any] = {
                    "info": {"version": "1.0", "author_email": author},
                    "urls": [
                        {
                            "packagetype": "sdist",
                            "upload_time": uploaded,
                            "size": 1000,
                            # relative, as a mirror of the index gives it
                            "url": f"../../files/{name}-1.0.tar.gz",
                            "filename": f"{name}-1.0.tar.gz",
                        }
                    ],
                }
                return json.dumps(meta).encode()
            if url.endswith(f"/files/{name}-1.0.tar.gz"):
                return sdist(f"{name}-1.0", files)
        raise OSError(f"404 {url}")


@pytest.mark.parametrize(
    ("paths", "expected"),
    [
        (
            ["src/metrik/torch/__init__.py", "src/metrik/torch/ops.py", "tests/__init__.py"],
            "src/metrik/torch",
        ),
        (["alpha/__init__.py", "tiny_pkg/__init__.py", "tiny_pkg/sub/__init__.py"], "tiny_pkg"),
        (["alpha/__init__.py", "beta/__init__.py"], "alpha"),
        (["setup.py", "examples/demo/__init__.py"], ""),
    ],
)
def test_package_folder(paths: list[str], expected: str) -> None:
    assert corpus_pick.package_folder("tiny-pkg", paths) == expected


def test_judge_applies_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = "2025-01-01T00:00:00"
    monkeypatch.setattr(
        corpus_pick,
        "_get",
        Index(
            {
                "good": ("a@x", fresh, {"good/__init__.py": TORCH_FP16}),
                "old": ("a@x", "2022-06-01T00:00:00", {"old/__init__.py": TORCH_FP16}),
                "plain": ("a@x", fresh, {"plain/__init__.py": TORCH_ONLY}),
                "numpy-only": ("a@x", fresh, {"n/__init__.py": b"x = 'float16'\n"}),
            }
        ),
    )
    judged = {
        n: corpus_pick.judge(n, {"known"}, "see mentioned-pkg here")
        for n in ("good", "old", "plain", "numpy-only", "known", "mentioned-pkg", "missing")
    }
    assert judged["good"].qualifies and judged["good"].subdir == "good" and judged["good"].sdist
    assert judged["old"].reason.startswith("latest release before")
    assert judged["plain"].reason == "never meets reduced precision"
    assert judged["numpy-only"].reason == "does not import torch"
    assert judged["known"].reason == "in the corpus"
    assert judged["mentioned-pkg"].reason == "named in this repository"
    assert judged["missing"].reason.startswith("no metadata")


def test_main_caps_authors_and_repeated_packages(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh = "2025-01-01T00:00:00"
    releases = {f"p{i}": ("same@x", fresh, {f"p{i}/__init__.py": TORCH_FP16}) for i in range(7)}
    # a nightly of p0: the same package folder under another name
    releases["p0-nightly"] = ("other@x", fresh, {"p0/__init__.py": TORCH_FP16})
    releases["q"] = ("other@x", fresh, {"q/__init__.py": TORCH_FP16})
    monkeypatch.setattr(corpus_pick, "_get", Index(releases))
    monkeypatch.setattr(corpus_pick, "repository_text", lambda: "")
    names = tmp_path / "names.txt"
    names.write_text("\n".join(["p0-nightly", *(f"p{i}" for i in range(7)), "q"]) + "\n")
    log = tmp_path / "log.tsv"
    assert (
        corpus_pick.main([str(names), "--take", "7", "--review", "r9", "--log", str(log), "--jobs", "3"]) == 0
    )
    picked = [
        line.split('"')[1] for line in capsys.readouterr().out.splitlines() if line.startswith("name =")
    ]
    # p0-nightly comes first and takes package p0, so p0 is refused; p6 would be the author's sixth
    assert picked == ["p0-nightly", "p1", "p2", "p3", "p4", "p5", "q"]
    reasons = dict(line.split("\t")[::2] for line in log.read_text().splitlines())
    assert reasons["p0"] == "package p0 already in the corpus or taken"
    assert reasons["p6"] == "five projects of this author taken"


def test_a_package_is_known_by_its_import_path() -> None:
    # torchburn's sdist keeps its package under python/, its CUDA build's wheel at the top
    assert corpus_pick._package("python/torchburn") == corpus_pick._package("torchburn") == "torchburn"
    assert corpus_pick._package("src/metrik/torch") == "metrik/torch" != corpus_pick._package("torch")
    # A folder named for what it holds is nobody's: two unrelated projects may both ship `src`.
    assert corpus_pick._package("src") == corpus_pick._package("benchmark") == ""


def test_an_entry_is_toml_whatever_its_folder_is_named() -> None:
    # cookienlp's sdist names its package folder with a backspace: written unescaped, the corpus
    # would no longer parse.
    verdict = corpus_pick.Verdict("cookienlp", "qualifies", "1.0.2", "a@x", "\bcookienlp", True, 10)
    (project,) = tomllib.loads(corpus_pick.entry(verdict, "r9"))["project"]
    assert project == {
        "name": "cookienlp",
        "version": "1.0.2",
        "subdir": "\bcookienlp",
        "sdist": True,
        "first_checked": "r9",
    }
