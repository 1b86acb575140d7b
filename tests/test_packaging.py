"""What `python -m build` makes: a wheel with the typing marker, the license and the plugins' entry
points, and an sdist a user can run the README's commands and the tests from."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_build_makes_a_complete_sdist_and_wheel(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = tmp_path.glob("amplint-*.tar.gz")
    (wheel,) = tmp_path.glob("amplint-*.whl")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for folder in ("fixtures", "tests"):
        shipped = {p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("*") if p.is_file()}
        shipped = {name for name in shipped if "__pycache__" not in name}
        assert shipped <= names, sorted(shipped - names)[:5]
    assert {"LICENSE", "README.md", "amplint/py.typed", "pyproject.toml"} <= names
    with zipfile.ZipFile(wheel) as archive:
        files = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in files if n.endswith("entry_points.txt"))
    assert "amplint/py.typed" in files and any(n.endswith("licenses/LICENSE") for n in files)
    assert "amplint/rules/examples/AMP001.toml" in files
    assert (
        "amplint = amplint.integrations.pytest_plugin" in entry_points
        and "AMP = amplint.integrations.flake8_plugin:Plugin" in entry_points
    )
