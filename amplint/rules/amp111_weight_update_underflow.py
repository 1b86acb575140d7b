"""AMP111: half-precision weights too large for their optimizer updates, which round away."""

from __future__ import annotations

from collections.abc import Iterator
from types import MappingProxyType
from typing import TYPE_CHECKING

from amplint.rule import GraphFinding, RuntimeRule
from amplint.runtime.chains import HALF, where
from amplint.runtime.formats import lost_from, lost_updates
from amplint.runtime.graph import Magnitudes
from amplint.runtime.numbers import share as percent

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode, Source

# A finding names this many parameters, then counts the rest.
_NAMED = 3


class WeightUpdateUnderflow(RuntimeRule):
    """
    ## What it does
    Runs on a values replay of a training run (`amplint trace --values --backward`, or with `--lr`
    or `lost-update-fraction` given: an inference model has no updates to lose). For every trainable parameter held in
    bfloat16 or float16, counts the elements whose update by one Adam step would round away: Adam's
    normalised step is about the learning rate (`--lr`, default 1e-4) in magnitude, and a weight `w`
    keeps an update only when it exceeds half a unit in the last place of `|w|` in the parameter's
    dtype. bfloat16 keeps 8 significant bits, so an update below about 2^-9 |w| is lost: at lr 1e-4,
    every weight with |w| >= 2^-5 (0.031), a norm's weights of 1.0 among them. Fires where at least
    `lost-update-fraction` (default 0.1) of the elements lose their updates, once for the
    parameters first used at one place of the model.

    ## Why is this bad?
    The optimizer computes the step, and `w - lr * step` rounds back to `w`: those weights stop
    training while the loss still falls on the others, and nothing reports it. Training with the
    model itself in bfloat16 and an optimizer without float32 master copies does this (torchtune
    0.6.1's single-device full fine-tuning in bf16 keeps "all activations, gradients and optimizer
    states in bfloat16", `recipes/full_finetune_single_device.py:59`); a learning rate that decays
    freezes more weights the lower it goes. The share is measured on the factory's weights: a
    checkpoint's (`--weights`) says what fine-tuning it meets.

    ## Example
    ```python
    model = Model().to(torch.bfloat16)  # the weights themselves in bfloat16
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)  # steps below 2^-9 |w| vanish
    ```

    ## Fix
    Keep the parameters in float32 and run the forward pass under autocast (bf16 compute, float32
    master weights: `with torch.autocast("cuda", dtype=torch.bfloat16):`), or use an optimizer that
    keeps float32 master copies or compensates the rounding: Kahan summation
    (`AnyPrecisionAdamW(use_kahan_summation=True)`), stochastic rounding (torchao's
    `AdamW(bf16_stochastic_round=True)`).

    ## References
    - Micikevicius et al., Mixed Precision Training (float32 master weights): https://arxiv.org/abs/1710.03740
    - Zamirai et al., Revisiting BFloat16 Training (Kahan summation, stochastic rounding): https://arxiv.org/abs/2010.06192
    """

    code = "AMP111"
    name = "weight-update-underflow"
    summary = "bf16/fp16 parameters whose Adam updates at the learning rate round away on real weights"
    # The examples build their models in the dtype they train in, which the trace keeps.
    example_trace = MappingProxyType({"values": True, "backward": True})

    @classmethod
    def check_graph(cls, graph: DtypeGraph) -> Iterator[GraphFinding]:
        values = graph.values
        if values is None or not values.limits.weight_updates:
            return  # an inference run (no backward traced, no learning rate asked for) updates nothing
        lr, limit = values.limits.lr, values.limits.lost_update_fraction
        used: dict[Source, list[tuple[str, DtypeNode, Magnitudes]]] = {}
        for name, node_id in graph.parameters.items():
            parameter, weights = graph.node(node_id), values.weights.get(node_id)
            user = next((n for n in graph.consumers(parameter) if n.source is not None), None)
            if parameter.dtype in HALF and weights is not None and user is not None and user.source:
                used.setdefault(user.source, []).append((name, user, weights))
        for found in used.values():
            count = sum(weights.count for _, _, weights in found)
            lost = {name: lost_updates(weights, _dtype(graph, name), lr) for name, _, weights in found}
            share = sum(lost.values()) / max(count, 1)
            if share < limit:
                continue
            name, user, weights = max(found, key=lambda item: lost[item[0]] / max(item[2].count, 1))
            dtype = _dtype(graph, name)
            binade = lost_from(dtype, lr)
            yield GraphFinding(
                user,
                f"the updates of {percent(share)} of the elements of {_names([n for n, _, _ in found])} "
                f"({dtype}) round away at lr {lr:g}: half a {dtype} ulp of |w| exceeds {lr:g} for "
                f"|w| >= 2^{binade} ({2.0**binade:.3g}) (limit {percent(limit)})",
                evidence=(
                    f"replayed on the factory's weights: {sum(lost.values()):,} of {count:,} elements of the "
                    f"parameters first used at {where(user)} hold |w| >= 2^{binade}; `{name}` loses "
                    f"{percent(lost[name] / max(weights.count, 1))} of its updates"
                ),
                help=(
                    "keep the parameters in float32 and run the forward under autocast (float32 master "
                    "weights), or use an optimizer with float32 master copies, Kahan summation or "
                    "stochastic rounding"
                ),
                extra={"lost_updates": round(share, 4), "lr": lr, "parameters": [n for n, _, _ in found]},
            )


def _dtype(graph: DtypeGraph, name: str) -> str:
    return graph.node(graph.parameters[name]).dtype or ""


def _names(names: list[str]) -> str:
    shown = ", ".join(f"`{name}`" for name in names[:_NAMED])
    return shown if len(names) <= _NAMED else f"{shown} and {len(names) - _NAMED} more"
