"""The dtype graph: what the runtime tracer hands to rules and reports. Plain data, no torch.

Each node is one aten op of the traced forward pass (and, for `amplint trace --backward`, of the
backward pass after it), with the dtype it produced, the dtypes it read, the autocast policy that
decided its dtype, the user's source line and the module it ran in.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
FLOATING = frozenset({"float64", "float32", "bfloat16", "float16"})  # the dtype names of floats

# How a node's output dtype was decided.
POLICIES = (
    "lower_precision",  # autocast ran the op in the autocast dtype (matmul, linear, conv, sdpa)
    "fp32",  # autocast ran the op in float32 (exp, log, pow, softplus, norms)
    "fp32_set_opt_dtype",  # float32 unless the call asked for a dtype (softmax, sum, cumsum)
    "promote",  # autocast promoted mixed inputs to the widest dtype (cat, stack, index_put)
    "inherited",  # not on any autocast list: the output keeps the input dtype (sigmoid, tanh, add)
    "explicit_cast",  # the user's `.float()` / `.to(dtype)`
    "autocast_cast",  # a cast autocast inserted in front of a listed op
    "input",  # a placeholder: a parameter, buffer or argument
    # A backward op that casts a gradient to the dtype its forward value had (the gradient of a cast:
    # a float32 parameter's gradient leaves the bfloat16 matmul that read the parameter this way).
    "autograd_cast",
)
LOSS_MODULE = "(loss)"  # the module of the loss's ops (`--backward`), which no module of the model runs


@dataclass(frozen=True)
class Source:
    path: str
    line: int
    column: int | None = None


@dataclass
class DtypeNode:
    id: int
    op: str  # short name: "exp", "mm", "_to_copy"
    target: str  # the aten overload: "aten.exp.default"
    dtype: str | None  # output dtype ("bfloat16"), the first one for ops with several; None if no tensor
    input_dtypes: list[str | None]
    shape: list[int] | None
    policy: str
    source: Source | None
    module: str | None  # "model.layers.3.self_attn"
    inputs: list[int] = field(default_factory=list)  # ids of the producer nodes
    # For the ops of a `scaled_dot_product_attention` call: the kernel the GPU runs it on
    # ("flash", "efficient", "cudnn", or "math": torch's decomposition).
    attention: str | None = None
    # "backward" for the ops autograd ran (their source and module are those of the forward op they
    # differentiate); placeholders, the forward and the loss are "forward".
    phase: str = "forward"


@dataclass
class NodeValues:
    """What one op produced when the graph was replayed on real tensors, against a float64 replay of
    the same graph from the same inputs and weights (the reference). Fractions are of the op's
    elements; errors cover the positions where both values are finite."""

    low: float  # the smallest and largest finite value (0 and 0 when none is)
    high: float
    inf: float  # fraction of elements that are +-inf, and NaN
    nan: float
    overflow: float  # fraction non-finite here but finite in the reference
    reference_nan: float  # fraction NaN in the reference itself
    underflow: float  # fraction of the reference's non-zero values below the dtype's normal range, zero here
    error: float  # relative error against the reference, norm-wise: |value - ref| / |ref|
    error_max: float  # the largest element-wise relative error (see `amplint.runtime.cpu_replay`)
    local_error: float  # norm-wise error of the op run in its dtype from the reference's inputs
    # log2(finfo.max / largest magnitude), in bits, left out the values the reference puts at the
    # dtype's largest by design (a mask from `finfo.min`); None when all are zero.
    headroom: float | None

    @property
    def absmax(self) -> float:
        return max(abs(self.low), abs(self.high))


@dataclass
class Magnitudes:
    """How many elements of a tensor lie in each binade: `exponents[e]` counts the finite non-zero
    elements with 2^e <= |x| < 2^(e+1). Enough to say, for any power of two, how many lie below it,
    which is what rounding to a float format and a power-of-two loss scale decide."""

    exponents: dict[int, int]
    zeros: int
    nonfinite: int

    @property
    def nonzero(self) -> int:
        return sum(self.exponents.values())

    @property
    def count(self) -> int:
        return self.nonzero + self.zeros + self.nonfinite

    def below(self, exponent: int) -> int:
        """Finite non-zero elements smaller than 2^exponent in magnitude."""
        return sum(n for e, n in self.exponents.items() if e < exponent)

    def __add__(self, other: Magnitudes) -> Magnitudes:
        exponents = dict(self.exponents)
        for e, n in other.exponents.items():
            exponents[e] = exponents.get(e, 0) + n
        return Magnitudes(exponents, self.zeros + other.zeros, self.nonfinite + other.nonfinite)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Magnitudes:
        exponents = {int(e): n for e, n in data["exponents"].items()}
        return cls(exponents=exponents, zeros=data["zeros"], nonfinite=data["nonfinite"])


@dataclass
class ValueLimits:
    """When the value rules speak: within `headroom_bits` of the dtype's largest value (AMP106), at
    least `underflow_fraction` of non-zero values flushed to zero (AMP107), an output whose relative
    error exceeds `error_threshold`, and the `error_top` ops that contribute most to it (AMP108); a
    parameter whose Adam update at learning rate `lr` rounds away in at least
    `lost_update_fraction` of its elements (AMP111)."""

    headroom_bits: float = 2.0
    underflow_fraction: float = 0.01
    error_threshold: float = 0.01
    error_top: int = 3
    lr: float = 1e-4
    lost_update_fraction: float = 0.1
    # AMP111 judges optimizer updates: only for a training run (a backward traced) or when asked
    # (`lr` or `lost-update-fraction` given); an inference model has no updates to lose.
    weight_updates: bool = False


@dataclass
class Values:
    """The values replay of a graph (`amplint trace --values`): per node id, and what it could not do."""

    nodes: dict[int, NodeValues] = field(default_factory=dict)
    outputs: list[int] = field(default_factory=list)  # ids of the nodes the forward pass returned
    limits: ValueLimits = field(default_factory=ValueLimits)
    stopped_at: int | None = None  # the node whose op raised, ending the replay (e.g. multinomial)
    stopped: str | None = None  # what it raised
    notes: list[str] = field(default_factory=list)  # e.g. a NaN in the float64 reference: a model bug
    peak_bytes: int | None = None  # the largest resident set of the process during the replay
    # The magnitudes of each trainable bfloat16 or float16 parameter (by its placeholder's node id),
    # and of each parameter's gradient in the float64 reference (by the gradient's node id): the
    # gradient without any rounding, which a loss-scaled float16 run tries to keep.
    weights: dict[int, Magnitudes] = field(default_factory=dict)
    gradients: dict[int, Magnitudes] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Values:
        return cls(
            nodes={int(key): NodeValues(**value) for key, value in data["nodes"].items()},
            outputs=data["outputs"],
            limits=ValueLimits(**data["limits"]),
            stopped_at=data.get("stopped_at"),
            stopped=data.get("stopped"),
            notes=data.get("notes", []),
            peak_bytes=data.get("peak_bytes"),
            weights={int(k): Magnitudes.from_dict(v) for k, v in data.get("weights", {}).items()},
            gradients={int(k): Magnitudes.from_dict(v) for k, v in data.get("gradients", {}).items()},
        )


@dataclass
class DtypeGraph:
    nodes: list[DtypeNode]
    device: str  # "cuda" or "cpu": whose autocast policy
    dtype: str  # the autocast dtype
    autocast: bool
    param_dtype: str | None
    torch_version: str
    emulated: bool = False  # CUDA autocast reproduced on fake CUDA tensors without a GPU
    gpu: str | None = None  # the GPU emulated ("a100", see amplint.runtime.gpu)
    model: str | None = None  # the class of the traced module ("Qwen2ForCausalLM"), or the function's name
    notes: list[str] = field(default_factory=list)  # what the trace changed or assumed, for the report
    # Relative error at autocast's late upcasts, by cast node id, from replaying the graph on the
    # factory's real inputs and weights: `max`, `mean` (as traced) and `fixed_max`, `fixed_mean` (with
    # the chain before the cast computed in float32); and why nothing was measured, if so.
    measured: dict[int, dict[str, float]] = field(default_factory=dict)
    measure_note: str | None = None
    # What the replays ran on, in words for the messages: a factory's own inputs and weights, or
    # inputs made up for a model built from its config or class with the weights it initialised.
    replayed_on: str = "the factory's inputs and weights"
    # For a CUDA trace: the dtype each op produced when the same model was traced under CPU
    # autocast, by `op_key`; empty when no CPU trace was made.
    cpu_dtypes: dict[str, str | None] = field(default_factory=dict)
    # Real values of every op from `amplint trace --values` (None: not replayed); `values_note` says
    # why there are none when they were asked for.
    values: Values | None = None
    values_note: str | None = None
    # The trainable parameters of a traced module, by name (`model.layers.0.mlp.up_proj.weight`):
    # the node id of each one's placeholder.
    parameters: dict[str, int] = field(default_factory=dict)
    # For `--backward`: the loss differentiated, in words, and each parameter's gradient: the node
    # that produced it (a parameter the loss does not reach has none).
    loss: str | None = None
    gradients: dict[str, int] = field(default_factory=dict)

    def node(self, node_id: int) -> DtypeNode:
        return self.nodes[node_id]

    def producers(self, node: DtypeNode) -> list[DtypeNode]:
        return [self.nodes[i] for i in node.inputs]

    def consumers(self, node: DtypeNode) -> list[DtypeNode]:
        index: dict[int, list[DtypeNode]] | None = getattr(self, "_consumers", None)
        if index is None:  # built once: rules walk chains of consumers
            index = {}
            for other in self.nodes:
                for producer in dict.fromkeys(other.inputs):
                    index.setdefault(producer, []).append(other)
            self._consumers = index
        return index.get(node.id, [])

    def find(
        self, op: str | None = None, *, line: int | None = None, path: str | None = None
    ) -> list[DtypeNode]:
        """Nodes by short op name and/or source line (path matched by suffix)."""
        return [
            n
            for n in self.nodes
            if (op is None or n.op == op)
            and (line is None or (n.source is not None and n.source.line == line))
            and (path is None or (n.source is not None and n.source.path.endswith(path)))
        ]

    def summary(self) -> dict[str, Any]:
        ops = [n for n in self.nodes if n.policy != "input" and n.phase == "forward"]
        per_dtype = Counter(n.dtype for n in ops if n.dtype is not None and n.policy not in _CASTS)
        casts = Counter(f"{n.input_dtypes[0]}->{n.dtype}" for n in ops if n.policy == "autocast_cast")
        summary: dict[str, Any] = {
            "ops": len(ops),
            "ops_per_dtype": dict(sorted(per_dtype.items())),
            "ops_without_tensor": sum(1 for n in ops if n.dtype is None and n.policy not in _CASTS),
            "autocast_casts": sum(casts.values()),
            "autocast_casts_by_direction": dict(sorted(casts.items())),
            "explicit_casts": sum(1 for n in ops if n.policy == "explicit_cast"),
            "fp32_islands": [n.id for n in self.fp32_islands()],
        }
        backward = [n for n in self.nodes if n.phase == "backward"]
        if backward:
            per_dtype = Counter(
                n.dtype for n in backward if n.dtype is not None and n.policy != "autograd_cast"
            )
            summary["backward_ops"] = len(backward)
            summary["backward_ops_per_dtype"] = dict(sorted(per_dtype.items()))
            summary["backward_ops_without_tensor"] = sum(
                1 for n in backward if n.dtype is None and n.policy != "autograd_cast"
            )
            summary["autograd_casts"] = sum(1 for n in backward if n.policy == "autograd_cast")
        return summary

    def fp32_islands(self) -> list[DtypeNode]:
        """Ops computing in float32 inside a low-precision autocast region: an fp32-policy op fed
        by an autocast upcast, or an op that inherits float32 from an explicit upcast."""
        if not self.autocast:
            return []
        return [
            n
            for n in self.nodes
            if n.dtype == "float32"
            and n.phase == "forward"
            and n.policy in {"fp32", "fp32_set_opt_dtype", "inherited", "promote"}
            and any(self.nodes[i].policy in _CASTS for i in n.inputs)
        ]

    def forward(self) -> DtypeGraph:
        """The model's forward pass alone, which the rules read: the graph itself when no backward
        was traced, else a copy without the loss, the backward and their values. The model's nodes
        come first, so their ids stay the same."""
        end = next(
            (n.id for n in self.nodes if n.phase == "backward" or n.module == LOSS_MODULE), len(self.nodes)
        )
        if end == len(self.nodes):
            return self
        kept = self.nodes[:end]
        ids = {node.id for node in kept}
        values = self.values
        if values is not None:
            values = replace(
                values,
                nodes={i: v for i, v in values.nodes.items() if i in ids},
                outputs=[i for i in values.outputs if i in ids],
                stopped_at=values.stopped_at if values.stopped_at in ids else None,
                stopped=values.stopped if values.stopped_at in ids else None,
                gradients={},
            )
        return replace(self, nodes=kept, values=values, gradients={})

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["format_version"] = FORMAT_VERSION
        data["summary"] = self.summary()
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DtypeGraph:
        nodes = [
            DtypeNode(**{**raw, "source": Source(**raw["source"]) if raw.get("source") else None})
            for raw in data["nodes"]
        ]
        fields = {k: data[k] for k in ("device", "dtype", "autocast", "param_dtype", "torch_version")}
        measured = {int(key): value for key, value in data.get("measured", {}).items()}
        return cls(
            parameters=data.get("parameters", {}),
            loss=data.get("loss"),
            gradients=data.get("gradients", {}),
            nodes=nodes,
            emulated=data.get("emulated", False),
            gpu=data.get("gpu"),
            model=data.get("model"),
            notes=data.get("notes", []),
            measured=measured,
            measure_note=data.get("measure_note"),
            replayed_on=data.get("replayed_on", cls.replayed_on),
            cpu_dtypes=data.get("cpu_dtypes", {}),
            values=Values.from_dict(data["values"]) if data.get("values") else None,
            values_note=data.get("values_note"),
            **fields,
        )

    def op_keys(self) -> dict[int, str]:
        """A key per op that another trace of the same model shares: its source line, its op and how
        many ops of that kind the line ran before it (`model.py:67:exp:3`). Node ids differ between
        traces under different policies (other casts are inserted); these keys do not."""
        seen: Counter[tuple[str, int, str]] = Counter()
        keys: dict[int, str] = {}
        for node in self.nodes:
            if node.source is None or node.policy in {"input", "autocast_cast"}:
                continue
            where = (node.source.path, node.source.line, node.op)
            keys[node.id] = f"{where[0]}:{where[1]}:{where[2]}:{seen[where]}"
            seen[where] += 1
        return keys

    def differences_from(self, saved: DtypeGraph) -> list[str]:
        """What differs from a graph of the same model saved by another torch version: the ops
        only one of them has, and those whose dtype changed (by `op_keys`); empty for the same one."""
        if saved.torch_version == self.torch_version:
            return []
        # By id: a saved `amplint trace --op` output holds only some of the nodes.
        saved_dtypes = {node.id: node.dtype for node in saved.nodes}
        before = {key: saved_dtypes[i] for i, key in saved.op_keys().items()}
        after = {key: self.nodes[i].dtype for i, key in self.op_keys().items()}
        changed = sorted(key for key in before.keys() & after.keys() if before[key] != after[key])
        notes = [
            f"the saved graph was traced on torch {saved.torch_version}, this one on {self.torch_version}: "
            f"the model was traced again and the values are this version's; "
            f"{len(before.keys() - after.keys())} op(s) only in the saved graph, "
            f"{len(after.keys() - before.keys())} only in this one, {len(changed)} with another dtype"
        ]
        return notes + [f"{key}: {before[key]} then, {after[key]} now" for key in changed[:10]]

    @classmethod
    def load(cls, path: str | Path) -> DtypeGraph:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


_CASTS = frozenset({"explicit_cast", "autocast_cast"})


class TraceError(Exception):
    """The model could not be traced; the message says why and what to do."""


_FRAME = re.compile(r'File "(?P<path>.+)", line (?P<line>\d+), in .*@(?P<column>\d+|-)\s*$', re.M)


def source_of(stack_trace: str | None) -> Source | None:
    """The user's source line in a node's recorded stack trace (see `_user_frames`)."""
    if not stack_trace:
        return None
    match = _FRAME.search(stack_trace)
    if match is None:
        return None
    column = match.group("column")
    return Source(match.group("path"), int(match.group("line")), None if column == "-" else int(column))
