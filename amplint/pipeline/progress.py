"""A one-line progress indicator on a terminal's stderr: `checking files 120/2597 14s` for a long
check (`checking files (finding files) 3s` and `checking files 0/4719 (reading execution modes) 9s`
before the first file is checked), `tracing TARGET 12s` while a trace runs. The elapsed time is
redrawn every second, so a long step shows that it is alive. Nothing at all when stderr is not a terminal (CI logs,
pipes) or with `--quiet`; the line is cleared when the work is done, so the report starts clean."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

_EVERY = 0.1  # seconds between redraws: a fast check should not spend its time printing


class Progress:
    def __init__(
        self, label: str, total: int | None = None, *, quiet: bool = False, stream: TextIO | None = None
    ):
        self.stream = stream or sys.stderr
        self.enabled = not quiet and self.stream.isatty()
        self.label, self.total, self.done = label, total, 0
        self.step = ""  # what runs before the files are counted off ("finding files")
        self.started = self.drawn = time.monotonic()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def advance(self, count: int = 1) -> None:
        self.done += count
        if self.enabled and time.monotonic() - self.drawn >= _EVERY:
            self._draw()

    def begin(self, step: str) -> None:
        """Say that `step` runs now ("" once the files are being checked)."""
        self.step = step
        if self.enabled:
            self._draw()

    def _draw(self) -> None:
        self.drawn = time.monotonic()
        count = f" {self.done}/{self.total}" if self.total is not None else ""
        step = f" ({self.step})" if self.step else ""
        self.stream.write(f"\r\x1b[2K{self.label}{count}{step} {self.drawn - self.started:.0f}s")
        self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._draw()

    def __enter__(self) -> Progress:
        if self.enabled:
            self._draw()
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self.enabled:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
