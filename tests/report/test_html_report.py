"""The HTML reports in a real headless browser: Debian's chromium driven by Playwright's Python API
(`executable_path`: Playwright's own browser download is not used). The pages load without a
console error or a request, show the findings, the module tree and the values charts."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import sync_playwright
from support import HAZARD, HAZARD_CODE, amplint_run, write

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Playwright's own 30 s limits are reachable on a loaded machine; this one only guards against a hang
# (a page here opens in about a second).
GUARD_MS = 600_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    assert CHROMIUM, "the page tests need Debian's chromium: apt-get install chromium"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox"], timeout=GUARD_MS
        )
        yield launched
        launched.close()


def _open(browser: Any, page_file: Path) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page()
    page.set_default_timeout(GUARD_MS)
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(page_file.as_uri())
    return page, errors, requests


def test_the_trace_page_shows_findings_modules_and_values(browser: Any, tmp_path: Path) -> None:
    report = tmp_path / "trace.html"
    target = f"{ROOT / 'fixtures' / 'rwkv7_time_mix.py'}:factory"
    proc = amplint_run(tmp_path, "trace", target, "--values", "--format", "html", "-o", str(report))
    assert proc.returncode == 1, proc.stderr  # the fixture's findings
    page, errors, requests = _open(browser, report)
    assert errors == [] and requests == [report.as_uri()]  # self-contained: nothing else is fetched
    finding = page.locator(".finding").first
    assert "AMP101" in finding.inner_text() and "rwkv7_time_mix.py:52" in finding.inner_text()
    assert "w = -math.exp(-0.5) * self.w_lora(xw).sigmoid()" in finding.locator("pre").inner_text()
    # The module tree: ops coloured by dtype, autocast's casts marked.
    assert page.locator("details").count() >= 1
    assert page.locator(".op.bfloat16").count() > 0 and page.locator(".op.float32").count() > 0
    assert page.locator(".op.cast").count() > 0
    # Two charts after --values: headroom against the dtype's limit, and underflow.
    assert page.locator("svg").count() == 2
    page.screenshot(path=str(tmp_path / "trace.png"), full_page=False)
    assert (tmp_path / "trace.png").stat().st_size > 10_000


def test_the_static_page_shows_each_finding_with_its_line(browser: Any, tmp_path: Path) -> None:
    write(tmp_path / "m.py", HAZARD)
    proc = amplint_run(tmp_path, "check", ".", "--format", "html", "-o", "report.html", "--no-cache")
    assert proc.returncode == 1
    page, errors, _ = _open(browser, tmp_path / "report.html")
    assert errors == []
    assert page.locator("h1").inner_text() == "amplint: 1 finding"
    text = page.locator(".finding").inner_text()
    assert HAZARD_CODE in text and "torch.cuda.amp.GradScaler()" in text
