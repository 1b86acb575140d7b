"""Mutation fuzzing of the static pass and the settings loader.

    python benchmarks/fuzz.py [--seconds 600] [--seed 0] [FILES...]

Each round takes a real Python file (by default the excerpts of public code in
`tests/static/data/real/` and the bundled fixtures), mutates it (deletes, duplicates or swaps lines
and tokens), and checks it with every static rule and with `--fix --unsafe-fixes`: nothing may
raise, no rule may report an internal error, and the fixed text must parse wherever the mutated text
did. It also loads random `[tool.amplint]` tables: each must give settings or a ConfigError, never
another exception. A failure prints the seed and the mutated text and exits 1. `tests/pipeline/test_fuzz.py`
runs a short fixed-seed round of the same in CI.
"""

from __future__ import annotations

import argparse
import ast
import io
import random
import sys
import tempfile
import time
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = [
    *sorted((ROOT / "tests" / "static" / "data" / "real").glob("*.py")),
    *sorted((ROOT / "fixtures").glob("*.py")),
]


def mutate(text: str, rng: random.Random) -> str:
    """One to three random edits of lines or tokens."""
    for _ in range(rng.randint(1, 3)):
        lines = text.splitlines(keepends=True)
        if not lines:
            return text
        kind = rng.choice(
            ("delete line", "duplicate line", "swap lines", "delete token", "duplicate token", "swap tokens")
        )
        if kind.endswith("line") or kind == "swap lines":
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            if kind == "delete line":
                del lines[i]
            elif kind == "duplicate line":
                lines.insert(j, lines[i])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            text = "".join(lines)
            continue
        spans = _token_spans(text)
        if len(spans) < 2:
            continue
        (a, b), (c, d) = sorted(rng.sample(spans, 2))
        if kind == "delete token":
            text = text[:a] + text[b:]
        elif kind == "duplicate token":
            text = text[:c] + text[a:b] + " " + text[c:]
        elif b <= c:
            text = text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
    return text


def _token_spans(text: str) -> list[tuple[int, int]]:
    """Offsets of the name, number, operator and string tokens of `text` (what tokenizes of it)."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    spans = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NAME, tokenize.NUMBER, tokenize.OP, tokenize.STRING):
                (row, col), (end_row, end_col) = token.start, token.end
                spans.append((starts[row - 1] + col, starts[end_row - 1] + end_col))
    except (tokenize.TokenError, SyntaxError, IndexError):
        pass
    return spans


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def check_text(text: str) -> str | None:
    """What went wrong checking and fixing `text` with every static rule, or None."""
    from amplint.fixing.edits import fix_source
    from amplint.rules import all_rules
    from amplint.rules.runner import lint_text
    from amplint.source import decode_source

    rules = [rule for rule in all_rules() if not rule.runtime_only]
    try:
        result = lint_text(text, rules, "fuzzed.py")
        if result.internal_errors:
            return "internal error: " + result.internal_errors[0]
        outcome = fix_source(decode_source(text.encode(), Path("fuzzed.py")), rules, "fuzzed.py", unsafe=True)
    except Exception as exc:  # any exception is the finding
        return f"{type(exc).__name__}: {exc}"
    if outcome.changed and _parses(text) and not _parses(outcome.new_text):
        return "the fixed text does not parse"
    return None


_VALUES = (
    0,
    -1,
    3,
    1.5,
    True,
    "",
    "AMP",
    "AMP001",
    "fp16",
    "auto",
    ">=2.1",
    "banana",
    [],
    ["AMP001"],
    [1],
    {},
    {"a": 1},
)
_KEYS = ("select", "extend-select", "ignore", "exclude", "extend-exclude", "per-file-ignores", "precision",
         "runtime", "torch-version", "max-file-size", "selct", "targets")  # fmt: skip


def random_table(rng: random.Random) -> str:
    """A `[tool.amplint]` table of random keys and values, as TOML."""
    lines = ["[tool.amplint]"]
    for key in rng.sample(_KEYS, rng.randint(1, 4)):
        lines.append(f"{key} = {_toml(rng.choice(_VALUES))}")
    return "\n".join(lines) + "\n"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return repr(value)


def check_config(table: str) -> str | None:
    """What went wrong loading `table`, or None: settings or a ConfigError are both fine."""
    from amplint.config import ConfigError, load_settings

    with tempfile.TemporaryDirectory() as directory:
        (Path(directory) / "pyproject.toml").write_text(table, encoding="utf-8")
        try:
            load_settings([Path(directory)], cwd=Path(directory))
        except ConfigError:
            return None
        except Exception as exc:  # anything but a ConfigError is the finding
            return f"{type(exc).__name__}: {exc}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="*", type=Path, help="Python files to mutate (default: the excerpts)")
    parser.add_argument("--seconds", type=float, default=600.0, help="how long to run (default 600)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    args = parser.parse_args(argv)
    texts = [path.read_text(encoding="utf-8") for path in (args.files or CORPUS)]
    deadline, seed, rounds = time.monotonic() + args.seconds, args.seed, 0
    while time.monotonic() < deadline:
        rng = random.Random(seed)
        text = mutate(rng.choice(texts), rng)
        problem = check_text(text) or check_config(random_table(rng))
        if problem is not None:
            print(f"seed {seed}: {problem}\n--- mutated text ---\n{text}", file=sys.stderr)
            return 1
        seed, rounds = seed + 1, rounds + 1
    print(f"{rounds} rounds (seeds {args.seed} to {seed - 1}), no crash, no internal error, every fix parses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
