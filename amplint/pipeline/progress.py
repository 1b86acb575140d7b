"""A one-line progress indicator on a terminal's stderr: `checking 120/2597 files` for a long check,
`tracing TARGET 12s` while a trace runs. Nothing at all when stderr is not a terminal (CI logs,
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
        self.started = self.drawn = time.monotonic()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def advance(self, count: int = 1) -> None:
        self.done += count
        if self.enabled and time.monotonic() - self.drawn >= _EVERY:
            self._draw()

    def _draw(self) -> None:
        self.drawn = time.monotonic()
        if self.total is not None:
            text = f"{self.label} {self.done}/{self.total}"
        else:
            text = f"{self.label} {self.drawn - self.started:.0f}s"
        self.stream.write(f"\r\x1b[2K{text}")
        self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._draw()

    def __enter__(self) -> Progress:
        if self.enabled:
            self._draw()
            if self.total is None:  # no steps to count: the elapsed time shows that it is alive
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
