"""Jupyter notebooks: the code cells are checked as one module, findings name the cell and the line in
it, IPython syntax is left alone, and `--fix` rewrites only the source lines it fixes."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from support import HAZARD, HAZARD_CODE, HAZARD_COLUMN, HAZARD_FIXED, HAZARD_LINE, amplint_run, write

import amplint

# HAZARD split in two cells: its imports, then the function with the AMP008 finding.
IMPORTS, BODY = HAZARD.split("\n\n\n")
CELL_LINE = HAZARD_LINE - HAZARD[: HAZARD.index(BODY)].count("\n")  # the finding's line in its cell
HAZARD_CALL = "torch.cuda.amp.GradScaler()"  # what the finding spans
(HAZARD_SOURCE,) = [line for line in HAZARD.splitlines(keepends=True) if HAZARD_CALL in line]
(FIXED_SOURCE,) = [line for line in HAZARD_FIXED.splitlines(keepends=True) if line not in HAZARD]
# AMP001's fix adds `import torch` to the cell that imports.
GATES = "def gates(self, x):\n    gk = F.logsigmoid(self.gk_proj(x)) / 16\n    return gk\n"


def code(source: str, **fields: Any) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "execution_count": fields.get("execution_count"),
        "metadata": fields.get("metadata", {}),
        "outputs": fields.get("outputs", []),
        "source": source.splitlines(keepends=True),
    }


def markdown(source: str) -> dict[str, Any]:
    return {"cell_type": "markdown", "metadata": {}, "source": source.splitlines(keepends=True)}


def notebook_json(*cells: dict[str, Any], language: str = "python") -> str:
    """A notebook as nbformat writes it: sorted keys, indent 1, raw non-ASCII, a final newline."""
    document = {
        "cells": list(cells),
        "metadata": {
            "kernelspec": {"display_name": language, "language": language, "name": language},
            "language_info": {"name": language, "version": "3.12.4"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def hazard_notebook() -> str:
    """Markdown (cell 1), the imports with line magics (cell 2), the finding (cell 3, with outputs)."""
    return notebook_json(
        markdown("# Décroissance\n\nThe log-decay of the time mix."),
        code(
            f"{IMPORTS}\n%matplotlib inline\n!pip install torch",
            execution_count=1,
            outputs=[
                {"name": "stdout", "output_type": "stream", "text": ["Requirement already satisfied\n"]}
            ],
        ),
        code(
            BODY,
            execution_count=2,
            metadata={"collapsed": False, "tags": ["decay"]},
            outputs=[
                {
                    "data": {"image/png": "iVBORw0KGgoAAAANSUhEUgAAAAE=\n", "text/plain": ["<Figure>"]},
                    "execution_count": 2,
                    "metadata": {"needs_background": "light"},
                    "output_type": "execute_result",
                }
            ],
        ),
    )


def check_json(cwd: Path, *args: str | Path) -> tuple[int, list[dict[str, Any]]]:
    proc = amplint_run(cwd, "check", "--format", "json", *args)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.returncode, json.loads(proc.stdout)["diagnostics"]


def file_line(text: str, needle: str) -> int:
    """The 1-based line of the notebook file that holds `needle` (once)."""
    (line,) = [number for number, line in enumerate(text.splitlines(), start=1) if needle in line]
    return line


def sources(path: Path) -> list[str]:
    """The source of every cell of a notebook, joined."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"]) for cell in cells]


# --- positions ----------------------------------------------------------------------------------------


def test_finding_names_cell_and_line_in_text_output(tmp_path: Path) -> None:
    write(tmp_path / "nb.ipynb", hazard_notebook())
    proc = amplint_run(tmp_path, "check", "nb.ipynb")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"nb.ipynb:cell 3:{CELL_LINE}:{HAZARD_COLUMN}: {HAZARD_CODE} [*]" in proc.stdout
    # The snippet is the cell's line, numbered as in the cell.
    assert f"{CELL_LINE} | {HAZARD_SOURCE.rstrip()}" in proc.stdout
    assert "Found 1 finding." in proc.stdout


def test_finding_in_json_has_cell_line_and_file_line(tmp_path: Path) -> None:
    text = hazard_notebook()
    write(tmp_path / "nb.ipynb", text)
    returncode, diagnostics = check_json(tmp_path, "nb.ipynb")
    assert returncode == 1
    (finding,) = diagnostics
    assert finding["code"] == HAZARD_CODE
    assert finding["path"] == "nb.ipynb"
    assert (finding["cell"], finding["line"], finding["column"]) == (3, CELL_LINE, HAZARD_COLUMN)
    assert (finding["end_line"], finding["end_column"]) == (
        CELL_LINE,
        HAZARD_COLUMN + len(HAZARD_CALL),
    )
    assert finding["ipynb_line"] == file_line(text, json.dumps(HAZARD_SOURCE))
    (edit,) = finding["fix"]["edits"]
    assert (edit["cell"], edit["line"], edit["column"]) == (3, CELL_LINE, HAZARD_COLUMN)


def test_cells_are_one_module_imports_of_earlier_cells_count(tmp_path: Path) -> None:
    # Without the cell that imports torch, `torch.cuda.amp.GradScaler` is not torch's: no finding. So the finding
    # in the hazard notebook exists only because its cell 2 is read with cell 3.
    write(tmp_path / "alone.ipynb", notebook_json(code(BODY)))
    assert check_json(tmp_path, "alone.ipynb") == (0, [])


def test_python_api_reports_cells(tmp_path: Path) -> None:
    path = write(tmp_path / "nb.ipynb", hazard_notebook())
    (diagnostic,) = amplint.check_paths([path])
    assert (diagnostic.cell, diagnostic.line, diagnostic.column) == (3, CELL_LINE, HAZARD_COLUMN)
    assert diagnostic.location == f"{diagnostic.path}:cell 3"


def test_github_and_sarif_point_at_the_line_of_the_ipynb(tmp_path: Path) -> None:
    text = hazard_notebook()
    write(tmp_path / "nb.ipynb", text)
    line = file_line(text, json.dumps(HAZARD_SOURCE))
    proc = amplint_run(tmp_path, "check", "--format", "github", "nb.ipynb")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith(
        f"::notice file=nb.ipynb,line={line},endLine={line},title={HAZARD_CODE} deprecated-cuda-amp-api "
        f"(cell 3%2C line {CELL_LINE}%2C column {HAZARD_COLUMN})::"
    ), proc.stdout

    proc = amplint_run(tmp_path, "check", "--format", "sarif", "nb.ipynb")
    (result,) = json.loads(proc.stdout)["runs"][0]["results"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "nb.ipynb"
    assert location["region"] == {"startLine": line, "endLine": line}
    assert result["message"]["text"].endswith(f"(cell 3, line {CELL_LINE}, column {HAZARD_COLUMN})")
    assert result["properties"]["amplint/cell"] == 3
    assert "fixes" not in result  # a fix edits a cell, not a region of the JSON text


# --- discovery ------------------------------------------------------------------------------------------


def test_directories_are_walked_for_notebooks(tmp_path: Path) -> None:
    write(tmp_path / "pkg" / "model.py", HAZARD)
    write(tmp_path / "pkg" / "nb.ipynb", hazard_notebook())
    write(tmp_path / "pkg" / ".ipynb_checkpoints" / "nb-checkpoint.ipynb", hazard_notebook())
    write(tmp_path / "pkg" / "notes.txt", HAZARD)
    _, diagnostics = check_json(tmp_path, "pkg")
    assert sorted((d["path"], d["line"], d.get("cell")) for d in diagnostics) == [
        ("pkg/model.py", HAZARD_LINE, None),
        ("pkg/nb.ipynb", CELL_LINE, 3),
    ]


# --- IPython syntax -------------------------------------------------------------------------------------

MAGIC_LINES = [
    f"%timeit {HAZARD_CALL}",
    f"y = %time {HAZARD_CALL}",
    f'!echo "{HAZARD_CALL}"',
    "torch.cuda.amp.GradScaler?",
    f"    %time {HAZARD_CALL}",
]


def magic_notebook() -> str:
    return notebook_json(
        code(f"{IMPORTS}\n{MAGIC_LINES[0]}\n{MAGIC_LINES[1]}\n{MAGIC_LINES[2]}"),
        code(f"%%time\n{MAGIC_LINES[3]}\nz = {HAZARD_CALL}"),  # cell 2, line 3
        code("%%bash\nfor f in *.py; do\n  echo $f\ndone"),
        code(f"for i in range(2):\n{MAGIC_LINES[4]}\n    q = {HAZARD_CALL}"),  # cell 4, line 3
    )


def test_magics_are_masked_and_the_rest_of_the_cell_is_checked(tmp_path: Path) -> None:
    write(tmp_path / "nb.ipynb", magic_notebook())
    returncode, diagnostics = check_json(tmp_path, "nb.ipynb")
    assert returncode == 1
    # Nothing on the magic lines (each holds the hazard), no AMP900 for them or the %%bash cell.
    assert [(d["code"], d["cell"], d["line"], d["column"]) for d in diagnostics] == [
        (HAZARD_CODE, 2, 3, 5),
        (HAZARD_CODE, 4, 3, 9),
    ]


def test_fix_leaves_magics_untouched(tmp_path: Path) -> None:
    path = write(tmp_path / "nb.ipynb", magic_notebook())
    before = sources(path)
    proc = amplint_run(tmp_path, "check", "--fix", "nb.ipynb")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = sources(path)
    assert after[0] == before[0]
    assert after[2] == before[2]  # the %%bash cell
    fixed_call = 'torch.amp.GradScaler("cuda")'
    assert after[1] == before[1].replace(f"z = {HAZARD_CALL}", f"z = {fixed_call}")
    assert after[3] == before[3].replace(f"q = {HAZARD_CALL}", f"q = {fixed_call}")
    assert after[1] != before[1] and after[3] != before[3]
    for line in MAGIC_LINES:
        assert sum(line in cell.splitlines() for cell in after) == 1, line
    assert amplint_run(tmp_path, "check", "nb.ipynb").returncode == 0


# --- fixes ---------------------------------------------------------------------------------------------


def test_fix_changes_only_the_fixed_source_line(tmp_path: Path) -> None:
    path = write(tmp_path / "nb.ipynb", hazard_notebook())
    original = path.read_bytes()
    old, new = json.dumps(HAZARD_SOURCE).encode(), json.dumps(FIXED_SOURCE).encode()
    assert original.count(old) == 1
    proc = amplint_run(tmp_path, "check", "--fix", "nb.ipynb")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Fixed 1 finding, 0 remaining." in proc.stdout
    # Outputs, metadata, key order, indentation, the raw "é" and the final newline: all byte for byte.
    assert path.read_bytes() == original.replace(old, new)
    json.loads(path.read_bytes())
    assert amplint_run(tmp_path, "check", "nb.ipynb").returncode == 0
    assert amplint_run(tmp_path, "check", "--fix", "nb.ipynb").returncode == 0
    assert path.read_bytes() == original.replace(old, new)


def test_fix_adds_import_torch_to_its_cell_and_keeps_string_sources(tmp_path: Path) -> None:
    # Compact JSON, sources as one string each, non-ASCII escaped: the style is kept.
    document = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "outputs": [],
                "source": "from torch.nn import functional as F",
            },
            {"cell_type": "markdown", "metadata": {}, "source": "Gates, é"},
            {"cell_type": "code", "metadata": {}, "outputs": [], "source": GATES},
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = write(tmp_path / "nb.ipynb", json.dumps(document, separators=(",", ":")))
    # The module runs in whatever its caller picks: the finding is conditional, shown and fixed on request.
    assert check_json(tmp_path, "nb.ipynb")[1] == []
    _, diagnostics = check_json(tmp_path, "--show-conditional", "nb.ipynb")
    (finding,) = diagnostics
    assert (finding["code"], finding["cell"], finding["line"]) == ("AMP001", 3, 2)
    # The fix's edits name their own cells: `import torch` goes to cell 1.
    # The upcast input is bound once to read its dtype, and the value is cast back where it is returned.
    upcast = (
        "F.logsigmoid((logsigmoid_input := self.gk_proj(x))"
        ".to(torch.promote_types(logsigmoid_input.dtype, torch.float32)))"
    )
    assert [(e["cell"], e["line"], e["content"]) for e in finding["fix"]["edits"]] == [
        (1, 1, "import torch\n"),
        (3, 2, upcast),
        (3, 3, "gk.to(logsigmoid_input.dtype)"),
    ]
    unchanged = path.read_text(encoding="utf-8")
    amplint_run(tmp_path, "check", "--unsafe-fixes", "--fix", "nb.ipynb")
    assert path.read_text(encoding="utf-8") == unchanged  # a finding not shown is not fixed
    proc = amplint_run(tmp_path, "check", "--show-conditional", "--unsafe-fixes", "--fix", "nb.ipynb")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = path.read_text(encoding="utf-8")
    assert "\n" not in text and text.isascii() and '"source":"import torch\\n' in text
    document["cells"][0]["source"] = "import torch\nfrom torch.nn import functional as F"
    fixed = GATES.replace("F.logsigmoid(self.gk_proj(x))", upcast).replace(
        "return gk", "return gk.to(logsigmoid_input.dtype)"
    )
    document["cells"][2]["source"] = fixed
    assert text == json.dumps(document, separators=(",", ":"))


def test_diff_is_a_diff_of_the_file_and_writes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path / "nb.ipynb", hazard_notebook())
    before = path.read_bytes()
    proc = amplint_run(tmp_path, "check", "--diff", "nb.ipynb")
    assert proc.returncode == 1, proc.stderr
    assert path.read_bytes() == before
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["--- a/nb.ipynb", "+++ b/nb.ipynb"]
    assert [line for line in lines if line.startswith(("-", "+"))][2:] == [
        f"-    {json.dumps(HAZARD_SOURCE)},",
        f"+    {json.dumps(FIXED_SOURCE)},",
    ]


# --- bad input -------------------------------------------------------------------------------------------


def test_invalid_notebooks_are_reported_and_the_run_goes_on(tmp_path: Path) -> None:
    d = tmp_path / "proj"
    truncated = hazard_notebook()[:200]
    write(d / "truncated.ipynb", truncated)
    write(d / "list.ipynb", "[]\n")
    write(d / "model.py", HAZARD)
    write(d / "nb.ipynb", hazard_notebook())
    returncode, diagnostics = check_json(tmp_path, "proj")
    assert returncode == 1
    found = {d["path"]: d for d in diagnostics}
    assert set(found) == {"proj/truncated.ipynb", "proj/list.ipynb", "proj/model.py", "proj/nb.ipynb"}
    bad = found["proj/truncated.ipynb"]
    assert bad["code"] == "AMP900" and bad["message"].startswith("not valid JSON")
    assert bad["line"] == truncated.count("\n") + 1  # where the text ends
    assert "cell" not in bad
    assert found["proj/list.ipynb"]["code"] == "AMP900"
    assert "not a Jupyter notebook" in found["proj/list.ipynb"]["message"]
    assert (found["proj/nb.ipynb"]["code"], found["proj/nb.ipynb"]["cell"]) == (HAZARD_CODE, 3)
    assert found["proj/model.py"]["code"] == HAZARD_CODE

    proc = amplint_run(tmp_path, "check", "--fix", "proj")
    assert proc.returncode == 1  # the AMP900 findings remain
    assert "Traceback" not in proc.stderr
    assert (d / "truncated.ipynb").read_text(encoding="utf-8") == truncated
    assert FIXED_SOURCE in sources(d / "nb.ipynb")[2]
    assert FIXED_SOURCE in (d / "model.py").read_text(encoding="utf-8")


def test_cell_that_does_not_parse_is_reported_and_the_others_are_checked(tmp_path: Path) -> None:
    path = write(
        tmp_path / "nb.ipynb", notebook_json(code(IMPORTS), code("def broken(:\n    pass"), code(BODY))
    )
    returncode, diagnostics = check_json(tmp_path, "nb.ipynb")
    assert returncode == 1
    assert [(d["code"], d["cell"], d["line"]) for d in diagnostics] == [
        ("AMP900", 2, 1),
        (HAZARD_CODE, 3, CELL_LINE),
    ]
    assert diagnostics[0]["message"].startswith("SyntaxError:")
    proc = amplint_run(tmp_path, "check", "nb.ipynb")
    assert "nb.ipynb:cell 2:1:" in proc.stdout
    proc = amplint_run(tmp_path, "check", "--fix", "nb.ipynb")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    after = sources(path)
    assert after[1] == "def broken(:\n    pass"
    assert FIXED_SOURCE in after[2]


def test_cell_that_only_libcst_rejects_is_a_warning_and_left_out(tmp_path: Path) -> None:
    """Python accepts every cell; libcst's parser gives up on 5,000 implicitly concatenated strings in
    cell 2. The notebook is not broken, so no AMP900: a warning names the cell, which is left out,
    and the module is checked again without it."""
    strings = "x = (\n" + "".join(f'    "s{i}"\n' for i in range(5000)) + ")"
    compile(strings, "cell", "exec")  # Python accepts it
    path = write(tmp_path / "nb.ipynb", notebook_json(code(IMPORTS), code(strings), code(BODY)))
    assert [(d.code, d.cell, d.line) for d in amplint.check_paths([path])] == [(HAZARD_CODE, 3, CELL_LINE)]
    proc = amplint_run(tmp_path, "check", "nb.ipynb", "--format", "json", "--no-cache")
    assert proc.returncode == 1, proc.stderr
    assert [d["code"] for d in json.loads(proc.stdout)["diagnostics"]] == [HAZARD_CODE]
    assert "amplint: warning: nb.ipynb:cell 2:" in proc.stderr
    assert "not checked: Python accepts it, but amplint's parser (libcst) does not" in proc.stderr


def test_notebook_of_another_language_is_not_checked(tmp_path: Path) -> None:
    write(tmp_path / "r.ipynb", notebook_json(code("x <- c(1, 2)\nplot(x)"), language="R"))
    assert check_json(tmp_path, "r.ipynb") == (0, [])


def test_a_notebook_over_a_mebibyte_with_one_plot_is_checked(tmp_path: Path) -> None:
    """Outputs make a notebook large, not its code: one 1.5 MB plot, and the finding in a cell."""
    plot = base64.b64encode(os.urandom(1_100_000)).decode()
    output = {"data": {"image/png": plot}, "metadata": {}, "output_type": "display_data"}
    text = notebook_json(code(HAZARD, execution_count=1, outputs=[output]))
    assert len(text) > 1_048_576
    write(tmp_path / "plots.ipynb", text)
    returncode, found = check_json(tmp_path, "plots.ipynb", "--no-cache")
    assert returncode == 1
    assert [(d["code"], d["cell"]) for d in found] == [(HAZARD_CODE, 1)]
