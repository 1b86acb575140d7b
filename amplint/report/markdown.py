"""A Markdown summary for people, not parsers: counts per rule, then every finding with a link to its
line. The GitHub Action appends it to the job summary, where findings past GitHub's cap on
annotations per step are still seen."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from urllib.parse import quote

from amplint.diagnostics import Diagnostic

# A job summary holds at most 1 MiB: past this many rows the table says how many it left out.
MAX_ROWS = 500


def _cell(text: str) -> str:
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split())


def _link(diagnostic: Diagnostic) -> str:
    """`path:line`, linked to the line on GitHub when run there (the commit under test)."""
    where = f"{diagnostic.location}:{diagnostic.line}"
    server, repository, sha = (
        os.environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_SHA")
    )
    if not (repository and sha) or os.path.isabs(diagnostic.path):
        return f"`{_cell(where)}`"
    url = f"{server or 'https://github.com'}/{repository}/blob/{sha}/{quote(diagnostic.path)}#L{diagnostic.file_line}"
    return f"[`{_cell(where)}`]({url})"


def render(diagnostics: Sequence[Diagnostic]) -> str:
    if not diagnostics:
        return "### amplint\n\nNo findings.\n"
    files = len({d.path for d in diagnostics})
    count = len(diagnostics)
    lines = [f"### amplint: {count} finding{'s' * (count != 1)} in {files} file{'s' * (files != 1)}", ""]
    names = {d.code: d.name for d in diagnostics}
    lines += ["| Rule | Findings |", "| --- | ---: |"]
    lines += [
        f"| {code} `{names[code]}` | {n} |"
        for code, n in sorted(Counter(d.code for d in diagnostics).items())
    ]
    lines += ["", "| Where | Rule | Message |", "| --- | --- | --- |"]
    lines += [f"| {_link(d)} | {d.code} | {_cell(d.message)} |" for d in diagnostics[:MAX_ROWS]]
    if count > MAX_ROWS:
        lines += ["", f"And {count - MAX_ROWS} more, not listed here: `amplint check` lists them all."]
    return "\n".join(lines) + "\n"
