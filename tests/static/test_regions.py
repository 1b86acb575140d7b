"""Skipping function bodies before parsing: lines stay where they were, what rules read across
functions stays, and findings are the same as when the whole file is parsed."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import amplint.rules.runner
from amplint.rules import all_rules, rule_by_code
from amplint.rules.runner import lint_text
from amplint.static.regions import region_marks, skip_bodies

RULES = [rule for rule in all_rules() if rule.code != "AMP900" and not rule.runtime_only]

MODULE = """\
import torch

EPS = 1e-12


class Attention(torch.nn.Module):
    scale = 0.125

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, q, k):
        scores = q @ k.transpose(-1, -2)
        return self._normalise(scores)

    def _normalise(self, scores):
        return scores.softmax(-1)

    @property
    def width(self):
        return self.proj.out_features


def unrelated(x):
    y = x + 1
    return y * 2


def guarded(x):
    return x / (x.sum() + EPS)


def one_line(x): return x + 1
"""


def _marks(*codes: str) -> tuple[frozenset[str], re.Pattern[str] | None]:
    rules = [rule_by_code(code) for code in codes]
    marks = region_marks([rule for rule in rules if rule is not None])
    assert marks is not None
    return marks


def _skipped(text: str, code: str) -> str:
    """`text` with the bodies skipped that rule `code` does not need; some always are."""
    skipped = skip_bodies(text, *_marks(code))
    assert skipped is not None
    return skipped


def test_blanks_bodies_without_marks_and_keeps_every_line_in_place() -> None:
    skipped = _skipped(MODULE, "AMP003")
    original, reduced = MODULE.splitlines(), skipped.splitlines()
    assert len(original) == len(reduced)
    for before, after in zip(original, reduced, strict=True):
        assert after in {before, ""} or after.strip() == "pass"
    kept = "\n".join(reduced)
    # The softmax's body, and `forward`, which calls it by name (rules judge parameters by callers).
    assert "return scores.softmax(-1)" in kept
    assert "return self._normalise(scores)" in kept
    # Bodies with nothing to flag are gone; signatures, class attributes and headers stay.
    assert "y = x + 1" not in kept
    assert "return self.proj.out_features" not in kept
    # `__init__` stays: the dtype-facts engine reads what `self.proj` is there.
    assert "self.proj = torch.nn.Linear(dim, dim)" in kept
    assert "    def __init__(self, dim, eps=1e-6):" in kept
    assert "    scale = 0.125" in kept
    assert "    @property" in kept
    # A body on the header's line cannot be blanked without the header.
    assert "def one_line(x): return x + 1" in kept
    compile(skipped, "<skipped>", "exec")


def test_bodies_of_called_helpers_are_kept() -> None:
    # The engine reads a helper's return value: scores built in `_scores` reach the softmax.
    text = (
        "class Attention:\n"
        "    def forward(self, q, k):\n"
        "        return self._scores(q, k).softmax(-1)\n\n"
        "    def _scores(self, q, k):\n"
        "        return self._product(q, k) * 0.1\n\n"
        "    def _product(self, q, k):\n"
        "        return q @ k.transpose(-1, -2)\n\n"
        "    def unrelated(self, x):\n"
        "        return x + 1\n"
    )
    skipped = _skipped(text, "AMP003")
    assert "return self._product(q, k) * 0.1" in skipped
    assert "return q @ k.transpose(-1, -2)" in skipped
    assert "return x + 1" not in skipped


def test_the_callers_of_callers_are_kept_as_deep_as_the_engine_reads_them(monkeypatch) -> None:
    # gpu-pac 0.3.4: a helper's `1e-10` guard is float32 because a caller two calls up upcasts what
    # it passes. With that caller skipped, the guard was reported "in the caller's dtype".
    text = (
        "import torch\n\n\n"
        "def top(x):\n    return middle(x.float())\n\n\n"
        "def middle(y):\n    return guard(y)\n\n\n"
        "def guard(z):\n    return torch.log(z + 1e-10)\n\n\n"
        "def unrelated(x):\n    return x + 1\n"
    )
    skipped = _skipped(text, "AMP005")
    assert "return middle(x.float())" in skipped
    assert "return x + 1" not in skipped
    assert _lint(text, True, monkeypatch) == _lint(text, False, monkeypatch) == []


@pytest.mark.parametrize("name", ["self.EPS", "self.loo_eps", "self.variance_epsilon"])
def test_a_body_reading_an_epsilon_by_any_name_is_kept_for_amp005(name: str) -> None:
    # pyagc 0.1: `torch.log(torch.sigmoid(out) + self.EPS)`, `self.EPS = 1e-15` in `__init__`.
    text = (
        "class Loss:\n"
        f"    def __init__(self):\n        {name} = 1e-15\n\n"
        f"    def loss(self, out):\n        return torch.log(torch.sigmoid(out) + {name})\n\n"
        "    def steps(self, x):\n        return x + 1\n"
    )
    skipped = _skipped(text, "AMP005")
    assert f"return torch.log(torch.sigmoid(out) + {name})" in skipped
    assert "return x + 1" not in skipped


def test_amp005_reads_only_files_that_write_a_constant_float16_rounds_to_zero() -> None:
    rule = next(rule for rule in RULES if rule.code == "AMP005")
    assert rule.trigger_pattern is not None
    for tiny in ("1e-8", "1E-12", "2.5e-09", "0.00000001", "torch.finfo(torch.float32).tiny", "finfo(x).eps"):
        assert rule.trigger_pattern.search(f"y = x + {tiny}\n"), tiny
    for wide in ("1e-6", "1e-7", "5e-5", "0.0001", "torch.finfo(x.dtype).min", "1e8"):
        assert not rule.trigger_pattern.search(f"y = x + {wide}\n"), wide
    # A file whose guards are all float16's to hold is not read for the rule at all.
    code = "import torch\n\n\ndef f(x):\n    return torch.log(torch.sigmoid(x.half()) + {})\n"
    assert not lint_text(code.format("1e-6"), [rule]).diagnostics
    assert [d.code for d in lint_text(code.format("1e-8"), [rule]).diagnostics] == ["AMP005"]


def test_body_calling_a_softmax_submodule_is_kept() -> None:
    # `self.attend` is an `nn.Softmax`: the body that calls it holds a softmax.
    text = (
        "class Attention(nn.Module):\n"
        "    def __init__(self):\n"
        "        self.attend = nn.Softmax(dim=-1)\n"
        "        self.proj = nn.Linear(4, 4)\n\n"
        "    def forward(self, dots):\n"
        "        return self.attend(dots)\n\n"
        "    def project(self, x):\n"
        "        return self.proj(x)\n"
    )
    skipped = _skipped(text, "AMP003")
    assert "return self.attend(dots)" in skipped
    assert "return self.proj(x)" not in skipped


def test_body_reading_a_module_constant_is_kept() -> None:
    skipped = _skipped(MODULE, "AMP003")
    assert "return x / (x.sum() + EPS)" in skipped


def test_pattern_marks_a_body() -> None:
    # AMP004's `-65504` has no word of its own: the pattern finds it.
    text = "def mask(s, m):\n    return s.where(m, -65504)\n\n\ndef other(x):\n    return x\n"
    skipped = _skipped(text, "AMP004")
    assert "-65504" in skipped
    assert "return x\n" not in skipped


def test_constructor_stays_only_for_a_class_whose_family_keeps_a_method() -> None:
    text = (
        "class Config:\n"
        "    model_type = 'toy'\n\n"
        "    def __init__(self, hidden=4, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
        "        self.hidden = hidden\n\n"
        "class Base(nn.Module):\n"
        "    def __init__(self, scale):\n"
        "        super().__init__()\n"
        "        self.scale = scale\n\n"
        "class Head(Base):\n"
        "    def forward(self, x):\n"
        "        return (x * self.scale).softmax(-1)\n\n"
        "class Block(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.head = Head(0.5)\n\n"
        "    def extra(self):\n"
        "        return 'block'\n"
    )
    skipped = _skipped(text, "AMP003")
    assert len(skipped.splitlines()) == len(text.splitlines())
    # `Head.forward` reads `self.scale`, which the `__init__` of its base sets.
    assert "self.scale = scale" in skipped
    # `super().__init__()` names no constructor of the file, and naming `Head` in an `__init__`
    # keeps nothing: `Block` has no method that stays, and `Config` is gone but for its header.
    assert "self.head = Head(0.5)" not in skipped
    assert "self.hidden = hidden" not in skipped
    assert "model_type = 'toy'" not in skipped
    assert "class Config:" in skipped and "class Block(nn.Module):" in skipped
    compile(skipped, "<skipped>", "exec")


def test_docstrings_and_comments_mark_nothing() -> None:
    text = (
        "def load(name):\n"
        '    """>>> x.softmax(-1)"""\n'
        "    # the softmax is taken later\n"
        "    return name\n\n"
        "def soft(x):\n"
        "    return x.softmax(-1)  # a softmax\n\n"
        "def quoted(x):\n"
        "    return x.get('#', 'softmax')\n"
    )
    skipped = _skipped(text, "AMP003")
    assert "return name" not in skipped
    assert "return x.softmax(-1)  # a softmax" in skipped
    # A `#` on a line with a string might be inside it: the line counts whole.
    assert "return x.get('#', 'softmax')" in skipped


def test_a_class_with_a_marked_attribute_or_a_kept_reader_stays() -> None:
    text = (
        "class Masks:\n"
        "    fill = -1e9\n\n"
        "    def other(self, x):\n"
        "        return x\n\n"
        "class Output:\n"
        "    logits: object = None\n\n"
        "def run(x):\n"
        "    out = Output()\n"
        "    return out.logits.masked_fill(x, -1e9)\n"
    )
    skipped = _skipped(text, "AMP004")
    assert "fill = -1e9" in skipped and "return x\n" not in skipped
    assert "logits: object = None" in skipped


def test_a_body_spelling_a_site_with_an_import_alias_is_kept() -> None:
    text = (
        "from torch.distributions import Categorical as Cat\n\n"
        "def sample(logits):\n"
        "    return Cat(probs=logits.softmax(-1)).sample()\n\n"
        "def other(x):\n"
        "    return x\n"
    )
    skipped = _skipped(text, "AMP013")
    assert "return Cat(probs=logits.softmax(-1)).sample()" in skipped
    assert "return x\n" not in skipped


def test_decorated_first_statement_and_line_endings() -> None:
    text = (
        "import functools\r\n\r\ndef outer(f):\r\n    @functools.wraps(f)\r\n    def inner(*a):\r\n"
        "        return f(*a)\r\n    return inner\r\n\r\ndef soft(x):\r\n    return x.softmax(-1)\r\n"
    )
    skipped = _skipped(text, "AMP003")
    assert skipped.count("\r\n") == text.count("\r\n")
    assert "\n" not in skipped.replace("\r\n", "")
    assert "    pass\r\n" in skipped
    assert "@functools.wraps" not in skipped
    compile(skipped, "<skipped>", "exec")


def test_nothing_to_skip_or_not_python() -> None:
    assert skip_bodies("def f(x):\n    return x.softmax(-1)\n", *_marks("AMP003")) is None
    assert skip_bodies("x = 1\n", *_marks("AMP003")) is None
    assert skip_bodies("def f(:\n    pass\n", *_marks("AMP003")) is None
    # No body stays and nothing else holds a mark: there is nothing to parse.
    assert skip_bodies('"""A softmax."""\ndef f(x):\n    return x + 1\n', *_marks("AMP003")) == ""
    assert skip_bodies("import torch\nclass A:\n    size = 4\n", *_marks("AMP003")) == ""


def test_a_rule_that_reads_every_body_turns_skipping_off() -> None:
    whole = [rule for rule in RULES if rule.region_words is None]
    assert whole, "some rules read whole files"
    assert region_marks([*RULES[:1], whole[0]]) is None


def _lint(text: str, skipping: bool, monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    with monkeypatch.context() as patch:
        if not skipping:
            patch.setattr(amplint.rules.runner, "skip_bodies", lambda *args, **kwargs: None)
        result = lint_text(text, RULES)
    assert not result.internal_errors
    return [
        (d.code, d.line, d.column, d.end_line, d.end_column, d.message, d.fix) for d in result.diagnostics
    ]


EXAMPLES = [example.code for rule in RULES for example in (*rule.bad, *rule.good)]


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_examples_give_the_same_findings_skipped_or_whole(index: int, monkeypatch) -> None:
    # Each example with an unrelated class after it, so that there is always a body to skip.
    text = EXAMPLES[index] + "\n\nclass Padding:\n    def method(self, x):\n        return x + 1\n"
    assert _lint(text, True, monkeypatch) == _lint(text, False, monkeypatch)


REAL = sorted((Path(__file__).parent / "data" / "real").glob("*.py"))


@pytest.mark.parametrize("path", REAL, ids=[path.stem for path in REAL])
def test_real_code_gives_the_same_findings_skipped_or_whole(path: Path, monkeypatch) -> None:
    text = (
        path.read_text(encoding="utf-8")
        + "\n\nclass Padding:\n    def method(self, x):\n        return x + 1\n"
    )
    assert _lint(text, True, monkeypatch) == _lint(text, False, monkeypatch)


def _transformers_models() -> Path | None:
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "models"


# Files on which every active rule marks its bodies, so that skipping happens.
MODELS = ["llama", "bert", "qwen2", "whisper", "t5", "opt", "bart", "mistral"]


@pytest.mark.parametrize("name", MODELS)
def test_transformers_models_give_the_same_findings(name: str, monkeypatch) -> None:
    models = _transformers_models()
    if models is None:
        pytest.skip("transformers is not installed (it is in the test extra)")
    text = (models / name / f"modeling_{name}.py").read_text(encoding="utf-8")
    words = frozenset(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    active = [rule for rule in RULES if rule.triggers & words]
    marks = region_marks(active)
    assert marks is not None
    skipped = skip_bodies(text, *marks)
    assert skipped is not None and len(skipped) < len(text)
    assert _lint(text, True, monkeypatch) == _lint(text, False, monkeypatch)
