"""Latency of `amplint server` under typing: ten edits sent back to back to a 5,000-line file, and the
time from the last of them to the diagnostics of its version (median of the runs). Also how many
checks the server ran for each burst and how long they took (it logs each one).

    python benchmarks/lsp_latency.py run [--lines 5000] [--edits 10] [--runs 5]  # lsp_latency.json
    python benchmarks/lsp_latency.py report [--write]  # its block of docs/integrations.md

The editor is pygls's language client speaking LSP to the real server over stdio. Each run opens a
new document (the same text under another name), waits for its diagnostics, then types `--edits`
characters into the comment on its last line, one `didChange` (an incremental change) per character,
as an editor sends them while the user types. The module is small functions with one deprecated
`torch.cuda.amp.GradScaler()` for the rules to find. The time includes the server's debounce.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import docs_blocks  # this folder is on sys.path when a script in it runs
from lsprotocol import types
from pygls.lsp.client import LanguageClient

RESULTS = Path(__file__).resolve().parent / "lsp_latency.json"
PAGE = "integrations.md"
# A guard only: a check of the 5,000-line module takes about 2.5 s on a loaded 2-core machine.
GUARD_S = 120


def source(lines: int) -> str:
    """A module of exactly `lines` lines (at least 12) ending in a comment line, with one AMP008."""
    head = "import torch\nimport torch.nn.functional as F\n\n\ndef make_scaler():\n    return torch.cuda.amp.GradScaler()\n"
    blocks, count, i = [head], head.count("\n"), 0
    while count + 6 <= lines - 1:
        blocks.append(f"\n\ndef layer_{i}(x, w):\n    y = F.linear(x, w)\n    return y * {i}\n")
        count += 5
        i += 1
    blocks.append("\n" * (lines - 1 - count) + "# notes:")
    return "".join(blocks)


class Editor:
    """pygls's language client driving `amplint server` over stdio, as an editor does; it keeps what
    the server publishes (per document, in order) and each check it logs."""

    def __init__(self, root: Path, capabilities: types.ClientCapabilities | None = None) -> None:
        self.root = root
        self.capabilities = capabilities or types.ClientCapabilities()
        self.client = LanguageClient("amplint-editor", "1")
        self.published: defaultdict[str, asyncio.Queue[types.PublishDiagnosticsParams]] = defaultdict(
            asyncio.Queue
        )
        self.checks: list[str] = []
        self.initialized: types.InitializeResult | None = None

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def _published(params: types.PublishDiagnosticsParams) -> None:
            self.published[params.uri].put_nowait(params)

        @self.client.feature(types.WINDOW_LOG_MESSAGE)
        def _logged(params: types.LogMessageParams) -> None:
            self.checks.append(params.message)

    async def __aenter__(self) -> Editor:
        await self.client.start_io(sys.executable, "-m", "amplint", "server", cwd=str(self.root))
        self.initialized = await self.client.initialize_async(
            types.InitializeParams(capabilities=self.capabilities, root_uri=self.root.as_uri())
        )
        self.client.initialized(types.InitializedParams())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        # Asked to stop even after a failure: `stop` waits for the server to exit.
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), GUARD_S)
            self.client.exit(None)
        finally:
            await self.client.stop()

    def open(self, name: str, text: str) -> str:
        uri = (self.root / name).as_uri()
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
            )
        )
        return uri

    def change(self, uri: str, version: int, *changes: types.TextDocumentContentChangeEvent) -> None:
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=list(changes),
            )
        )

    async def diagnostics(self, uri: str) -> types.PublishDiagnosticsParams:
        """The next diagnostics published for `uri`; a server that never publishes them is an error."""
        return await asyncio.wait_for(self.published[uri].get(), GUARD_S)


@dataclass
class Burst:
    latency: float  # seconds from the last edit sent to its version's diagnostics
    checks: int  # checks the server ran for the burst
    check_s: float  # the seconds they took, as the server logged them
    first_published: int | None  # the version of the first diagnostics published after the burst


async def burst(editor: Editor, name: str, text: str, edits: int) -> Burst:
    """Open `text` as `name`, then type `edits` characters at its end, as fast as the client sends."""
    uri = editor.open(name, text)
    await editor.diagnostics(uri)
    before = len(editor.checks)
    line = text.count("\n")
    column = len(text) - text.rfind("\n") - 1
    for typed in range(edits):
        at = types.Position(line=line, character=column + typed)
        editor.change(
            uri,
            typed + 2,
            types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text="x"),
        )
    sent = time.perf_counter()
    first = await editor.diagnostics(uri)
    published = first
    while published.version != edits + 1:
        published = await editor.diagnostics(uri)
    latency = time.perf_counter() - sent
    ran = [message for message in editor.checks[before:] if message.startswith(f"amplint: checked {uri} ")]
    seconds = sum(float(message.rsplit(" in ", 1)[1].removesuffix(" s")) for message in ran)
    return Burst(latency, len(ran), seconds, first.version)


async def measure(lines: int, edits: int, runs: int) -> list[Burst]:
    text = source(lines)
    with tempfile.TemporaryDirectory() as folder:
        async with Editor(Path(folder)) as editor:
            return [await burst(editor, f"model_{run}.py", text, edits) for run in range(runs)]


def report(data: dict[str, Any]) -> dict[str, str]:
    meta, latency, check_s = data["meta"], data["latency_s"], data["check_s"]
    checks = sorted(set(data["checks_per_burst"]))
    ran = " or ".join(map(str, checks))
    text = (
        f"Measured with `python benchmarks/lsp_latency.py run --lines {data['lines']} --edits {data['edits']} "
        f"--runs {data['runs']}` (pygls's language client "
        f"and the real server over stdio; {data['edits']} edits sent back to back, one typed character "
        f"each, at the end of a generated {data['lines']:,}-line module), then `report --write`: from the last "
        f"edit to the diagnostics of its version, **{statistics.median(latency):.2f} s** median "
        f"{f'({min(latency):.2f} to {max(latency):.2f} s)' if len(latency) > 1 else '(one run)'}; the server ran {ran} "
        f"check{'s' if checks != [1] else ''} per burst, which took {min(check_s):.2f} to {max(check_s):.2f} s. "
        f"On a {meta['cpus']}-core machine shared with other work ({docs_blocks.load_text(meta)}), amplint "
        f"{meta['versions']['amplint']}, pygls {meta['versions']['pygls']}: on an idle machine the times are shorter."
    )
    return {"latency": text}


def main() -> None:
    parser, commands = docs_blocks.script_parser(__doc__)
    go = commands.add_parser("run")
    go.add_argument("--lines", type=int, default=5000)
    go.add_argument("--edits", type=int, default=10)
    go.add_argument("--runs", type=int, default=5)
    go.add_argument("--output", type=Path, default=RESULTS)
    docs_blocks.add_report(commands, RESULTS, PAGE)
    args = parser.parse_args()
    if args.command == "report":
        docs_blocks.report_args(args, PAGE, "lsp_latency", report)
        return
    meta = docs_blocks.machine(("amplint", "pygls"))
    bursts = asyncio.run(measure(args.lines, args.edits, args.runs))
    data = {
        "lines": args.lines,
        "edits": args.edits,
        "runs": args.runs,
        "latency_s": [round(b.latency, 3) for b in bursts],
        "checks_per_burst": [b.checks for b in bursts],
        "check_s": [round(b.check_s, 3) for b in bursts],
    }
    docs_blocks.save(args.output, {"meta": docs_blocks.finished(meta), **data})


if __name__ == "__main__":
    main()
