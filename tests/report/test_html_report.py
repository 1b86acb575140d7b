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
from support import HAZARD, HAZARD_CODE, amplint_call, write

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
    proc = amplint_call(tmp_path, "trace", target, "--values", "--format", "html", "-o", str(report))
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


def test_the_trace_page_of_a_float16_run_says_so_and_marks_its_overflow(browser: Any, tmp_path: Path) -> None:
    # The eager attention's `Q @ K^T` overflows float16 (case 2): inf, then NaN after the softmax.
    report = tmp_path / "trace.html"
    target = f"{ROOT / 'fixtures' / 'qwen2_fp16_overflow.py'}:factory"
    args = ("--no-autocast", "--param-dtype", "float16", "--values", "--format", "html", "-o", str(report))
    proc = amplint_call(tmp_path, "trace", target, *args)
    assert proc.returncode == 1, proc.stderr
    page, errors, _ = _open(browser, report)
    assert errors == []
    # The header states the run's settings: no autocast, the parameters cast to float16.
    run = page.locator("p.run").inner_text()
    assert "traced Qwen2Attention from" in run and "no autocast, parameters cast to float16" in run
    assert "bfloat16" not in run and "autocast on" not in run
    counts = page.locator("p.counts").inner_text()
    assert counts.startswith("100 ops: 95 computing (77 float16, 12 float32, 6 int64), 5 casts")
    # The attention layer overflowed: a red bar at the limit, labelled, not dropped from the chart.
    headroom = page.locator("svg").first
    labels = headroom.locator("text").all_text_contents()
    row = labels.index("Qwen2Attention")
    assert labels[row + 1] == "inf and NaN" and headroom.locator("rect.broke").count() == 2
    marked = headroom.locator("text.broke", has_text="inf and NaN")
    assert marked.is_visible() and marked.bounding_box()["width"] > 0
    # Every other layer's value is written beside its bar, over an axis in bits.
    assert "q_proj" in labels and labels[labels.index("q_proj") + 1] == "8.4 bits"
    ticks = headroom.locator("text.tick").all_text_contents()
    assert ticks[0] == "0" and len(ticks) >= 3 and "bits of headroom" in labels


def test_the_static_page_shows_each_finding_with_its_line(browser: Any, tmp_path: Path) -> None:
    write(tmp_path / "m.py", HAZARD)
    proc = amplint_call(tmp_path, "check", ".", "--format", "html", "-o", "report.html", "--no-cache")
    assert proc.returncode == 1
    page, errors, _ = _open(browser, tmp_path / "report.html")
    assert errors == []
    assert page.locator("h1").inner_text() == "amplint: 1 finding"
    text = page.locator(".finding").inner_text()
    assert HAZARD_CODE in text and "torch.cuda.amp.GradScaler()" in text
