"""The screenshot of the trace page that the README shows: `amplint trace --values --format html` on
the bundled RWKV-7 fixture, opened in Debian's chromium through Playwright.

    python benchmarks/html_screenshot.py [--output docs/images/trace-report.png]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "images" / "trace-report.png")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("needs chromium (apt-get install chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        page_file = Path(scratch, "trace.html")
        target = "fixtures/rwkv7_time_mix.py:factory"  # relative: the page shows the path as given
        command = [
            sys.executable,
            "-m",
            "amplint",
            "trace",
            target,
            "--values",
            "--format",
            "html",
            "-o",
            str(page_file),
        ]
        subprocess.run(command, cwd=ROOT, check=False, capture_output=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(page_file.as_uri())
            page.screenshot(path=str(args.output))
            browser.close()
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
