"""The runtime pass: trace a model under autocast and record the dtype every op ran in.

`amplint.runtime.graph` is plain data and imports nothing heavy; `trace` needs torch
(`pip install 'amplint[runtime]'`).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from amplint.runtime.graph import DtypeGraph, DtypeNode, NodeValues, Source, ValueLimits, Values

# torch warns at import when NumPy is absent; tracing never needs NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

if TYPE_CHECKING:
    from amplint.runtime.graph import TraceError
    from amplint.runtime.tracer import replay, trace
    from amplint.runtime.values import ReplayError

__all__ = [
    "DtypeGraph",
    "DtypeNode",
    "NodeValues",
    "ReplayError",
    "Source",
    "TraceError",
    "ValueLimits",
    "Values",
    "replay",
    "trace",
]


def __getattr__(name: str) -> Any:
    # torch is imported only when tracing is asked for.
    if name in {"trace", "replay", "TraceError"}:
        from amplint.runtime import tracer

        return getattr(tracer, name)
    if name == "ReplayError":
        from amplint.runtime import values

        return values.ReplayError
    raise AttributeError(name)
