"""The dtype-facts engine: for each expression of a file, which floating dtypes its value can have
there, and the evidence for it.

An abstract interpretation over the libcst tree, one function at a time, on demand. A `Fact` is a
set of possible dtypes (float64, float32, bfloat16, float16) with the chain of steps that produced
it: the autocast region and its dtype, the `.half()` or `.to(...)`, the `dtype=` argument, the op
that autocast upcasts, the parameter whose dtype the caller picks. Values are followed through
assignments, tuple unpacking, comprehensions, `self` attributes, branches (joined) and loops (run
twice); calls of the file's own functions and methods are analysed with the facts of their
arguments, and a function's parameters hold what every call of it in the file passes (a method's,
the calls in classes related to its own; when the file never calls it, float32 where every call in
the project's other files passes float32, else whatever the caller picks: the project's precision
profile).

Each op's result follows PyTorch: casts and `dtype=` set it, factories make float32, type promotion
widens (a float32 operand promotes a bfloat16 product), and under autocast the CUDA or CPU policy
of `amplint.static.ops` decides. Code outside any autocast region of the file may still run under
the caller's autocast, so both possibilities are kept.

Rules ask this engine; none reasons about dtypes itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import libcst as cst

from amplint.static import ops
from amplint.static.autocast import AUTOCAST, autocast_settings
from amplint.static.engine.calls import MODEL_LOADERS, CallFacts
from amplint.static.engine.interpret import literal_number
from amplint.static.engine.state import Frame
from amplint.static.facts import (
    DTYPE,
    MAX_WHY,
    OFF,
    OTHER,
    SHORT_NAMES,
    TENSOR,
    UNKNOWN_FACT,
    Autocast,
    Fact,
    Float16,
    Step,
    shorten,
)
from amplint.static.flow import names_read
from amplint.static.ops import F16
from amplint.static.parsed import ParsedFile
from amplint.static.scopes import walk


class DtypeFacts(CallFacts):
    """The facts of one file. `of(expr)` answers for any expression; the function that holds it is
    analysed the first time one of its expressions is asked about."""

    _plain: DtypeFacts | None = None

    # -- questions rules ask ---------------------------------------------------------------------
    def without_caller_autocast(self) -> DtypeFacts:
        """The facts of this file when the caller enables no autocast (a model run in its weights'
        dtype): code outside the file's own autocast regions runs with autocast off. Each answer
        then holds for one world, where `of` joins both (a float32 product that the caller's
        autocast would lower no longer makes the softmax after it look half)."""
        if not self.caller_autocast or self.profile.modes:
            return self  # with execution modes, the worlds are theirs: no guessed caller autocast
        if self._plain is None:
            self._plain = DtypeFacts(self.ctx, caller_autocast=False)
        return self._plain

    def autocast_at(self, node: cst.CSTNode) -> frozenset[Autocast]:
        """The autocast states the statement holding `node` can run under (OFF among them)."""
        self.of(node)
        if node not in self._states:  # an assignment target: the statement's expressions tell
            node = next((n for n in self.nodes_on(self.line(node)) if n in self._states), node)
        return self._states.get(node, self._default_entry(node))

    def computed_under(self, expr: cst.BaseExpression) -> frozenset[Autocast]:
        """The autocast states the value of `expr` was computed under: where it stands, and where
        each value it derives from in its function was bound (`loss = out.loss` after
        `with torch.autocast(...): out = model(x)`)."""
        return frozenset().union(*(self.autocast_at(value) for value in self._derived(expr)))

    def mentions_dtype(self, expr: cst.BaseExpression) -> bool:
        """Whether the value of `expr` follows a dtype: some part of it, or of a value it derives
        from in its function, names one (`enabled=dtype == torch.float16`, `args.amp != "bf16"`)."""
        return any(
            self.dtype_value(node).kind == DTYPE
            for value in self._derived(expr)
            for node in walk(value)
            if isinstance(node, cst.BaseExpression)
        )

    def _derived(self, expr: cst.BaseExpression) -> list[cst.BaseExpression]:
        """`expr` and the values bound, in its function, to the names it reads, transitively."""
        scope = self.ctx.scope_of(expr)
        bound: dict[str, list[cst.BaseExpression]] = {}
        for node in walk(scope) if scope is not None else ():
            targets: list[cst.BaseExpression] = []
            value: cst.BaseExpression | None = None
            if isinstance(node, cst.Assign):
                targets, value = [target.target for target in node.targets], node.value
            elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.NamedExpr)):
                targets, value = [node.target], node.value
            if value is None or self.ctx.scope_of(value) is not scope:
                continue
            for target in targets:
                for bound_name in walk(target):
                    if isinstance(bound_name, cst.Name):
                        bound.setdefault(bound_name.value, []).append(value)
        found, todo, seen = [expr], list(names_read(expr)), set()
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                values = bound.get(name, [])
                found.extend(values)
                todo.extend(read for value in values for read in names_read(value))
        return found

    def under_cuda_autocast(self, node: cst.CSTNode) -> bool:
        """Whether `node` surely runs under an enabled CUDA autocast region of this file."""
        states = self.autocast_at(node)
        return bool(states) and all(s.device == "cuda" and s.where is not None for s in states)

    def autocast_states(self, call: cst.CSTNode) -> frozenset[Autocast] | None:
        """The states inside `with call:` wherever the call stands (a `with` item, a decorator,
        `ctx = torch.autocast("cuda") if amp else nullcontext()`); None for a call that is no
        autocast context."""
        if not isinstance(call, cst.Call):
            return None
        self.of(call)
        return self._autocast_of(call, Frame(dict(self._module_constants()), frozenset({OFF})), self.of)

    def describe(self, why: Iterable[Step], shown: cst.CSTNode) -> str:
        """Evidence in one line for a message that quotes `shown`: the steps outside it, with their
        line where it is another than `shown`'s."""
        inside = set(walk(shown))
        line = self.line(shown)
        return "; ".join(
            step.text + ("" if self.line(step.node) == line else f" (line {self.line(step.node)})")
            for step in why
            if step.node not in inside
        )

    def dtype_value(self, expr: cst.BaseExpression) -> Fact:
        """The dtype a `dtype=`/`torch_dtype=` value names (`torch.float16`, `"fp16"`, a variable or
        a conditional holding them), of kind DTYPE; UNKNOWN for what names none (a device, a
        tensor, a dtype the caller picks)."""
        fact = self.of(expr)
        if fact.kind in (DTYPE, OTHER) and fact.dtypes and not fact.caller:
            return replace(fact, kind=DTYPE)
        return UNKNOWN_FACT

    def _dtype_not_named(self, call: cst.Call) -> bool:
        """An autocast whose `dtype=` names no dtype this code picks (`dtype=net.dtype`, cellpose's
        bf16 or float32 model): float16 there is the caller's choice, as for a loader's `dtype=`."""
        dtype = next(
            (a.value for a in call.args if a.keyword is not None and a.keyword.value == "dtype"), None
        )
        return dtype is not None and not self.dtype_value(dtype).dtypes

    def float16_dtype(self, expr: cst.BaseExpression) -> Float16 | None:
        """`dtype_value(expr)` as a float16 setting, where float16 is among the dtypes it names."""
        fact = self.dtype_value(expr)
        if F16 not in fact.dtypes:
            return None
        return Float16(expr, shorten(self.ctx.code(expr)), False, fact.dtypes == {F16}, fact.why)

    def float16_setting(self, node: cst.CSTNode) -> Float16 | None:
        """How a call makes a model run in float16, or None: a cast (`.half()`, `.to(dtype)`,
        `.type(dtype)`), `torch_dtype=` (any call) or `dtype=` (a loader: `from_pretrained`,
        `from_config`, `pipeline`, ...) naming float16, the same as the entry of a keyword dict
        (`{"torch_dtype": dtype}`), or an enabled float16 autocast (which `torch.autocast("cuda")`
        is by default)."""
        key = node.key if isinstance(node, cst.DictElement) else None
        if isinstance(node, cst.DictElement) and isinstance(key, cst.SimpleString):
            if key.evaluated_value not in ("torch_dtype", "dtype"):
                return None
            found = self.float16_dtype(node.value)
            return found and replace(found, node=node, spelled=f"{key.value}: {found.spelled}")
        if not isinstance(node, cst.Call):
            return None
        states = self.autocast_states(node)
        if states is not None:
            dtypes = {state.dtype for state in states if state.device and state.dtype}
            if F16 not in dtypes or _unknown_wrapper(self.ctx, node) or self._dtype_not_named(node):
                return None
            spelled = shorten(self.ctx.code(node))
            names = "/".join(SHORT_NAMES[d] for d in ops.FLOATS if d in dtypes)
            when = " where enabled" if OFF in states else ""
            step = Step(node, f"`{spelled}` autocasts to {names}{when}")
            surely = all(state.device and state.dtype == F16 for state in states)
            return Float16(node, spelled, True, surely, (step,))
        func = node.func
        attr = func.attr.value if isinstance(func, cst.Attribute) else None
        method = attr if self.ctx.qualified(func) is None else None
        if method == "half" and not node.args:
            return Float16(node, ".half()", False, True, (Step(node, "`.half()` makes it fp16"),))
        loader = attr in MODEL_LOADERS or self.ctx.qualified(func) in _PIPELINES
        for arg in node.args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            if arg.star or not (
                keyword == "torch_dtype"
                or (keyword == "dtype" and (loader or method in ("to", "type")))
                or (keyword is None and method in ("to", "type"))
            ):
                continue
            fact = self.dtype_value(arg.value)
            if F16 in fact.dtypes:
                code = shorten(self.ctx.code(arg.value))
                spelled = f"{keyword}={code}" if keyword is not None else code
                spelled = f".{method}({spelled})" if method in ("to", "type") else spelled
                names = "/".join(SHORT_NAMES[d] for d in ops.FLOATS if d in fact.dtypes)
                why = (*fact.why[-(MAX_WHY - 1) :], Step(node, f"`{spelled}` makes the model {names}"))
                return Float16(node, spelled, False, fact.dtypes == {F16}, why)
        return None

    def number(self, node: cst.BaseExpression) -> float | None:
        """The value of a Python number: a literal, `-1e9`, `float("-inf")`, a module constant, a
        parameter's default, or `self.eps` set from one in `__init__`."""
        # A literal's value needs no analysis of the function around it (the rules ask of every
        # `masked_fill(mask, 0)`).
        literal, sign = node, 1.0
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
            literal, sign = node.expression, -1.0 if isinstance(node.operator, cst.Minus) else 1.0
        if isinstance(literal, (cst.Integer, cst.Float)):
            return sign * literal_number(literal)
        return self.of(node).number

    def nodes_on(self, line: int) -> list[cst.BaseExpression]:
        """The expressions that start on `line`, outermost first."""
        found: list[cst.BaseExpression] = []
        for top in self.ctx.module.body:
            where = self.ctx.position(top)
            if where.start.line <= line <= where.end.line:
                found.extend(
                    node
                    for node in walk(top)
                    if isinstance(node, cst.BaseExpression)
                    and not isinstance(node, cst.BaseString)
                    and self.ctx.position(node).start.line == line
                )
        return found

    def explain_line(self, line: int) -> list[tuple[str, Fact]]:
        """Every tensor or dtype expression that starts on `line`, outermost first, with its fact."""
        rows = [(" ".join(self.ctx.code(node).split()), self.of(node)) for node in self.nodes_on(line)]
        return [(code, fact) for code, fact in rows if fact.kind in (TENSOR, DTYPE)]


_PIPELINES = frozenset({"transformers.pipeline"})


def _unknown_wrapper(ctx: ParsedFile, call: cst.Call) -> bool:
    """A project's or library's own autocast that names no dtype (`accelerator.autocast(enabled=
    True)`): what it autocasts to is set elsewhere, so it says nothing about float16."""
    return ctx.qualified(call.func) not in AUTOCAST and autocast_settings(ctx, call)[1] is None
