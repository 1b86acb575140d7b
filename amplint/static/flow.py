"""Forward dataflow inside one function: which values derive from a seed expression, and where
they end up (a sink call, a name, a recurrence). Straight-line and approximate on purpose: loop
bodies run twice so a value can reach an earlier statement of the loop, assignments inside a
branch add to what a name may hold instead of replacing it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import libcst as cst

from amplint.static.scopes import Scope, suite_body

Origins = frozenset[cst.CSTNode]
_EMPTY: Origins = frozenset()
# Attributes that describe a tensor rather than carry its values.
_METADATA_ATTRS = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout"})
_METADATA_METHODS = frozenset(
    {"size", "dim", "numel", "item", "tolist", "data_ptr", "stride", "element_size"}
)


@dataclass(frozen=True)
class Hit:
    """A seed's value reached a sink. `kind` is `call` (e.g. `exp`), `name` (bound to a telling
    name) or `recurrence` (multiplied into a state inside a loop); `label` names it."""

    origin: cst.CSTNode
    sink: cst.CSTNode
    kind: str
    label: str


@dataclass
class Policy:
    """What a rule tracks. Every callback receives the flow, to look up what a name was bound to."""

    seed: Callable[[cst.BaseExpression, Flow], bool]
    sink: Callable[[cst.BaseExpression, Flow], str | None] = lambda node, flow: None
    blocks: Callable[[cst.BaseExpression, Flow], bool] = lambda node, flow: False
    # Whether binding a seed-derived value to this name (from this expression) is itself the hazard.
    name_sink: Callable[[str, cst.CSTNode], bool] = lambda name, value: False
    recurrence: bool = False
    # A seed-derived value leaves the function's locals: returned, yielded or stored on an attribute.
    leaves: Callable[[cst.CSTNode, Origins, Flow], None] = lambda node, origins, flow: None


@dataclass
class Flow:
    policy: Policy
    env: dict[str, Origins] = field(default_factory=dict)
    # Every expression (or augmented assignment) bound to a name so far, oldest first.
    history: dict[str, list[cst.CSTNode]] = field(default_factory=dict)
    hits: dict[tuple[cst.CSTNode, cst.CSTNode, str], Hit] = field(default_factory=dict)
    # Names bound from scratch earlier in the current loop iteration (they carry no state).
    fresh: set[str] = field(default_factory=set)
    # What was written into constant slices of a name (`coord[:, 0:2] = x.sigmoid()`), by slice:
    # a read of a slice that none of them overlaps (`coord[:, 2].exp()`) does not carry it.
    parts: dict[str, list[tuple[Box, Origins]]] = field(default_factory=dict)

    # -- what a name holds -------------------------------------------------------------------
    def resolve(self, node: cst.BaseExpression, depth: int = 4) -> cst.BaseExpression:
        """Follow `x = <expr>` bindings so predicates see what a name stands for."""
        while depth and isinstance(node, cst.Name):
            bound = self.history.get(node.value)
            if not bound or not isinstance(bound[-1], cst.BaseExpression) or bound[-1] is node:
                break
            node, depth = bound[-1], depth - 1
        return node

    def _record(self, name: str, value: cst.CSTNode) -> None:
        self.history.setdefault(name, []).append(value)

    # -- expressions -------------------------------------------------------------------------
    def taint(self, node: cst.CSTNode) -> Origins:
        if not isinstance(node, cst.BaseExpression):
            return _EMPTY
        policy = self.policy
        if policy.seed(node, self):
            self._visit_children(node)  # a seed nested in a seed still reaches its own sinks
            return frozenset({node})
        if isinstance(node, cst.Name):
            return self.env.get(node.value, _EMPTY).union(*(o for _, o in self.parts.get(node.value, ())))
        if (
            isinstance(node, cst.Subscript)
            and isinstance(node.value, cst.Name)
            and node.value.value in self.parts
        ):
            box = _box(node)
            whole = self.env.get(node.value.value, _EMPTY)
            return whole.union(*(o for part, o in self.parts[node.value.value] if _overlap(box, part)))
        if isinstance(node, cst.Attribute) and node.attr.value in _METADATA_ATTRS:
            self.taint(node.value)
            return _EMPTY
        if isinstance(node, (cst.Lambda, cst.BaseComp)):
            return _EMPTY
        origins = self._visit_children(node)
        label = policy.sink(node, self)
        if label is not None and origins:
            for origin in origins:
                self._hit(Hit(origin, node, "call", label))
            return _EMPTY
        if (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in _METADATA_METHODS
        ):
            return _EMPTY
        if isinstance(node, cst.Comparison) or policy.blocks(node, self):
            return _EMPTY
        return origins

    def _visit_children(self, node: cst.BaseExpression) -> Origins:
        origins: set[cst.CSTNode] = set()
        for child in value_children(node):
            origins |= self.taint(child)
        return frozenset(origins)

    def _hit(self, hit: Hit) -> None:
        self.hits.setdefault((hit.origin, hit.sink, hit.kind), hit)

    # -- statements --------------------------------------------------------------------------
    def run(self, body: Iterable[cst.BaseStatement], *, loop: bool = False, branch: bool = False) -> None:
        for statement in body:
            self._statement(statement, loop=loop, branch=branch)

    def _statement(self, node: cst.BaseStatement, *, loop: bool, branch: bool) -> None:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                self._small(small, loop=loop, branch=branch)
        elif isinstance(node, cst.If):
            self.taint(node.test)
            self.run(suite_body(node.body), loop=loop, branch=True)
            if node.orelse is not None:
                orelse = node.orelse
                self._statement(orelse, loop=loop, branch=True) if isinstance(orelse, cst.If) else self.run(
                    suite_body(orelse.body), loop=loop, branch=True
                )
        elif isinstance(node, (cst.For, cst.While)):
            if isinstance(node, cst.For):
                self._bind(node.target, self.taint(node.iter), None, loop=True, branch=True)
            else:
                self.taint(node.test)
            outer = self.fresh
            for _ in range(2):
                self.fresh = set()
                self.run(suite_body(node.body), loop=True, branch=True)
            self.fresh = outer
            if node.orelse is not None:
                self.run(suite_body(node.orelse.body), loop=loop, branch=True)
        elif isinstance(node, cst.With):
            for item in node.items:
                origins = self.taint(item.item)
                if item.asname is not None:
                    self._bind(item.asname.name, origins, item.item, loop=loop, branch=branch)
            self.run(suite_body(node.body), loop=loop, branch=branch)
        elif isinstance(node, cst.Try):
            self.run(suite_body(node.body), loop=loop, branch=True)
            for handler in node.handlers:
                self.run(suite_body(handler.body), loop=loop, branch=True)
            for extra in (node.orelse, node.finalbody):
                if extra is not None:
                    self.run(suite_body(extra.body), loop=loop, branch=True)

    def _small(self, node: cst.BaseSmallStatement, *, loop: bool, branch: bool) -> None:
        if isinstance(node, cst.Assign):
            origins = self.taint(node.value)
            for target in node.targets:
                self._bind(target.target, origins, node.value, loop=loop, branch=branch)
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            self._bind(node.target, self.taint(node.value), node.value, loop=loop, branch=branch)
        elif isinstance(node, cst.AugAssign):
            origins = self.taint(node.value)
            if isinstance(node.target, cst.Name):
                name = node.target.value
                # `h *= sigmoid(h)` is an activation (SiLU), not a decay of a carried state.
                decays = isinstance(node.operator, cst.MultiplyAssign) and name not in names_read(node.value)
                if origins and loop and self.policy.recurrence and decays and name not in self.fresh:
                    for origin in origins:
                        self._hit(Hit(origin, node, "recurrence", name))
                self.env[name] = self.env.get(name, _EMPTY) | origins
                self._record(name, node)
                self._name_hits(name, origins, node, node)
            else:
                self.taint(node.target)
        elif isinstance(node, (cst.Expr, cst.Return)) and node.value is not None:
            origins = self.taint(node.value)
            if origins and isinstance(node, cst.Return):
                self.policy.leaves(node.value, origins, self)

    def _bind(
        self,
        target: cst.BaseExpression,
        origins: Origins,
        value: cst.BaseExpression | None,
        *,
        loop: bool,
        branch: bool,
    ) -> None:
        if isinstance(target, cst.Name):
            name = target.value
            if loop and self.policy.recurrence and value is not None:
                for origin in self._multiplied_into(name, value):
                    self._hit(Hit(origin, target, "recurrence", name))
            self.env[name] = (self.env.get(name, _EMPTY) | origins) if branch else origins
            if not branch:
                self.parts.pop(name, None)
            if value is not None:
                self._record(name, value)
                if loop and name not in names_read(value):
                    self.fresh.add(name)
            self._name_hits(name, origins, target, value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            values: list[cst.BaseExpression | None] = [None] * len(target.elements)
            if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(target.elements):
                values = [element.value for element in value.elements]
            for element, element_value in zip(target.elements, values, strict=True):
                # `a, i = logits.float().topk(k)`: each name derives from the whole right-hand side.
                element_origins = self.taint(element_value) if element_value is not None else origins
                bound = element_value if element_value is not None else value
                self._bind(element.value, element_origins, bound, loop=loop, branch=branch)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, origins, None, loop=loop, branch=branch)
        elif isinstance(target, cst.Attribute) and origins:
            self.policy.leaves(value if value is not None else target, origins, self)
        elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
            # `out[:, t] = value` adds to what `out` holds; to that slice, where it is constant.
            name = target.value.value
            box = _box(target)
            if box is None:
                self.env[name] = self.env.get(name, _EMPTY) | origins
            elif origins:
                self.parts.setdefault(name, []).append((box, origins))

    def _name_hits(self, name: str, origins: Origins, where: cst.CSTNode, value: cst.CSTNode | None) -> None:
        if origins and value is not None and self.policy.name_sink(name, value):
            for origin in origins:
                self._hit(Hit(origin, where, "name", name))

    def _multiplied_into(self, name: str, value: cst.BaseExpression) -> Iterator[cst.CSTNode]:
        """Origins of the factors that decay a carried state in `name = name * w + ...`. A factor
        computed from the state itself (`h * sigmoid(h)`, a SiLU) is an activation, not a decay;
        a name already rebound earlier in the same iteration carries nothing across steps."""
        if name in self.fresh:
            return
        stack: list[cst.CSTNode] = [value]
        while stack:
            node = stack.pop()
            stack.extend(value_children(node))
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
                for state, factor in ((node.left, node.right), (node.right, node.left)):
                    if name in names_read(state) and name not in names_read(factor):
                        yield from self.taint(factor)


# A constant index, one (start, stop) per dimension; None where one is not a constant.
Box = tuple[tuple[int, float], ...] | None


def _box(node: cst.Subscript) -> Box:
    """`x[:, 0:2, 3]` -> ((0, inf), (0, 2), (3, 4)); None for anything but non-negative integer
    indices and slices without a step (`x[i]`, `x[..., 0]`, `x[-1]`)."""
    box: list[tuple[int, float]] = []
    for element in node.slice:
        index = element.slice
        if isinstance(index, cst.Index):
            if not isinstance(index.value, cst.Integer):
                return None
            at = int(index.value.value, 0)
            box.append((at, at + 1))
        elif isinstance(index, cst.Slice) and index.step is None:
            bounds = [index.lower, index.upper]
            if not all(b is None or isinstance(b, cst.Integer) for b in bounds):
                return None
            low = int(bounds[0].value, 0) if isinstance(bounds[0], cst.Integer) else 0
            high = int(bounds[1].value, 0) if isinstance(bounds[1], cst.Integer) else float("inf")
            box.append((low, high))
        else:
            return None
    return tuple(box)


def _overlap(one: Box, other: Box) -> bool:
    """Whether two constant indices may share an element (unknown ones may)."""
    if one is None or other is None or len(one) != len(other):
        return True
    return all(a < d and c < b for (a, b), (c, d) in zip(one, other, strict=True))


def value_children(node: cst.CSTNode) -> Iterator[cst.BaseExpression]:
    """The sub-expressions whose values flow into `node`'s value. Spelled out per node type:
    libcst's generic `children` re-runs a visitor on every call, which dominated the run time."""
    if isinstance(node, cst.Name):
        return
    if isinstance(node, cst.Attribute):
        yield node.value
    elif isinstance(node, cst.Call):
        yield node.func
        for arg in node.args:
            yield arg.value
    elif isinstance(node, (cst.BinaryOperation, cst.BooleanOperation)):
        yield node.left
        yield node.right
    elif isinstance(node, cst.UnaryOperation):
        yield node.expression
    elif isinstance(node, cst.Subscript):
        yield node.value
    elif isinstance(node, (cst.Tuple, cst.List, cst.Set)):
        for element in node.elements:
            yield element.value
    elif isinstance(node, cst.Dict):
        for item in node.elements:
            if isinstance(item, cst.DictElement):
                yield item.value
    elif isinstance(node, cst.IfExp):
        yield node.body
        yield node.orelse
    elif isinstance(node, cst.Comparison):
        yield node.left
        for target in node.comparisons:
            yield target.comparator
    elif isinstance(node, (cst.Await, cst.StarredElement)):
        yield node.expression if isinstance(node, cst.Await) else node.value
    elif isinstance(node, cst.NamedExpr):
        yield node.value
    elif isinstance(node, (cst.BaseNumber, cst.BaseString, cst.Ellipsis, cst.Lambda, cst.BaseComp)):
        return
    else:
        yield from (child for child in node.children if isinstance(child, cst.BaseExpression))


def names_read(node: cst.CSTNode) -> set[str]:
    """Variable names read by an expression (attribute names and keywords excluded)."""
    names: set[str] = set()
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            names.add(current.value)
        else:
            stack.extend(value_children(current))
    return names


def analyse(scope: Scope, policy: Policy) -> Flow:
    flow = Flow(policy)
    flow.run(scope.body)
    return flow


def analyse_all(scopes: Iterable[Scope], policy: Policy) -> list[Hit]:
    hits: list[Hit] = []
    for scope in scopes:
        hits.extend(analyse(scope, policy).hits.values())
    return hits
