"""A short fixed-seed round of `benchmarks/fuzz.py`: mutated real files never crash the static pass or
its fixes, and random configurations never end in anything but settings or a ConfigError."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("fuzz", Path(__file__).parents[2] / "benchmarks" / "fuzz.py")
assert _SPEC is not None and _SPEC.loader is not None
fuzz = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(fuzz)

TEXTS = [path.read_text(encoding="utf-8") for path in fuzz.CORPUS]


def test_the_mutator_changes_text_and_keeps_some_of_it_parsing() -> None:
    rng = random.Random(0)
    mutated = [fuzz.mutate(TEXTS[0], rng) for _ in range(20)]
    assert sum(text != TEXTS[0] for text in mutated) >= 18
    assert any(fuzz._parses(text) for text in mutated) and not all(fuzz._parses(text) for text in mutated)


@pytest.mark.parametrize("seed", range(40))
def test_a_mutated_real_file_is_checked_and_fixed_without_a_crash(seed: int) -> None:
    rng = random.Random(seed)
    text = fuzz.mutate(rng.choice(TEXTS), rng)
    assert fuzz.check_text(text) is None, text


@pytest.mark.parametrize("seed", range(40))
def test_a_random_configuration_is_settings_or_a_config_error(seed: int) -> None:
    table = fuzz.random_table(random.Random(seed))
    assert fuzz.check_config(table) is None, table
