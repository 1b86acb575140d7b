"""The measurements behind docs/training.md (`benchmarks/training_curves.py`), a few steps each: every
claim the page makes from them holds on a short run, and the SVG writer draws what it is given."""

from __future__ import annotations

import importlib.util
import math
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

_SPEC = importlib.util.spec_from_file_location(
    "training_curves", Path(__file__).parent.parent / "benchmarks" / "training_curves.py"
)
assert _SPEC is not None and _SPEC.loader is not None
curves = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = curves  # its dataclasses look their module up while the class is made
_SPEC.loader.exec_module(curves)

_SVG = "{http://www.w3.org/2000/svg}"


def test_bf16_weights_keep_their_value_when_the_step_is_far_below_their_resolution() -> None:
    # lr 1e-6 is below half a bfloat16 ulp (2^-9 |w|) of every weight with |w| > 2^-11; the
    # initial weights are uniform in +-0.18, so only the few nearest zero can move.
    for step_lost in curves.train_regression("bf16", 1e-6, 3).lost_updates:
        assert step_lost > 0.98
    # With float32 weights only an element whose Adam momentum has just crossed zero stays put.
    for mode in ("fp32", "bf16-autocast", "fp16-autocast", "bf16-master"):
        assert max(curves.train_regression(mode, 1e-6, 3).lost_updates) < 0.01, mode
    # A step far above every weight's resolution moves all of them, bfloat16 or not.
    assert curves.train_regression("bf16", 1e-2, 1).lost_updates[0] < 0.001


def test_adams_first_bf16_step_is_lost_exactly_where_it_is_below_half_a_unit_of_the_weight() -> None:
    # Adam's first step is lr * g / (|g| + eps), about lr per element: it rounds away where the
    # weight's half unit in the last place exceeds lr.
    weights = torch.cat(
        [p.detach().flatten() for p in curves.regression_model(0).to(torch.bfloat16).parameters()]
    )
    predicted = curves.bf16_rounds_away(weights, 1e-4).float().mean().item()
    assert 0.5 < predicted < 0.9
    assert curves.train_regression("bf16", 1e-4, 1).lost_updates[0] == pytest.approx(predicted, abs=0.005)
    # Half a unit in the last place: 2^-8 at 1.0, 2^-13 = 1.2e-4 at 2^-5, 2^-14 = 6.1e-5 at 2^-6;
    # zero moves by any step.
    assert curves.bf16_rounds_away(torch.tensor([1.0, 2**-5, 2**-6, 0.0]), 1e-4).tolist() == [
        True,
        True,
        False,
        False,
    ]
    one = torch.tensor([2**-5], dtype=torch.bfloat16)
    assert torch.equal(one + 1e-4, one) and not torch.equal(one + 1.3e-4, one)


def test_fp16_parameters_with_adamw_defaults_turn_to_nan_after_one_step() -> None:
    losses = curves.train_regression("fp16", 1e-4, 2).losses
    assert math.isfinite(losses[0]) and math.isnan(losses[1])


def test_a_grad_scaler_changes_no_bit_of_a_bf16_autocast_run() -> None:
    plain = curves.train_regression("bf16-autocast", 1e-3, 5)
    scaled = curves.train_regression("bf16-autocast", 1e-3, 5, scaler=True)
    assert plain.losses == scaled.losses
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters, scaled.parameters, strict=True))


def test_rotary_angles_in_half_precision_drift_with_position() -> None:
    inv_freq = curves.rope_inv_freq()
    assert curves.rope_angles(torch.arange(4), "bf16", inv_freq).dtype == torch.bfloat16  # promotion
    far = torch.tensor([8191])
    assert curves.rope_angle_error("bf16", far).item() > 1.0
    assert curves.rope_angle_error("fp16", far).item() > 0.5
    assert curves.rope_angle_error("fp32", far).item() < 1e-3
    near = torch.tensor([100])
    assert curves.rope_angle_error("bf16", near).item() < 0.2
    fix = curves.rope_score_error("fp32", [8192], torch.bfloat16, keys=32, trials=2)
    hazard = curves.rope_score_error("bf16", [8192], torch.bfloat16, keys=32, trials=2)
    assert fix[0] < 0.01 < 0.1 < hazard[0]


def test_fp16_gradients_underflow_without_a_scaler_and_survive_with_one() -> None:
    tokens = 1 << 22
    plain = curves.train_classifier("fp16", 1, tokens_per_step=tokens)
    scaled = curves.train_classifier("fp16-scaler", 1, tokens_per_step=tokens)
    assert plain.zeroed[0] > 0.5 and plain.cosine[0] < 0.9
    assert scaled.zeroed[0] < 0.001 and scaled.cosine[0] > 0.999


def test_clipping_before_unscale_sees_the_norm_times_the_scale() -> None:
    before = curves.train_classifier("fp16-scaler", 1, clip="before-unscale")
    after = curves.train_classifier("fp16-scaler", 1, clip="after-unscale")
    assert before.clip_norms[0] / after.clip_norms[0] == pytest.approx(2.0**16, rel=0.01)


def test_a_bf16_ring_reduction_loses_more_as_ranks_grow() -> None:
    fp32, bf16_8, bf16_64 = (
        curves.ring_mean_error(8, torch.float32, elements=4096),
        curves.ring_mean_error(8, torch.bfloat16, elements=4096),
        curves.ring_mean_error(64, torch.bfloat16, elements=4096),
    )
    assert fp32 < 1e-6 < 1e-3 < bf16_8 < bf16_64


def test_svg_chart_breaks_lines_at_missing_values_and_labels_every_series() -> None:
    svg = curves.svg_chart(
        [
            curves.Series("steady", [1, 2, 3, 4], [1.0, 0.5, 0.25, 0.125]),
            curves.Series("diverged <fp16>", [1, 2, 3, 4], [1.0, math.nan, 0.5, 0.0]),
        ],
        title="t",
        x_label="step",
        y_label="loss",
        log_y=True,
    )
    root = ET.fromstring(svg)
    lines = [line.get("points", "").split() for line in root.iter(f"{_SVG}polyline")]
    assert [len(points) for points in lines] == [4, 1, 1]  # NaN splits, 0 is off a log axis
    texts = [text.text for text in root.iter(f"{_SVG}text")]
    assert "steady" in texts and "diverged <fp16>" in texts
    ys = [float(point.split(",")[1]) for point in lines[0]]
    assert ys == sorted(ys)  # a falling loss is drawn falling (SVG y grows downwards)
