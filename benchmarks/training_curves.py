"""Training-time precision hazards measured on tiny models on CPU: the numbers and loss curves of
docs/training.md, and its pictures in docs/images/training-*.svg.

    python benchmarks/training_curves.py run [--out docs/images] [--seed 0] [--steps-scale 1.0]
    python benchmarks/training_curves.py report [--write]   # the tables of docs/training.md

Every run is seeded (`--seed`) and single-threaded, so a rerun on the same machine gives the same
numbers and the same pictures. The pictures are SVG written by `svg_chart` below (no plotting
library). Needs torch only; CPU autocast and `torch.amp.GradScaler("cpu")` run the mixed-precision
arithmetic for real; what CPU cannot do (a multi-GPU all-reduce) is emulated and says so.

1. Half-precision parameters with plain AdamW against float32 master weights (`train_regression`).
2. Rotary angles computed in half precision (`rope_angles`, `rope_score_error`,
   `train_previous_token`).
3. float16 without loss scaling (`train_classifier`), clipping before `unscale_` (its `clip`
   argument) and a GradScaler under bfloat16 (`train_regression(..., scaler=True)`).
4. A gradient all-reduce summed in half precision (`ring_mean_error`).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import docs_blocks  # this folder is on sys.path when a script in it runs
import torch
import torch.nn.functional as F

RESULTS = Path(__file__).resolve().parent / "training_curves.json"
PAGE = "training.md"
HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}

# --- 1. Master weights --------------------------------------------------------------------------


@dataclass
class RegressionRun:
    losses: list[float]
    lost_updates: list[float]  # per step: the fraction of the optimizer's parameter elements unchanged
    parameters: list[torch.Tensor] = field(repr=False)


def regression_model(seed: int) -> torch.nn.Sequential:
    """The 32-128-32 MLP of `train_regression`, in float32, as seed `seed` initialises it."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.Linear(128, 32))


def bf16_rounds_away(weights: torch.Tensor, step: float) -> torch.Tensor:
    """Where a step of `step` is below half a bfloat16 unit in the last place of the weight (2^-9 to
    2^-8 of |w|), so that `w + step` rounds back to `w`."""
    _, exponent = torch.frexp(weights.float())  # |w| = m * 2^exponent, m in [0.5, 1)
    half_ulp = torch.ldexp(torch.ones_like(weights, dtype=torch.float32), exponent - 9)
    return (half_ulp > step) & (weights != 0)


def train_regression(
    mode: str, lr: float, steps: int, seed: int = 0, *, scaler: bool = False
) -> RegressionRun:
    """Fit a fixed random linear map (32 -> 32) with a 32-128-32 MLP and AdamW, batch 256.

    `fp32`: float32 throughout. `bf16-autocast` / `fp16-autocast`: float32 parameters, forward
    under CPU autocast to that dtype. `bf16-master`: the model in bfloat16, AdamW on a float32 copy
    of its parameters that is copied back after each step. `bf16` / `fp16`: the model cast to half
    precision and AdamW on it. `scaler` puts a GradScaler around the step.
    """
    generator = torch.Generator().manual_seed(seed)
    target = torch.randn(32, 32, generator=generator) / math.sqrt(32)
    dtype = {"bf16": torch.bfloat16, "bf16-master": torch.bfloat16, "fp16": torch.float16}.get(
        mode, torch.float32
    )
    model = regression_model(seed).to(dtype)
    autocast_dtype = {"bf16-autocast": torch.bfloat16, "fp16-autocast": torch.float16}.get(mode)
    trained: list[torch.Tensor] = list(model.parameters())
    if mode == "bf16-master":
        trained = [p.detach().float().requires_grad_() for p in model.parameters()]
    optimizer = torch.optim.AdamW(trained, lr=lr, weight_decay=0.0)
    grad_scaler = torch.amp.GradScaler("cpu", enabled=scaler)
    losses: list[float] = []
    lost: list[float] = []
    total = sum(p.numel() for p in trained)
    for _ in range(steps):
        x = torch.randn(256, 32, generator=generator)
        with torch.autocast(
            "cpu", dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None
        ):
            out = model(x.to(dtype))
        loss = F.mse_loss(out.float(), x @ target)
        optimizer.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
        grad_scaler.scale(loss).backward()
        if mode == "bf16-master":
            for master, param in zip(trained, model.parameters(), strict=True):
                master.grad = param.grad.float() if param.grad is not None else None
        before = [p.detach().clone() for p in trained]
        grad_scaler.step(optimizer)
        grad_scaler.update()
        if mode == "bf16-master":
            with torch.no_grad():
                for master, param in zip(trained, model.parameters(), strict=True):
                    param.copy_(master)
        lost.append(sum(int((p.detach() == b).sum()) for p, b in zip(trained, before, strict=True)) / total)
        losses.append(loss.item())
    return RegressionRun(losses, lost, [p.detach().clone() for p in model.parameters()])


# --- 2. Rotary embeddings -----------------------------------------------------------------------


def rope_inv_freq(head_dim: int = 128, base: float = 10000.0) -> torch.Tensor:
    return 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)


def rope_angles(positions: torch.Tensor, variant: str, inv_freq: torch.Tensor) -> torch.Tensor:
    """The rotary angles `positions[..., None] * inv_freq` as each variant computes them.

    `fp32`: both in float32. `bf16` / `fp16`: the `inv_freq` buffer cast with the model, and integer
    position ids times it, which type promotion computes in the buffer's dtype. `bf16-buffer`: the
    buffer cast to bfloat16 by `model.to(torch.bfloat16)`, then upcast at use and multiplied in
    float32 (what transformers' Llama rotary embedding computes after that cast).
    """
    if variant == "fp32":
        return positions.float()[..., None] * inv_freq
    if variant == "bf16-buffer":
        return positions.float()[..., None] * inv_freq.to(torch.bfloat16).float()
    return positions[..., None] * inv_freq.to(HALF[variant])


def rope_angle_error(variant: str, positions: torch.Tensor, head_dim: int = 128) -> torch.Tensor:
    """Per position: the largest error over the frequencies of the angle, in radians (modulo 2 pi),
    against the exact angle computed in float64."""
    inv_freq = rope_inv_freq(head_dim)
    exact = positions.double()[:, None] * (
        1.0 / 10000.0 ** (torch.arange(0, head_dim, 2).double() / head_dim)
    )
    error = rope_angles(positions, variant, inv_freq).double() - exact
    return torch.remainder(error + math.pi, 2 * math.pi).sub(math.pi).abs().amax(-1)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    even, odd = x[..., ::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)


def rope_score_error(
    variant: str,
    query_positions: Sequence[int],
    model_dtype: torch.dtype,
    head_dim: int = 128,
    keys: int = 256,
    trials: int = 8,
    seed: int = 0,
) -> list[float]:
    """Per query position m: the mean error of the attention score q_m . k_n over keys n spread
    evenly over [0, m], in units of the scores' standard deviation (sqrt(head_dim)).

    q and k are random values of `model_dtype`; cos and sin are computed from the variant's angles
    and cast to `model_dtype` as a model in that dtype does; the products are then taken in float64,
    so the error is the rotary embedding's alone. The reference rotates by the exact angles.
    """
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(trials, head_dim, generator=generator).to(model_dtype).double()
    k = torch.randn(trials, head_dim, generator=generator).to(model_dtype).double()
    inv_freq = rope_inv_freq(head_dim)
    exact_freq = 1.0 / 10000.0 ** (torch.arange(0, head_dim, 2).double() / head_dim)
    errors: list[float] = []
    for m in query_positions:
        positions = torch.cat((torch.tensor([m]), torch.linspace(0, m, keys).round().long()))
        angles = rope_angles(positions, variant, inv_freq)
        cos, sin = (f(angles).to(model_dtype).double() for f in (torch.cos, torch.sin))
        exact = positions.double()[:, None] * exact_freq
        scores = []
        for c, s in ((cos, sin), (exact.cos(), exact.sin())):
            q_rot = _rotate(q[:, None], c[:1], s[:1])  # (trials, 1, head_dim)
            k_rot = _rotate(k[:, None], c[1:], s[1:])  # (trials, keys, head_dim)
            scores.append((q_rot * k_rot).sum(-1))
        errors.append(((scores[0] - scores[1]).abs().mean() / math.sqrt(head_dim)).item())
    return errors


def train_previous_token(variant: str, steps: int, seed: int = 0, max_position: int = 8192) -> list[float]:
    """Train one causal attention head with rotary embeddings to output the previous token.

    Vocabulary 64, width 64, sequences of 64 tokens whose position ids start anywhere in
    [0, max_position - 64), batch 32, AdamW lr 3e-3. The model runs in float32; only the rotary
    angles are computed as `variant` computes them, so the loss measures their error alone. The
    task needs the offset between neighbours, which positions rounded to a coarser grid lose.
    """
    vocab, width, length = 64, 64, 64
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    embed = torch.nn.Embedding(vocab, width)
    query, key = torch.nn.Linear(width, width), torch.nn.Linear(width, width)
    value, head = torch.nn.Linear(width, width, bias=False), torch.nn.Linear(width, vocab)
    modules = (embed, query, key, value, head)
    optimizer = torch.optim.AdamW([p for m in modules for p in m.parameters()], lr=3e-3, weight_decay=0.0)
    inv_freq = rope_inv_freq(width)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    losses: list[float] = []
    for _ in range(steps):
        tokens = torch.randint(0, vocab, (32, length), generator=generator)
        start = torch.randint(0, max_position - length, (32, 1), generator=generator)
        angles = rope_angles(start + torch.arange(length), variant, inv_freq).float()
        cos, sin = angles.cos(), angles.sin()
        hidden = embed(tokens)
        scores = _rotate(query(hidden), cos, sin) @ _rotate(key(hidden), cos, sin).transpose(1, 2)
        weights = (scores / math.sqrt(width)).masked_fill(~causal, -math.inf).softmax(-1)
        logits = head(weights @ value(hidden))
        loss = F.cross_entropy(logits[:, 1:].reshape(-1, vocab), tokens[:, :-1].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


# --- 3. Loss scaling ----------------------------------------------------------------------------

MICRO_BATCH = 1024


@dataclass
class ClassifierRun:
    losses: list[float]
    zeroed: list[float]  # per step: gradient elements that are zero but nonzero in float32
    cosine: list[float]  # per step: cosine of the whole gradient with the float32 one
    clip_norms: list[float]  # per step: the norm clip_grad_norm_ returned (when clipping)


def train_classifier(
    mode: str,
    steps: int,
    seed: int = 0,
    *,
    tokens_per_step: int = MICRO_BATCH,
    clip: str | None = None,
    optimizer_name: str = "adamw",
) -> ClassifierRun:
    """Classify 32-d inputs into 16 classes (the argmax of a fixed random linear map) with a
    32-64-64-16 MLP, micro-batches of 1024, mean cross-entropy.

    `mode`: `fp32`, `fp16` (CPU float16 autocast, no scaling) or `fp16-scaler` (the same with
    `torch.amp.GradScaler("cpu")`, initial scale 2^16). The loss is divided by
    `tokens_per_step / 1024`, as gradient accumulation over that many micro-batches divides it, so
    each gradient element is as small as in a step of `tokens_per_step` tokens; one micro-batch is
    computed. Each step the gradient is compared with the float32 gradient at the same weights.
    `clip`: `after-unscale` or `before-unscale` clips the gradient norm to 1.0 at that point.
    """
    generator = torch.Generator().manual_seed(seed)
    teacher = torch.randn(32, 16, generator=generator)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.GELU(),
        torch.nn.Linear(64, 64),
        torch.nn.GELU(),
        torch.nn.Linear(64, 16),
    )
    params = list(model.parameters())
    if optimizer_name == "adamw":
        optimizer: torch.optim.Optimizer = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.0)
    else:
        optimizer = torch.optim.SGD(params, lr=0.5)
    scaler = torch.amp.GradScaler("cpu", enabled=mode == "fp16-scaler")
    accumulation = tokens_per_step / MICRO_BATCH
    run = ClassifierRun([], [], [], [])
    for _ in range(steps):
        x = torch.randn(MICRO_BATCH, 32, generator=generator)
        labels = (x @ teacher).argmax(-1)
        reference = torch.autograd.grad(F.cross_entropy(model(x), labels) / accumulation, params)
        with torch.autocast("cpu", dtype=torch.float16, enabled=mode != "fp32"):
            loss = F.cross_entropy(model(x), labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss / accumulation).backward()
        if clip == "before-unscale":
            run.clip_norms.append(torch.nn.utils.clip_grad_norm_(params, 1.0).item())
        scaler.unscale_(optimizer)
        if clip == "after-unscale":
            run.clip_norms.append(torch.nn.utils.clip_grad_norm_(params, 1.0).item())
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        nonzero = sum(int((r != 0).sum()) for r in reference)
        run.zeroed.append(
            sum(int(((g == 0) & (r != 0)).sum()) for g, r in zip(grads, reference, strict=True)) / nonzero
        )
        flat, flat_reference = (
            torch.cat([g.flatten() for g in grads]),
            torch.cat([r.flatten() for r in reference]),
        )
        run.cosine.append(F.cosine_similarity(flat.double(), flat_reference.double(), dim=0).item())
        scaler.step(optimizer)
        scaler.update()
        run.losses.append(loss.item())
    return run


# --- 4. All-reduce ------------------------------------------------------------------------------


def ring_mean_error(world_size: int, dtype: torch.dtype, elements: int = 1 << 16, seed: int = 0) -> float:
    """Relative L2 error of the mean of `world_size` per-rank gradients (a shared N(0, 1) signal plus
    N(0, 1) noise per rank), each sent in `dtype` and summed one rank at a time with each partial sum
    rounded to `dtype`, as a ring reduce-scatter's hops do, then divided by `world_size`; against the
    float64 mean."""
    generator = torch.Generator().manual_seed(seed)
    signal = torch.randn(elements, generator=generator, dtype=torch.float64)
    total = torch.zeros(elements, dtype=dtype)
    exact = torch.zeros(elements, dtype=torch.float64)
    for _ in range(world_size):
        grad = signal + torch.randn(elements, generator=generator, dtype=torch.float64)
        total = (total.double() + grad.to(dtype).double()).to(dtype)
        exact += grad
    mean, exact_mean = total.double() / world_size, exact / world_size
    return ((mean - exact_mean).norm() / exact_mean.norm()).item()


# --- Pictures -----------------------------------------------------------------------------------

# Okabe-Ito colours (distinguishable with colour blindness) and dashes, so that lines differ in print.
_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
_DASHES = ("", "6 3", "2 2", "8 3 2 3", "1 3", "10 4", "4 2 1 2")


@dataclass
class Series:
    label: str
    x: Sequence[float]
    y: Sequence[float]


def _nice_step(span: float, ticks: int = 6) -> float:
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _power_label(exponent: int) -> str:
    return f"{10**exponent:g}" if -2 <= exponent <= 3 else "10" + str(exponent).translate(_SUPERSCRIPT)


def svg_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    log_y: bool = False,
    width: int = 760,
    plot_h: int = 320,
) -> str:
    """A line chart as an SVG document. Values that are not finite (or not positive on a log axis)
    break their line; the legend is below the plot, one line per series, so it hides no data."""
    left, right, top, bottom = 64, 18, 40, 52
    plot_w, height = width - left - right, top + plot_h + bottom + 18 * len(series) + 8

    def shown(value: float) -> bool:
        return math.isfinite(value) and (value > 0 or not log_y)

    xs = [x for s in series for x in s.x]
    ys = [math.log10(y) if log_y else y for s in series for y in s.y if shown(y)]
    x_lo, x_hi = min(xs), max(xs)
    y_lo: float
    y_hi: float
    if log_y:
        low, high = math.floor(min(ys)), max(math.ceil(max(ys)), math.floor(min(ys)) + 1)
        y_lo, y_hi = low, high
        y_ticks = [(float(e), _power_label(e)) for e in range(low, high + 1)]
    else:
        step = _nice_step((max(ys) - min(0.0, min(ys))) or 1.0)
        y_lo, y_hi = math.floor(min(0.0, min(ys)) / step) * step, math.ceil(max(ys) / step) * step
        y_ticks = [(y_lo + i * step, f"{y_lo + i * step:g}") for i in range(round((y_hi - y_lo) / step) + 1)]
    x_step = _nice_step(x_hi - x_lo)
    x_ticks = [i * x_step for i in range(math.ceil(x_lo / x_step), math.floor(x_hi / x_step) + 1)]

    def px(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * plot_w

    def py(y: float) -> float:
        return top + (y_hi - y) / (y_hi - y_lo) * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2:.1f}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    for tick, label in y_ticks:
        out.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{py(tick):.1f}" y2="{py(tick):.1f}" stroke="#ddd"/>'
        )
        out.append(f'<text x="{left - 6}" y="{py(tick) + 4:.1f}" text-anchor="end">{label}</text>')
    for tick in x_ticks:
        out.append(
            f'<line x1="{px(tick):.1f}" x2="{px(tick):.1f}" y1="{top}" y2="{top + plot_h}" stroke="#eee"/>'
        )
        out.append(f'<text x="{px(tick):.1f}" y="{top + plot_h + 18}" text-anchor="middle">{tick:g}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>')
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h + 40}" text-anchor="middle">{escape(x_label)}</text>'
    )
    out.append(
        f'<text x="16" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {top + plot_h / 2:.1f})">{escape(y_label)}</text>'
    )
    styles = [
        f'fill="none" stroke="{_COLOURS[i % len(_COLOURS)]}" stroke-width="1.6"'
        + (f' stroke-dasharray="{_DASHES[i % len(_DASHES)]}"' if _DASHES[i % len(_DASHES)] else "")
        for i in range(len(series))
    ]
    for s, style in zip(series, styles, strict=True):
        runs: list[list[str]] = [[]]
        for x, y in zip(s.x, s.y, strict=True):
            if shown(y):
                runs[-1].append(f"{px(x):.1f},{py(math.log10(y) if log_y else y):.1f}")
            elif runs[-1]:
                runs.append([])
        out.extend(f'<polyline {style} points="{" ".join(run)}"/>' for run in runs if run)
    for index, (s, style) in enumerate(zip(series, styles, strict=True)):
        y = top + plot_h + bottom + 18 * index + 8
        out.append(f'<line x1="{left}" x2="{left + 28}" y1="{y - 4}" y2="{y - 4}" {style}/>')
        out.append(f'<text x="{left + 34}" y="{y}">{escape(s.label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# --- The measurements of docs/training.md -------------------------------------------------------


def _tail(values: Sequence[float], n: int = 20) -> float:
    """The mean of the last `n` values: the end of a noisy training curve."""
    return sum(values[-n:]) / len(values[-n:])


def _first_nonfinite(values: Sequence[float]) -> int | None:
    return next((i for i, v in enumerate(values) if not math.isfinite(v)), None)


def _loss(losses: Sequence[float]) -> dict[str, Any]:
    """What the tables say of a curve: the mean of its last 20 values, or the step it turned NaN."""
    nan = _first_nonfinite(losses)
    return {"nan_from_step": nan + 1} if nan is not None else {"tail": _tail(losses)}


def _write(out: Path, name: str, svg: str) -> None:
    (out / name).write_text(svg, encoding="utf-8")
    print(f"wrote {out / name}", file=sys.stderr)


MASTER_LABELS = {
    "fp32": "float32",
    "bf16-autocast": "float32 parameters, bf16 autocast",
    "fp16-autocast": "float32 parameters, fp16 autocast + GradScaler",
    "bf16-master": "bf16 model, float32 master copy",
    "bf16": "bf16 parameters, plain AdamW",
    "fp16": "fp16 parameters, plain AdamW",
}
ROPE_LABELS = {
    "fp32": "float32 inv_freq and positions",
    "bf16": "bf16 inv_freq x position ids (bf16 product)",
    "fp16": "fp16 inv_freq x position ids (fp16 product)",
    "bf16-buffer": "inv_freq rounded to bf16, float32 product",
}
SCORE_LABELS = {
    "fp32": "fp32 angles, cos/sin cast to bf16 (the fix)",
    "bf16": "bf16 angles",
    "fp16": "fp16 angles",
    "bf16-buffer": "bf16 inv_freq buffer, float32 product",
}
SCALING_LABELS = {"fp32": "float32", "fp16-scaler": "fp16 + GradScaler", "fp16": "fp16, no scaler"}
LRS = (1e-3, 1e-4, 1e-5)
POSITIONS = (100, 256, 1024, 2048, 4096, 8191)
QUERIES = (1024, 4096, 8192)
TOKENS = (1 << 16, 1 << 18, 1 << 20, 1 << 22)
WORLDS = (8, 64, 512)


def master_weights(out: Path, seed: int, steps: int) -> dict[str, Any]:
    runs = {
        (mode, lr): train_regression(mode, lr, steps, seed, scaler=mode == "fp16-autocast")
        for lr in LRS
        for mode in MASTER_LABELS
    }
    initial = torch.cat(
        [p.detach().flatten() for p in regression_model(seed).to(torch.bfloat16).parameters()]
    )
    series = [
        Series(MASTER_LABELS[mode], range(1, steps + 1), runs[mode, 1e-4].losses)
        for mode in ("fp32", "bf16-autocast", "bf16-master", "bf16")
    ]
    _write(
        out,
        "training-master-weights.svg",
        svg_chart(
            series,
            title="AdamW, lr 1e-4: bf16 parameters without float32 master weights",
            x_label="step",
            y_label="training loss (MSE)",
        ),
    )
    _write(
        out,
        "training-lost-updates.svg",
        svg_chart(
            [
                Series(f"bf16 parameters, lr {lr:g}", range(1, steps + 1), runs["bf16", lr].lost_updates)
                for lr in LRS
            ],
            title="Fraction of bf16 parameter elements that an AdamW step leaves unchanged",
            x_label="step",
            y_label="fraction of elements unchanged",
        ),
    )
    # A GradScaler under bfloat16 autocast: the same run with and without it; the faster of three
    # runs each, alternating, so that other load on the machine counts less.
    timings = {False: math.inf, True: math.inf}
    finals: dict[bool, RegressionRun] = {}
    for _ in range(3):
        for scaler in (False, True):
            start = time.perf_counter()
            finals[scaler] = train_regression("bf16-autocast", 1e-3, steps, seed, scaler=scaler)
            timings[scaler] = min(timings[scaler], time.perf_counter() - start)
    difference = max(
        (a - b).abs().max().item()
        for a, b in zip(finals[False].parameters, finals[True].parameters, strict=True)
    )
    return {
        "steps": steps,
        "runs": [
            {
                "lr": lr,
                "mode": mode,
                **_loss(run.losses),
                "lost_updates": sum(run.lost_updates) / steps,
                "lost_updates_first_50": _tail(run.lost_updates[:50], 50),
                "lost_updates_last_50": _tail(run.lost_updates, 50),
            }
            for (mode, lr), run in runs.items()
        ],
        "bf16_rounds_away_at_init_lr_1e-4": bf16_rounds_away(initial, 1e-4).float().mean().item(),
        "bf16_lost_at_step_1_lr_1e-4": runs["bf16", 1e-4].lost_updates[0],
        "scaler_under_bf16": {
            "largest_parameter_difference": difference,
            "best_of_3_s_without": timings[False],
            "best_of_3_s_with": timings[True],
        },
    }


def rotary(out: Path, seed: int, steps: int) -> dict[str, Any]:
    positions = torch.arange(8192)
    errors = {variant: rope_angle_error(variant, positions) for variant in ROPE_LABELS}
    _write(
        out,
        "training-rope-angle-error.svg",
        svg_chart(
            [Series(ROPE_LABELS[v], positions[1::8].tolist(), errors[v][1::8].tolist()) for v in ROPE_LABELS],
            title="Rotary angle error against the exact angle (largest over frequencies)",
            x_label="position",
            y_label="angle error (radians, modulo 2π)",
            log_y=True,
        ),
    )
    queries = list(range(128, 8193, 128))
    dtypes = {
        "fp32": torch.bfloat16,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "bf16-buffer": torch.bfloat16,
    }
    scores = {
        variant: rope_score_error(variant, queries, dtype, seed=seed) for variant, dtype in dtypes.items()
    }
    _write(
        out,
        "training-rope-score-error.svg",
        svg_chart(
            [Series(SCORE_LABELS[v], queries, errs) for v, errs in scores.items()],
            title="Attention score error: query at a position, keys spread over all before it",
            x_label="query position",
            y_label="mean |score error| / score std",
            log_y=True,
        ),
    )
    curves = {variant: train_previous_token(variant, steps, seed) for variant in ROPE_LABELS}
    _write(
        out,
        "training-rope-previous-token.svg",
        svg_chart(
            [Series(ROPE_LABELS[v], range(1, steps + 1), curves[v]) for v in ROPE_LABELS],
            title="One attention head learning to copy the previous token, positions in [0, 8192)",
            x_label="step",
            y_label="training loss (cross-entropy)",
        ),
    )
    return {
        "steps": steps,
        "angle_error": {v: {str(p): errors[v][p].item() for p in POSITIONS} for v in ROPE_LABELS},
        "score_error": {v: {str(q): errs[queries.index(q)] for q in QUERIES} for v, errs in scores.items()},
        "previous_token": {v: _loss(curves[v]) for v in ROPE_LABELS},
    }


def loss_scaling(out: Path, seed: int, steps: int) -> dict[str, Any]:
    runs = {
        (mode, n): train_classifier(mode, steps, seed, tokens_per_step=n)
        for n in TOKENS
        for mode in SCALING_LABELS
    }
    label = {
        "fp32": "float32",
        "fp16-scaler": "fp16 autocast + GradScaler",
        "fp16": "fp16 autocast, no scaler",
    }
    series = [
        Series(
            f"{label[mode]}, 2{str(n.bit_length() - 1).translate(_SUPERSCRIPT)} tokens per step",
            range(1, steps + 1),
            runs[mode, n].losses,
        )
        for mode, n in (("fp32", 1 << 22), ("fp16-scaler", 1 << 22), ("fp16", 1 << 20), ("fp16", 1 << 22))
    ]
    _write(
        out,
        "training-loss-scaling.svg",
        svg_chart(
            series,
            title="float16 autocast with and without loss scaling",
            x_label="step",
            y_label="training loss (cross-entropy)",
            log_y=True,
        ),
    )
    clipped = {
        (order, name): train_classifier("fp16-scaler", steps, seed, clip=order, optimizer_name=name)
        for name in ("sgd", "adamw")
        for order in ("after-unscale", "before-unscale")
    }
    _write(
        out,
        "training-clip-before-unscale.svg",
        svg_chart(
            [
                Series(
                    f"{name.upper() if name == 'sgd' else 'AdamW'}, clip {order.replace('-', ' ')}",
                    range(1, steps + 1),
                    run.losses,
                )
                for (order, name), run in clipped.items()
            ],
            title="fp16 autocast + GradScaler, clip_grad_norm_(max_norm=1.0) before or after unscale_",
            x_label="step",
            y_label="training loss (cross-entropy)",
            log_y=True,
        ),
    )
    return {
        "steps": steps,
        "runs": [
            {
                "tokens": n,
                "mode": mode,
                **_loss(run.losses),
                "zeroed_step_1": run.zeroed[0],
                "zeroed_mean": sum(run.zeroed) / steps,
                "cosine_step_1": run.cosine[0],
            }
            for (mode, n), run in runs.items()
        ],
        "clipping": [
            {
                "optimizer": name,
                "clip": order,
                **_loss(run.losses),
                "median_norm": sorted(run.clip_norms)[steps // 2],
            }
            for (order, name), run in clipped.items()
        ],
    }


def all_reduce() -> dict[str, dict[str, float]]:
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    return {name: {str(w): ring_mean_error(w, dtype) for w in WORLDS} for name, dtype in dtypes.items()}


# --- The page -----------------------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _loss_text(loss: dict[str, Any], digits: int = 4) -> str:
    if "nan_from_step" in loss:
        return f"NaN from step {loss['nan_from_step']}"
    return f"{loss['tail']:.{digits}f}"


def _find(rows: list[dict[str, Any]], **keys: Any) -> dict[str, Any]:
    return next(row for row in rows if all(row[k] == v for k, v in keys.items()))


def report(data: dict[str, Any]) -> dict[str, str]:
    """The blocks of docs/training.md, from the results `run` wrote."""
    meta, master, rope, scaling = data["meta"], data["master_weights"], data["rotary"], data["loss_scaling"]
    reduce = data["all_reduce"]
    mw = master["runs"]
    scaler = master["scaler_under_bf16"]
    extra = (scaler["best_of_3_s_with"] - scaler["best_of_3_s_without"]) / scaler["best_of_3_s_without"]

    def pct(value: float) -> str:
        return f"{value:.1%}".replace(".0%", "%") if value >= 0.1 else f"{value:.1%}"

    big = _find(scaling["runs"], tokens=1 << 22, mode="fp16")
    clip = {(row["optimizer"], row["clip"]): row for row in scaling["clipping"]}
    blocks = {
        "run": (
            "```bash\npython benchmarks/training_curves.py run      # the pictures into docs/images/, the results to "
            "benchmarks/training_curves.json\npython benchmarks/training_curves.py report --write   # the tables of this page\n```\n\n"
            f"Seed {data['seed']} for every run, one CPU thread, torch {meta['versions']['torch']}. Steps: "
            f"{master['steps']} for the master-weight runs, {rope['steps']} for the others. On a "
            f"{meta['cpus']}-core machine shared with other jobs ({docs_blocks.load_text(meta)}) the script took "
            f"{data['wall_s']:.0f} s of wall time ({data['cpu_s']:.0f} s of CPU time)."
        ),
        "summary": _table(
            ["Hazard", "Found by", "Without the fix", "With the fix", "float32"],
            [
                [
                    "bf16 parameters, plain AdamW, lr 1e-4",
                    "AMP016, AMP111",
                    f"loss {_loss_text(_find(mw, mode='bf16', lr=1e-4), 3)}, {pct(_find(mw, mode='bf16', lr=1e-4)['lost_updates'])} of updates lost",
                    _loss_text(_find(mw, mode="bf16-master", lr=1e-4), 3),
                    _loss_text(_find(mw, mode="fp32", lr=1e-4), 3),
                ],
                [
                    "fp16 parameters, plain AdamW, lr 1e-4",
                    "AMP016",
                    _loss_text(_find(mw, mode="fp16", lr=1e-4)),
                    _loss_text(_find(mw, mode="fp16-autocast", lr=1e-4), 3),
                    _loss_text(_find(mw, mode="fp32", lr=1e-4), 3),
                ],
                [
                    "rotary angles in bf16, previous-token task",
                    "AMP017",
                    f"loss {_loss_text(rope['previous_token']['bf16'], 3)}",
                    _loss_text(rope["previous_token"]["fp32"], 3),
                    _loss_text(rope["previous_token"]["fp32"], 3),
                ],
                [
                    "rotary angles in fp16, same task",
                    "AMP017",
                    f"loss {_loss_text(rope['previous_token']['fp16'], 3)}",
                    _loss_text(rope["previous_token"]["fp32"], 3),
                    _loss_text(rope["previous_token"]["fp32"], 3),
                ],
                [
                    "fp16 autocast without loss scaling, 2^22 tokens per step",
                    "AMP009, `trace --backward --values`",
                    f"loss {_loss_text(big, 3)}, {pct(big['zeroed_step_1'])} of gradient elements zero at step 1",
                    _loss_text(_find(scaling["runs"], tokens=1 << 22, mode="fp16-scaler"), 3),
                    _loss_text(_find(scaling["runs"], tokens=1 << 22, mode="fp32"), 3),
                ],
                [
                    f"GradScaler under bf16 autocast, {master['steps']} steps",
                    "AMP018",
                    f"{extra:.0%} more time (CPU, best of 3)",
                    "bit-identical parameters without it"
                    if scaler["largest_parameter_difference"] == 0
                    else f"parameters differ by up to {scaler['largest_parameter_difference']:.2g} without it",
                    "",
                ],
                [
                    "`clip_grad_norm_` before `unscale_`, SGD",
                    "AMP019",
                    f"loss {_loss_text(clip['sgd', 'before-unscale'], 3)}",
                    _loss_text(clip["sgd", "after-unscale"], 3),
                    "",
                ],
                [
                    "the same with AdamW",
                    "AMP019",
                    f"loss {_loss_text(clip['adamw', 'before-unscale'], 3)}",
                    _loss_text(clip["adamw", "after-unscale"], 3),
                    "",
                ],
                [
                    "gradients all-reduced in bf16, 512 ranks (emulated)",
                    "AMP020",
                    f"{reduce['bfloat16']['512']:.1%} error in the mean",
                    "",
                    f"{reduce['float32']['512']:.2g}",
                ],
            ],
        ),
        "master-initial": (
            f"At initialisation that is {master['bf16_rounds_away_at_init_lr_1e-4']:.1%} of this model's weights, and "
            f"{master['bf16_lost_at_step_1_lr_1e-4']:.1%} of the elements were unchanged by the first step."
        ),
        "master-weights": _table(
            [
                "lr",
                "run",
                f"loss (last 20 of {master['steps']} steps)",
                "updates lost",
                "lost, first 50 steps",
                "lost, last 50 steps",
            ],
            [
                [f"1e-{-round(math.log10(row['lr']))}", MASTER_LABELS[row["mode"]], _loss_text(row)]
                + (
                    ["-", "-", "-"]
                    if "nan_from_step" in row
                    else [
                        f"{row[k]:.1%}"
                        for k in ("lost_updates", "lost_updates_first_50", "lost_updates_last_50")
                    ]
                )
                for row in mw
            ],
        ),
        "rope-angles": _table(
            ["angles"] + [f"position {p}" for p in POSITIONS],
            [
                [ROPE_LABELS[v]] + [f"{rope['angle_error'][v][str(p)]:.2g}" for p in POSITIONS]
                for v in ROPE_LABELS
            ],
        ),
        "rope-scores": _table(
            ["attention score error (score std)"] + [f"query at {q}" for q in QUERIES],
            [
                [SCORE_LABELS[v]] + [f"{rope['score_error'][v][str(q)]:.3f}" for q in QUERIES]
                for v in SCORE_LABELS
            ],
        ),
        "rope-training": _table(
            ["rotary angles", f"loss (last 20 of {rope['steps']} steps)"],
            [[ROPE_LABELS[v], _loss_text(rope["previous_token"][v], 3)] for v in ROPE_LABELS],
        ),
        "loss-scaling": _table(
            [
                "tokens per step",
                "run",
                f"loss (last 20 of {scaling['steps']})",
                "gradient elements zeroed, step 1",
                "zeroed, mean over steps",
                "cosine with float32 gradient, step 1",
            ],
            [
                [
                    f"2^{row['tokens'].bit_length() - 1}",
                    SCALING_LABELS[row["mode"]],
                    _loss_text(row),
                    f"{row['zeroed_step_1']:.1%}",
                    f"{row['zeroed_mean']:.1%}",
                    f"{row['cosine_step_1']:.3f}",
                ]
                for row in scaling["runs"]
            ],
        ),
        "scaler-timing": (
            (
                "The parameters at the end are bit-identical"
                if scaler["largest_parameter_difference"] == 0
                else f"The parameters at the end differ by up to {scaler['largest_parameter_difference']:.2g}"
            )
            + f", and the run with the scaler took {scaler['best_of_3_s_with']:.2f} s against {scaler['best_of_3_s_without']:.2f} s (best "
            f"of three each, {extra:.0%} more on CPU, {docs_blocks.load_text(meta)}; the GPU synchronisation is not "
            "measured here)."
        ),
        "clipping": _table(
            [
                "optimizer",
                "`clip_grad_norm_(max_norm=1.0)`",
                f"loss (last 20 of {scaling['steps']})",
                "median norm it returned",
            ],
            [
                [
                    {"sgd": "SGD", "adamw": "AdamW"}[row["optimizer"]],
                    f"{row['clip'].split('-')[0]} `unscale_`",
                    _loss_text(row),
                    f"{row['median_norm']:.3g}",
                ]
                for row in scaling["clipping"]
            ],
        ),
        "all-reduce": _table(
            ["reduce dtype"] + [f"{w} ranks" for w in WORLDS],
            [[name] + [f"{errors[str(w)]:.2g}" for w in WORLDS] for name, errors in reduce.items()],
        ),
    }
    return blocks


def main() -> None:
    parser, commands = docs_blocks.script_parser(__doc__)
    go = commands.add_parser("run")
    go.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "images")
    go.add_argument("--seed", type=int, default=0)
    go.add_argument("--steps-scale", type=float, default=1.0, help="multiply every run's steps")
    go.add_argument("--output", type=Path, default=RESULTS)
    docs_blocks.add_report(commands, RESULTS, PAGE)
    args = parser.parse_args()
    if args.command == "report":
        docs_blocks.report_args(args, PAGE, "training_curves", report)
        return
    torch.set_num_threads(1)  # the same reductions in the same order on every run
    args.out.mkdir(parents=True, exist_ok=True)
    meta = docs_blocks.machine(("torch",))
    start, cpu = time.perf_counter(), time.process_time()
    data: dict[str, Any] = {"seed": args.seed}
    for section, run_steps in ((master_weights, 1000), (rotary, 300), (loss_scaling, 300)):
        data[section.__name__] = section(args.out, args.seed, max(1, round(run_steps * args.steps_scale)))
    data["all_reduce"] = all_reduce()
    data["wall_s"], data["cpu_s"] = time.perf_counter() - start, time.process_time() - cpu
    docs_blocks.save(args.output, {"meta": docs_blocks.finished(meta), **data})


if __name__ == "__main__":
    main()
