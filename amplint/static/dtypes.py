"""The dtype-facts engine: for each expression of a file, which floating dtypes its value can have
there, and the evidence for it.

An abstract interpretation over the libcst tree, one function at a time, on demand. A `Fact` is a
set of possible dtypes (float64, float32, bfloat16, float16) with the chain of steps that produced
it: the autocast region and its dtype, the `.half()` or `.to(...)`, the `dtype=` argument, the op
that autocast upcasts, the parameter whose dtype the caller picks. Values are followed through
assignments, tuple unpacking, comprehensions, `self` attributes, branches (joined) and loops (run
twice); calls of the file's own functions and methods are analysed with the facts of their
arguments, and a function's parameters hold what every call of it in the file passes (a method's,
the calls in classes related to its own; when the file never calls it, whatever the caller picks:
the project's precision profile).

Each op's result follows PyTorch: casts and `dtype=` set it, factories make float32, type promotion
widens (a float32 operand promotes a bfloat16 product), and under autocast the CUDA or CPU policy
of `amplint.static.ops` decides. Code outside any autocast region of the file may still run under
the caller's autocast, so both possibilities are kept.

Rules ask this engine; none reasons about dtypes itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import libcst as cst

from amplint.static import constants, ops
from amplint.static.autocast import autocast_call, autocast_settings
from amplint.static.flow import names_read
from amplint.static.imports import dotted_name
from amplint.static.ops import BF16, F16, F32, F64, HALF
from amplint.static.profile import AUTOCAST, CALLER, CAST, ModeWhy, Profile
from amplint.static.scopes import named_params, suite_body, walk

if TYPE_CHECKING:
    from amplint.static.context import FileContext

# What kind of value an expression holds.
TENSOR, DTYPE, SCALAR, INTEGER, MODULE, OTHER, UNKNOWN = (
    "tensor",
    "dtype",
    "scalar",
    "integer",
    "module",
    "other",
    "unknown",
)
_ORDER = {F64: 3, F32: 2, BF16: 1, F16: 1}
# How a finding says that its half dtype is only the caller's choice (`Fact.caller`): a finding that
# says so in a project with no execution mode is conditional (`amplint.rules.runner`).
CALLER_CLAUSE = "this holds when the caller runs it in"
_SHORT = {F64: "float64", F32: "float32", BF16: "bf16", F16: "fp16"}


@dataclass(frozen=True)
class Step:
    """One piece of evidence: what happened at `node`."""

    node: cst.CSTNode
    text: str


@dataclass(frozen=True)
class Fact:
    """What an expression can hold. For a tensor (or a dtype object), `dtypes` are the floating
    dtypes it can have; empty when nothing is known. `caller` marks half dtypes that come only from
    the caller's choice (a parameter, a model's weights), not from this code. `number` is the value
    of a Python number when it is known; `items` the facts of a tuple's elements."""

    kind: str
    dtypes: frozenset[str] = frozenset()
    why: tuple[Step, ...] = ()
    caller: bool = False
    number: float | None = None
    items: tuple[Fact, ...] | None = None
    module: str | None = None  # the constructor of a submodule (`Linear`)
    # An autocast context object (`ctx = torch.autocast(...)`): the states inside `with ctx:`.
    context: frozenset[Autocast] | None = None

    @property
    def may_be_half(self) -> bool:
        return self.kind == TENSOR and bool(self.dtypes & HALF)

    @property
    def may_be_fp16(self) -> bool:
        return self.kind == TENSOR and F16 in self.dtypes

    @property
    def is_wide(self) -> bool:
        """Known to be float32 or float64 whatever the caller does."""
        return bool(self.dtypes) and not self.dtypes & HALF

    def half_names(self) -> str:
        return "/".join(_SHORT[d] for d in (BF16, F16) if d in self.dtypes)

    def names(self) -> str:
        """`float32/bf16`: the dtypes it can have, or `unknown`."""
        return "/".join(_SHORT[d] for d in ops.FLOATS if d in self.dtypes) or "unknown"

    def explain(self) -> str:
        """`bf16/fp16 here: ...` in one line, the evidence in source order."""
        steps = "; ".join(step.text for step in self.why)
        return f"{self.names()} here" + (f": {steps}" if steps else "")


UNKNOWN_FACT = Fact(UNKNOWN)
_SCALAR = Fact(SCALAR)
_INTEGER = Fact(INTEGER)
_OTHER = Fact(OTHER)
_MAX_WHY = 4
_MAX_DEPTH = 3  # calls of the file's own functions followed inside each other


def _modes_text(profile: Profile, modes: tuple[ModeWhy, ...]) -> str:
    """`cast-bf16: `.half()` at gen.py:6 -> GPT`: execution modes as evidence, the best two."""
    shown = "; ".join(why.describe() for why in modes[:2])
    more = len(modes) - 2
    only = profile.only_in(modes)
    return (
        shown + (f" (+{more} more)" if more > 0 else "") + (f"; in the project's {only} only" if only else "")
    )


def join(facts: Iterable[Fact]) -> Fact:
    """What a value holds when it may come from any of `facts` (branches, call sites)."""
    facts = list(facts)
    if any(fact.context is not None for fact in facts):
        # An autocast context on some paths (`autocast(...) if amp else nullcontext()`): entering
        # what the others hold leaves the autocast state as it was.
        states = (fact.context if fact.context is not None else {_KEEP} for fact in facts)
        return Fact(OTHER, context=frozenset().union(*states))
    facts = [fact for fact in facts if fact.kind != UNKNOWN] or facts
    if not facts:
        return UNKNOWN_FACT
    first = facts[0]
    if len(facts) == 1 or all(fact == first for fact in facts):
        return first  # the same in every branch: `__class__` keeps its `module`
    kinds = {fact.kind for fact in facts}
    kind = first.kind if len(kinds) == 1 else TENSOR if TENSOR in kinds else UNKNOWN
    numbers = {fact.number for fact in facts}
    why: list[Step] = []
    for fact in facts:
        why.extend(step for step in fact.why if step.text not in {w.text for w in why})
    return Fact(
        kind,
        frozenset().union(*(fact.dtypes for fact in facts)),
        tuple(why[-_MAX_WHY:]),
        all(fact.caller for fact in facts if fact.dtypes & HALF) and any(f.caller for f in facts),
        numbers.pop() if len(numbers) == 1 else None,
    )


def promote(facts: Iterable[Fact]) -> Fact:
    """PyTorch's type promotion of tensor operands: the widest floating dtype wins; Python numbers
    and integer tensors do not change a floating result."""
    tensors = [fact for fact in facts if fact.kind in (TENSOR, UNKNOWN)]
    known = [fact for fact in tensors if fact.kind == TENSOR and fact.dtypes]
    if not known:
        return tensors[0] if tensors else _SCALAR
    if len(known) == 1:
        return known[0]
    # What some combination of the operands' possible dtypes promotes to, without enumerating the
    # combinations (exponential in the number of operands): float64 if any operand may be float64;
    # float32 if every operand may be at most float32 and one may be float32, or if all may be half
    # and two different operands may be bf16 and fp16; a half dtype if every operand may be it.
    sets = [fact.dtypes for fact in known]
    result: set[str] = {F64} if any(F64 in d for d in sets) else set()
    if all(d - {F64} for d in sets) and any(F32 in d for d in sets):
        result.add(F32)
    result.update(half for half in HALF if all(half in d for d in sets))
    bf16 = {i for i, d in enumerate(sets) if BF16 in d}
    fp16 = {i for i, d in enumerate(sets) if F16 in d}
    if all(d & HALF for d in sets) and bf16 and fp16 and len(bf16 | fp16) > 1:
        result.add(F32)
    why: list[Step] = []
    for fact in known:
        why.extend(step for step in fact.why if step not in why)
    caller = any(fact.caller for fact in known) and not any(
        fact.dtypes & HALF and not fact.caller for fact in known
    )
    return Fact(TENSOR, frozenset(result), tuple(why[-_MAX_WHY:]), caller)


def agree(facts: Iterable[Fact], node: cst.CSTNode, op: str) -> Fact:
    """The operands of an op that raises on mixed dtypes (`matmul`, `linear`, `conv2d`): the code
    runs only where they share a dtype, so each holds only the dtypes the others may hold too
    (`k @ state` with `k` float32 and `state` float32 or the caller's: float32)."""
    facts = list(facts)
    known = [fact for fact in facts if fact.kind == TENSOR and fact.dtypes]
    common = frozenset.intersection(*(fact.dtypes for fact in known)) if len(known) > 1 else frozenset()
    promoted = promote(facts)
    if not common or common == promoted.dtypes:
        return promoted
    why = next((fact.why for fact in known if fact.dtypes == common), promoted.why)
    names = "/".join(_SHORT[d] for d in ops.FLOATS if d in common)
    step = Step(node, f"`{op}` raises on mixed dtypes, so its operands are {names} where it runs")
    caller = all(fact.caller for fact in known if fact.dtypes & common & HALF) and bool(common & HALF)
    return Fact(TENSOR, common, (*why[-(_MAX_WHY - 1) :], step), caller)


@dataclass(frozen=True)
class Autocast:
    """One autocast state code can run under: `device` None means autocast is off."""

    device: str | None
    dtype: str | None = None
    where: cst.CSTNode | None = None
    # The execution mode (from elsewhere in the project) that enables it, where no region here does.
    mode: ModeWhy | None = None


OFF = Autocast(None)
# In a joined autocast context: the paths that enter another context manager, which keeps the state.
_KEEP = Autocast(None, "unchanged")


@dataclass(frozen=True)
class Float16:
    """How code makes a model run in float16 (`DtypeFacts.float16_setting`): `spelled` for a
    message (`.half()`, `torch_dtype=dtype`, `torch.autocast("cuda")`); `autocast` for an autocast
    region rather than the weights; `surely` where float16 is what runs on a CUDA GPU, not one of
    the dtypes that a choice made at run time picks from (`torch.float16 if fp16 else
    torch.float32`, `autocast(enabled=amp)`); `why` the evidence; `node` the call or value that sets
    it."""

    node: cst.CSTNode
    spelled: str
    autocast: bool
    surely: bool
    why: tuple[Step, ...]


@dataclass
class _Frame:
    """The state of one function's interpretation."""

    env: dict[str, Fact]
    autocast: frozenset[Autocast]
    returns: list[Fact] = field(default_factory=list)
    depth: int = 0


class DtypeFacts:
    """The facts of one file. `of(expr)` answers for any expression; the function that holds it is
    analysed the first time one of its expressions is asked about."""

    def __init__(self, ctx: FileContext, *, caller_autocast: bool = True) -> None:
        self.ctx = ctx
        self.profile: Profile = getattr(ctx, "profile", None) or CALLER
        self.caller_autocast = caller_autocast  # False: only this file's own autocast regions
        self._plain: DtypeFacts | None = None
        self._facts: dict[cst.CSTNode, Fact] = {}
        self._states: dict[cst.CSTNode, frozenset[Autocast]] = {}
        self._done: set[cst.CSTNode] = set()
        self._scope_of: dict[cst.CSTNode, cst.FunctionDef | cst.Module] | None = None
        self._definition_of: dict[cst.CSTNode, str] | None = None  # node -> its top-level definition
        self._module_env: dict[str, Fact] | None = None
        self._classes: dict[str, cst.ClassDef] = {}
        self._class_of: dict[cst.FunctionDef, cst.ClassDef] = {}
        self._ancestry: dict[cst.ClassDef, list[cst.ClassDef]] = {}  # `_ancestors`
        self._functions: dict[str, list[cst.FunctionDef]] = {}
        self._call_sites: dict[str, list[tuple[cst.Call, cst.FunctionDef | cst.Module]]] | None = None
        self._aliases: dict[cst.FunctionDef, dict[str, str]] = {}  # local name -> the file's function
        self._params: dict[cst.FunctionDef, dict[str, Fact]] = {}
        self._entry: dict[cst.FunctionDef, frozenset[Autocast]] = {}
        self._attributes: dict[tuple[str, str], Fact] = {}
        self._reading: set[tuple[str, str]] = set()  # attributes whose `__init__` value is being read
        self._built: dict[cst.FunctionDef, bool] = {}  # methods that run only while a module is built
        self._returns: dict[tuple[cst.FunctionDef, tuple[Fact, ...]], Fact] = {}
        self._active: set[cst.FunctionDef] = set()
        self._framework: str | None = None
        self._index_definitions()

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

    def of(self, node: cst.CSTNode) -> Fact:
        """The fact of an expression (UNKNOWN for one the engine never reached)."""
        fact = self._facts.get(node)
        if fact is None:
            scope = self.scope_of(node)
            if scope is not None and scope not in self._done:
                self._analyse(scope)
                fact = self._facts.get(node)
        return fact or UNKNOWN_FACT

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
        scope = self.scope_of(expr)
        bound: dict[str, list[cst.BaseExpression]] = {}
        for node in walk(scope) if scope is not None else ():
            targets: list[cst.BaseExpression] = []
            value: cst.BaseExpression | None = None
            if isinstance(node, cst.Assign):
                targets, value = [target.target for target in node.targets], node.value
            elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.NamedExpr)):
                targets, value = [node.target], node.value
            if value is None or self.scope_of(value) is not scope:
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
        return self._autocast_of(call, _Frame(dict(self._module_constants()), frozenset({OFF})), self.of)

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

    def float16_dtype(self, expr: cst.BaseExpression) -> Float16 | None:
        """`dtype_value(expr)` as a float16 setting, where float16 is among the dtypes it names."""
        fact = self.dtype_value(expr)
        if F16 not in fact.dtypes:
            return None
        return Float16(expr, shorten(self.ctx.code(expr)), False, fact.dtypes == {F16}, fact.why)

    def _guard_skips(self, test: cst.BaseExpression) -> frozenset[str] | None:
        """The dtypes for which a dtype test (`x.dtype == torch.float16`, `dtype not in (torch.float32,
        torch.float64)`, `or`/`and`/`not` of those) is false; None for any other test."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self._guard_skips(test.expression)
            return None if inner is None else frozenset(ops.FLOATS) - inner
        if isinstance(test, cst.BooleanOperation):
            left, right = self._guard_skips(test.left), self._guard_skips(test.right)
            if left is None or right is None:
                return None
            return left & right if isinstance(test.operator, cst.Or) else left | right
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            return None
        target = test.comparisons[0]
        value = self._facts.get(target.comparator, UNKNOWN_FACT)
        items = value.items if value.items is not None else (value,)
        if not items or not all(item.kind == DTYPE and len(item.dtypes) == 1 for item in items):
            return None
        named = frozenset().union(*(item.dtypes for item in items))
        if isinstance(target.operator, (cst.In, cst.Equal)):
            return frozenset(ops.FLOATS) - named
        if isinstance(target.operator, (cst.NotIn, cst.NotEqual)):
            return named
        return None

    def _guarded(self, node: cst.IfExp, branches: list[Fact]) -> list[Fact]:
        """The branches of `x.float() if x.dtype != torch.float32 else x`: a branch that is a name
        the dtype test reads holds there only the dtypes for which the test takes it (`x` is
        float32 in the `else`)."""
        skipped = self._guard_skips(node.test)
        if skipped is None:
            return branches
        read = names_read(node.test)
        kept = []
        taken = (
            (node.body, branches[0], frozenset(ops.FLOATS) - skipped),
            (node.orelse, branches[1], skipped),
        )
        for branch, fact, dtypes in taken:
            if isinstance(branch, cst.Name) and branch.value in read and fact.kind == TENSOR and fact.dtypes:
                fact = replace(fact, dtypes=fact.dtypes & dtypes)
                if not fact.dtypes:
                    continue  # the test never takes this branch with a tensor of its dtypes
            kept.append(fact)
        return kept or branches

    def _on_gpu(self, test: cst.BaseExpression) -> int | None:
        """The branch of `if torch.cuda.is_available():` (0: the body, 1: the other) that runs on a
        CUDA GPU, where the hazards are; None for any other test."""
        negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
        inner = test.expression if isinstance(test, cst.UnaryOperation) and negated else test
        if (
            isinstance(inner, cst.Call)
            and not inner.args
            and self.ctx.qualified(inner.func) == "torch.cuda.is_available"
        ):
            return 1 if negated else 0
        return None

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
            if F16 not in dtypes:
                return None
            spelled = shorten(self.ctx.code(node))
            names = "/".join(_SHORT[d] for d in ops.FLOATS if d in dtypes)
            when = " where enabled" if OFF in states else ""
            step = Step(node, f"`{spelled}` autocasts to {names}{when}")
            surely = all(state.device and state.dtype == F16 for state in states)
            return Float16(node, spelled, True, surely, (step,))
        func = node.func
        attr = func.attr.value if isinstance(func, cst.Attribute) else None
        method = attr if self.ctx.qualified(func) is None else None
        if method == "half" and not node.args:
            return Float16(node, ".half()", False, True, (Step(node, "`.half()` makes it fp16"),))
        loader = attr in _MODEL_LOADERS or self.ctx.qualified(func) in _PIPELINES
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
                names = "/".join(_SHORT[d] for d in ops.FLOATS if d in fact.dtypes)
                why = (*fact.why[-(_MAX_WHY - 1) :], Step(node, f"`{spelled}` makes the model {names}"))
                return Float16(node, spelled, False, fact.dtypes == {F16}, why)
        return None

    def number(self, node: cst.BaseExpression) -> float | None:
        """The value of a Python number: a literal, `-1e9`, `float("-inf")`, a module constant, a
        parameter's default, or `self.eps` set from one in `__init__`."""
        return self.of(node).number

    def scope_of(self, node: cst.CSTNode) -> cst.FunctionDef | cst.Module | None:
        function = self.ctx.function_of(node)
        if function is not None:
            return function
        if node in self.ctx.index.top_of:
            return self.ctx.module
        if self._scope_of is None:
            self._scope_of = {}
            for top in self.ctx.module.body:
                for inner in walk(top):
                    self._scope_of.setdefault(inner, self.ctx.module)
                for function in (n for n in walk(top) if isinstance(n, cst.FunctionDef)):
                    for inner in walk(function.body):
                        self._scope_of[inner] = function
        return self._scope_of.get(node)

    def line(self, node: cst.CSTNode) -> int:
        return self.ctx.position(node).start.line

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

    # -- the file's definitions ------------------------------------------------------------------
    def _index_definitions(self) -> None:
        for statement in self.ctx.module.body:
            if isinstance(statement, cst.ClassDef):
                self._classes[statement.name.value] = statement
                for item in suite_body(statement.body):
                    if isinstance(item, cst.FunctionDef):
                        self._class_of[item] = statement
                        self._functions.setdefault(item.name.value, []).append(item)
            elif isinstance(statement, cst.FunctionDef):
                self._functions.setdefault(statement.name.value, []).append(statement)

    def _default_entry(self, node: cst.CSTNode | None = None) -> frozenset[Autocast]:
        """What code that this file does not call runs under: autocast off, the autocast of the
        execution modes of the definition holding `node`, or, where none reaches it, whatever the
        caller picks."""
        if not self.caller_autocast:
            return frozenset({OFF})
        whys = self._modes_at(node)
        if whys:
            states = {
                Autocast(why.mode.device or "cuda", why.mode.dtype, mode=why)
                for why in whys
                if why.mode.kind == AUTOCAST
            }
            return frozenset(states | ({OFF} if len(states) < len(whys) else set()))
        return frozenset({OFF, *(Autocast("cuda", d) for d in self._caller_half())})

    def _caller_half(self) -> frozenset[str]:
        """The half dtypes a caller may pick for code no execution mode reaches: the configured
        precision's, else both (where the project has modes, they reach other code, not this)."""
        return self.profile.half if not self.profile.modes else HALF

    def _modes_at(self, node: cst.CSTNode | None) -> tuple[ModeWhy, ...]:
        """The execution modes of the top-level definition that holds `node`."""
        if node is None or not self.profile.definitions:
            return self.profile.modes
        if self._definition_of is None:
            self._definition_of = {
                inner: top.name.value
                for top in self.ctx.module.body
                if isinstance(top, (cst.ClassDef, cst.FunctionDef))
                for inner in walk(top)
            }
        return self.profile.modes_of(self._definition_of.get(node))

    def _caller_tensor(self, node: cst.CSTNode, what: str, *, weights: bool = False) -> Fact:
        """A value whose dtype the code's runner picks: a function's input (or, with `weights`, a
        model's parameter, which autocast leaves float32). The execution modes of the definition
        holding `node` decide it, and the evidence names them; where none reaches it, any dtype the
        caller may pick, marked as the caller's."""
        if self._foreign():
            return UNKNOWN_FACT  # a TensorFlow or JAX file: its inputs are no torch tensors
        modes = self._modes_at(node)
        if not modes:
            half = self._caller_half()
            return Fact(TENSOR, frozenset({F32, *half}), (Step(node, what),), caller=bool(half))
        found: set[str] = set()
        for why in modes:
            cast = why.mode.kind == CAST
            found |= {why.mode.dtype} if cast else ({F32} if weights else {F32, why.mode.dtype})
        return Fact(
            TENSOR,
            frozenset(found),
            (Step(node, f"{what}, which runs as {_modes_text(self.profile, modes)}"),),
        )

    def _foreign(self) -> bool:
        """The file imports another array framework (TensorFlow, JAX, ...) and not torch."""
        if self._framework is None:
            roots = {qualified.split(".", 1)[0] for qualified in self.ctx.index.aliases.values()}
            self._framework = "torch" if "torch" in roots or not roots & _FOREIGN else "other"
        return self._framework == "other"

    def _module_constants(self) -> dict[str, Fact]:
        if self._module_env is None:
            self._module_env = {}
            frame = _Frame(self._module_env, frozenset({OFF}))
            for statement in self.ctx.module.body:
                if isinstance(statement, cst.SimpleStatementLine):
                    for small in statement.body:
                        if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
                            targets = (
                                [t.target for t in small.targets]
                                if isinstance(small, cst.Assign)
                                else [small.target]
                            )
                            fact = self._expr(small.value, frame)
                            for target in targets:
                                self._bind(target, fact, small.value, frame)
        return self._module_env

    # -- interpretation --------------------------------------------------------------------------
    def _analyse(self, scope: cst.FunctionDef | cst.Module) -> None:
        self._done.add(scope)
        try:
            if isinstance(scope, cst.Module):
                self._run(scope.body, _Frame(dict(self._module_constants()), frozenset({OFF})))
                return
            frame = _Frame(dict(self._parameters(scope)), self._entry_states(scope))
            if scope in self._class_of:
                frame.env["__class__"] = Fact(OTHER, module=self._class_of[scope].name.value)
            self._active.add(scope)
            self._run(suite_body(scope.body), frame)
        except RecursionError:
            # An expression nested deeper than Python's stack (generated code): what was reached
            # keeps its facts, the rest stays unknown, and the file is still checked.
            pass
        finally:
            self._active.discard(scope)

    def _entry_states(self, function: cst.FunctionDef) -> frozenset[Autocast]:
        """The autocast states a function starts in: its decorators, else its callers' in this file."""
        cached = self._entry.get(function)
        if cached is not None:
            return cached
        # A module is built before it runs: its `__init__` runs outside the caller's autocast.
        states = frozenset({OFF}) if function.name.value == "__init__" else self._default_entry(function)
        sites = self._sites(function)
        if sites:
            collected: set[Autocast] = set()
            for call, scope in sites:
                if scope not in self._done and not (
                    isinstance(scope, cst.FunctionDef) and scope in self._active
                ):
                    self._analyse(scope)  # the caller's own autocast state at the call
                collected |= self._states.get(call, self._default_entry(call))
            states = frozenset(collected)
        for decorator in function.decorators:
            decided = self._autocast_of(decorator.decorator, _Frame({}, states))
            if decided is not None:
                states = decided
            elif self._custom_fwd_float32(decorator.decorator):
                states = frozenset({OFF})
        self._entry[function] = states
        return states

    def _bound(self, function: cst.FunctionDef) -> bool:
        """A method whose first parameter is `self` or `cls` (not a `@staticmethod`)."""
        return function in self._class_of and not any(
            isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod"
            for d in function.decorators
        )

    def _parameters(self, function: cst.FunctionDef) -> dict[str, Fact]:
        cached = self._params.get(function)
        if cached is not None:
            return cached
        params = named_params(function)
        env: dict[str, Fact] = {}
        self._params[function] = env  # a recursive call sees the defaults
        method = self._bound(function)
        upcast = any(self._custom_fwd_float32(d.decorator) for d in function.decorators)
        for i, param in enumerate(params):
            name = param.name.value
            if method and i == 0:
                env[name] = Fact(OTHER, module="self")
                continue
            env[name] = self._param_default(function, param, upcast)
        sites = self._sites(function)
        if sites:
            positional = [p.name.value for p in params[1 if method else 0 :]]
            # `dim: int` holds a number whatever the calls pass (`self.dim`, set from a config, is
            # no tensor): the calls tell its value, not its kind.
            numbers = {
                p.name.value
                for p in params
                if p.annotation is not None
                and self.ctx.code(p.annotation.annotation) in ("int", "float", "bool")
            }
            for name in positional + [p.name.value for p in function.params.kwonly_params]:
                passed = [self._argument_fact(call, scope, positional, name) for call, scope in sites]
                if all(fact is not None for fact in passed):
                    fact = join([fact for fact in passed if fact is not None])
                    if name not in numbers or fact.kind in (SCALAR, INTEGER):
                        env[name] = fact
        return env

    def _param_default(self, function: cst.FunctionDef, param: cst.Param, upcast: bool) -> Fact:
        name = param.name.value
        annotation = self.ctx.code(param.annotation.annotation) if param.annotation else ""
        # `x: Optional[torch.Tensor] = None`: a tensor when passed, not the None of its default
        optional = (
            isinstance(param.default, cst.Name) and param.default.value == "None" and "Tensor" in annotation
        )
        if param.default is not None and not optional:
            default = self._expr(param.default, _Frame(dict(self._module_constants()), frozenset({OFF})))
            if default.kind in (SCALAR, DTYPE, OTHER):
                return default
        if annotation and "Tensor" not in annotation and annotation not in ("Any", "object"):
            return _OTHER if annotation != "float" else _SCALAR
        if name == "device" or name.endswith("_device"):
            return _OTHER  # `x.to(device)` moves, it does not cast
        if _INTEGER_NAME.search(name):
            return _INTEGER  # token ids, positions, counts (`input_ids`, `num_heads`): no floating dtype
        if function.name.value == "__init__" and "Tensor" not in annotation and self._module_class(function):
            # A module's settings (`scale`, `temperature`, `dim`): numbers, not activations; a tensor
            # it keeps is a parameter or buffer, in the weights' dtype. (A plain class, such as a
            # distribution over logits, is built from tensors.)
            return _SCALAR
        if any(
            (self.ctx.qualified(_called(d.decorator)) or "").startswith("triton.")
            for d in function.decorators
        ):
            return UNKNOWN_FACT  # a Triton kernel's arguments are pointers and blocks, not torch tensors
        if upcast:
            return Fact(TENSOR, frozenset({F32}), (Step(param, "cast to float32 by `custom_fwd`"),))
        if self._inherited_hook(function):
            return UNKNOWN_FACT
        return self._caller_tensor(
            param, f"`{name}` is an input of `{function.name.value}`, in the caller's dtype"
        )

    def _module_class(self, function: cst.FunctionDef) -> bool:
        """A method of a class with a base class other than `object` (a module, in model code)."""
        klass = self._class_of.get(function)
        return klass is not None and any(self.ctx.code(base.value) != "object" for base in klass.bases)

    def _inherited_hook(self, function: cst.FunctionDef) -> bool:
        """A private method that this file never calls, of a class derived from one defined in
        another (non-torch) module: that base class calls it, out of sight, with tensors in a dtype
        it picks (transformers' modular files override `_norm`, which the inherited `forward` calls
        as `self._norm(x.float())`). Its parameters' dtypes are unknown, not the caller's."""
        klass = self._class_of.get(function)
        name = function.name.value
        if klass is None or not name.startswith("_") or name.startswith("__") or self._sites(function):
            return False
        bases = [self.ctx.qualified(base.value) or self.ctx.code(base.value) for base in klass.bases]
        return any(not base.startswith("torch.") and base not in self._classes for base in bases)

    def _argument_fact(
        self, call: cst.Call, scope: cst.FunctionDef | cst.Module, positional: list[str], name: str
    ) -> Fact | None:
        """The fact of what `call` passes for parameter `name`; None when it passes nothing seen."""
        if scope not in self._done and (not isinstance(scope, cst.FunctionDef) or scope not in self._active):
            self._analyse(scope)
        index = positional.index(name) if name in positional else None
        at = 0
        for arg in call.args:
            if arg.star:
                return None
            if arg.keyword is not None:
                if arg.keyword.value == name:
                    return self._facts.get(arg.value)
            else:
                if at == index:
                    return self._facts.get(arg.value)
                at += 1
        return None

    def _sites(self, function: cst.FunctionDef) -> list[tuple[cst.Call, cst.FunctionDef | cst.Module]]:
        """The calls of `function` in this file: `name(...)`, or `self.name(...)` for a method."""
        if self._call_sites is None:
            self._call_sites = {}
            for call in self.ctx.index.calls:
                func = call.func
                if (
                    isinstance(func, cst.Name)
                    and func.value in self._functions
                    and not self.ctx.qualified(func)
                ):
                    key = func.value
                elif (
                    isinstance(func, cst.Attribute)
                    and isinstance(func.value, cst.Name)
                    and func.value.value in ("self", "cls")
                    and func.attr.value in self._functions
                ):
                    key = "self." + func.attr.value
                elif isinstance(func, cst.Name) and (alias := self._alias(call, func.value)) is not None:
                    key = alias
                else:
                    continue
                scope = self.ctx.function_of(call) or self.ctx.module
                self._call_sites.setdefault(key, []).append((call, scope))
        klass = self._class_of.get(function)
        key = ("self." if klass is not None else "") + function.name.value
        return [
            (call, scope)
            for call, scope in self._call_sites.get(key, [])
            if scope is not function
            # `self._norm(x.float())` reaches the `_norm` of its own class, a base or a subclass,
            # not that of another class of the file with a method of the same name.
            and (klass is None or self._related(klass, self._class_of.get(scope)))  # type: ignore[arg-type]
        ]

    def _related(self, klass: cst.ClassDef, other: cst.ClassDef | None) -> bool:
        """Whether `self` in a method of `other` can be an instance of `klass`, or the reverse:
        the same class, or one derives from the other in this file."""
        return other is not None and (
            klass is other or other in self._ancestors(klass) or klass in self._ancestors(other)
        )

    def _ancestors(self, klass: cst.ClassDef) -> list[cst.ClassDef]:
        """The classes of this file that `klass` derives from, directly or through others."""
        found = self._ancestry.get(klass)
        if found is not None:
            return found
        found = self._ancestry[klass] = []
        todo = [klass]
        while todo:
            for base in todo.pop().bases:
                parent = self._classes.get(self.ctx.code(base.value))
                if parent is not None and parent not in found and parent is not klass:
                    found.append(parent)
                    todo.append(parent)
        return found

    def _alias(self, call: cst.Call, name: str) -> str | None:
        """The file's function that a local name may stand for where `call` calls it:
        `attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(impl, eager_attention_forward)`
        or `fn = eager_attention_forward if eager else sdpa_attention`."""
        function = self.ctx.function_of(call)
        if function is None or name in self.ctx.imports.aliases:
            return None
        aliases = self._aliases.get(function)
        if aliases is None:
            aliases = self._aliases[function] = {}
            for node in walk(function.body):
                if isinstance(node, cst.AnnAssign) and node.value is not None:
                    target, value = node.target, node.value
                elif isinstance(node, cst.Assign) and len(node.targets) == 1:
                    target, value = node.targets[0].target, node.value
                else:
                    continue
                named = {
                    n.value for n in walk(value) if isinstance(n, cst.Name) and n.value in self._functions
                }
                if isinstance(target, cst.Name) and len(named) == 1:
                    aliases[target.value] = named.pop()
        return aliases.get(name)

    def arguments(
        self, function: cst.FunctionDef, name: str
    ) -> list[tuple[cst.BaseExpression, cst.FunctionDef | cst.Module]] | None:
        """What each call of `function` in this file passes for its parameter `name`, with the
        scope of the call; None when a call passes it in a way not seen (`*args`) or none calls it."""
        params = [*function.params.posonly_params, *function.params.params]
        positional = [p.name.value for p in params[1 if self._bound(function) else 0 :]]
        index = positional.index(name) if name in positional else None
        found: list[tuple[cst.BaseExpression, cst.FunctionDef | cst.Module]] = []
        for call, scope in self._sites(function):
            at, passed = 0, None
            for arg in call.args:
                if arg.star == "**":
                    continue  # may pass it too, but a keyword or position seen first decides
                if arg.star:
                    return None
                if arg.keyword is not None:
                    passed = arg.value if arg.keyword.value == name else passed
                else:
                    passed = arg.value if at == index else passed
                    at += 1
            if passed is None:
                return None
            found.append((passed, scope))
        return found or None

    def _run(self, body: Iterable[cst.BaseStatement], frame: _Frame) -> None:
        for statement in body:
            self._statement(statement, frame)

    def _branch(self, bodies: list[Iterable[cst.BaseStatement]], frame: _Frame, keep: bool) -> None:
        """Run alternative bodies from the same state and join what they bind (`keep`: the state
        before counts as an alternative too, as when no branch may run)."""
        results = []
        for body in bodies:
            inner = replace(frame, env=dict(frame.env))
            self._run(body, inner)
            frame.returns = inner.returns
            results.append(inner.env)
        if keep:
            results.append(frame.env)
        for name in {name for env in results for name in env}:
            frame.env[name] = join([env[name] for env in results if name in env])

    def _statement(self, node: cst.BaseStatement, frame: _Frame) -> None:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                self._small(small, frame)
        elif isinstance(node, cst.If):
            self._expr(node.test, frame)
            bodies: list[Iterable[cst.BaseStatement]] = [suite_body(node.body)]
            orelse = node.orelse
            if isinstance(orelse, cst.If):
                bodies.append((orelse,))
            elif orelse is not None:
                bodies.append(suite_body(orelse.body))
            taken = self._on_gpu(node.test)
            skipped = self._guard_skips(node.test) if not isinstance(orelse, cst.If) else None
            if taken is None and skipped is not None and (orelse is None or not skipped & HALF):
                # `if x.dtype in (float16, bfloat16): x = x.float()`: the upcast runs wherever the
                # value is half, so a name the body upcasts is wide after it (whatever the test reads:
                # `self.cfg.dtype` is taken to be the model's), unless an `else:` rebinds it.
                before = dict(frame.env)
                self._branch(bodies, frame, keep=orelse is None)
                inner = replace(frame, env=dict(before))
                self._run(bodies[0], inner)
                other = replace(frame, env=dict(before))
                self._run(bodies[1] if len(bodies) > 1 else (), other)
                for name, fact in inner.env.items():
                    kept = other.env.get(name) is before.get(name)
                    previous = before.get(name, fact)
                    if fact.is_wide and previous.may_be_half and kept:
                        # Where the body did not run, the value has a dtype the test skips:
                        # `if x.dtype == torch.float16: x = x.float()` leaves bf16 as it was.
                        rest = previous.dtypes & skipped & HALF
                        frame.env[name] = join([fact, replace(previous, dtypes=rest)]) if rest else fact
            elif taken is None:
                self._branch(bodies, frame, keep=orelse is None)
            else:
                # `if torch.cuda.is_available():` the other branch's facts, but a GPU's bindings
                bodies.append(())
                self._run(bodies[1 - taken], replace(frame, env=dict(frame.env)))
                self._branch([bodies[taken]], frame, keep=False)
        elif isinstance(node, (cst.For, cst.While)):
            if isinstance(node, cst.For):
                iterated = self._expr(node.iter, frame)
                element = join(iterated.items) if iterated.items else iterated
                self._bind(node.target, element if element.kind != SCALAR else _SCALAR, None, frame)
            else:
                self._expr(node.test, frame)
            for _ in range(2):
                self._branch([suite_body(node.body)], frame, keep=True)
            if node.orelse is not None:
                self._run(suite_body(node.orelse.body), frame)
        elif isinstance(node, cst.With):
            states = frame.autocast
            for item in node.items:
                context = self._expr(item.item, frame).context
                if context is not None:  # `with torch.autocast(...)`, or `with ctx:` bound to one
                    states = (context - {_KEEP}) | (states if _KEEP in context else frozenset())
                if item.asname is not None:
                    self._bind(item.asname.name, UNKNOWN_FACT, None, frame)
            inner = replace(frame, autocast=states)
            self._run(suite_body(node.body), inner)
            frame.returns = inner.returns
        elif isinstance(node, cst.Try):
            bodies = [suite_body(node.body), *(suite_body(h.body) for h in node.handlers)]
            self._branch(bodies, frame, keep=False)
            for extra in (node.orelse, node.finalbody):
                if extra is not None:
                    self._run(suite_body(extra.body), frame)
        elif isinstance(node, cst.FunctionDef):
            frame.env[node.name.value] = _OTHER

    def _small(self, node: cst.BaseSmallStatement, frame: _Frame) -> None:
        if isinstance(node, cst.Assign):
            fact = self._expr(node.value, frame)
            for target in node.targets:
                self._bind(target.target, fact, node.value, frame)
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            self._bind(node.target, self._expr(node.value, frame), node.value, frame)
        elif isinstance(node, cst.AugAssign):
            operator = type(node.operator).__name__.replace("Assign", "")
            left = self._expr(node.target, frame)
            right = self._expr(node.value, frame)
            result = self._binary(operator, left, right, node, frame)
            if left.kind == TENSOR and left.dtypes and result.kind == TENSOR:
                result = left  # in place: `scores += bias` keeps the dtype of `scores`
            self._bind(node.target, result, None, frame)
        elif isinstance(node, cst.Return) and node.value is not None:
            frame.returns.append(self._expr(node.value, frame))
        elif isinstance(node, cst.Expr):
            fact = self._expr(node.value, frame)
            for converted, module in self._converted_in_place(node.value, fact):
                key = converted.value if isinstance(converted, cst.Name) else f"self.{converted.attr.value}"
                frame.env[key] = module

    def _bind(
        self, target: cst.BaseExpression, fact: Fact, value: cst.BaseExpression | None, frame: _Frame
    ) -> None:
        self._facts[target] = fact
        if isinstance(target, cst.Name):
            frame.env[target.value] = fact
        elif isinstance(target, (cst.Tuple, cst.List)):
            elements = target.elements
            items = fact.items if fact.items is not None and len(fact.items) == len(elements) else None
            for i, element in enumerate(elements):
                inner = items[i] if items is not None else fact if fact.items is None else join(fact.items)
                self._bind(element.value, inner, None, frame)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, fact, None, frame)
        elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
            owner = target.value.value
            if owner == "self":
                key = (self._class_name(frame), target.attr.value)
                previous = self._attributes.get(key)
                self._attributes[key] = fact if previous is None else join([previous, fact])
        elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
            name = target.value.value
            if name in frame.env and frame.env[name].kind == TENSOR:
                frame.env[name] = promote([frame.env[name], fact]) if fact.kind == TENSOR else frame.env[name]

    def _class_name(self, frame: _Frame) -> str:
        return frame.env.get("__class__", _OTHER).module or ""

    # -- expressions -----------------------------------------------------------------------------
    def _expr(self, node: cst.BaseExpression, frame: _Frame) -> Fact:
        fact = self._evaluate(node, frame)
        previous = self._facts.get(node)
        self._facts[node] = fact if previous is None else join([previous, fact])
        states = self._states.get(node)
        self._states[node] = frame.autocast if states is None else states | frame.autocast
        return fact

    def _evaluate(self, node: cst.BaseExpression, frame: _Frame) -> Fact:
        if isinstance(node, cst.Name):
            return self._name(node, frame)
        if isinstance(node, (cst.Integer, cst.Float)):
            try:
                return Fact(SCALAR, number=float(node.evaluated_value))
            except OverflowError:  # an integer literal past float's range (`10**400` spelled out)
                return Fact(SCALAR, number=math.inf)
        if isinstance(node, (cst.Imaginary, cst.BaseString)):
            for child in _children(node):
                self._expr(child, frame)
            literal = node.evaluated_value if isinstance(node, cst.SimpleString) else None
            if isinstance(literal, str) and literal in _DTYPE_STRINGS:
                # `torch_dtype="float16"`: a string that names a dtype carries it
                return Fact(OTHER, frozenset({_DTYPE_STRINGS[literal]}), (Step(node, f'`"{literal}"`'),))
            return _OTHER
        if isinstance(node, cst.Attribute):
            return self._attribute(node, frame)
        if isinstance(node, cst.Subscript):
            value = self._expr(node.value, frame)
            for element in node.slice:
                if isinstance(element.slice, cst.Index):
                    self._expr(element.slice.value, frame)
            if value.items is not None:
                index = _literal_index(node)
                if index is not None and -len(value.items) <= index < len(value.items):
                    return value.items[index]
                return join(value.items)
            return value if value.kind in (TENSOR, UNKNOWN) else UNKNOWN_FACT
        if isinstance(node, cst.UnaryOperation):
            inner = self._expr(node.expression, frame)
            if isinstance(node.operator, cst.Minus) and inner.number is not None:
                return replace(inner, number=-inner.number)
            if isinstance(node.operator, (cst.BitInvert, cst.Not)):
                return _INTEGER if inner.kind in (TENSOR, INTEGER) else _SCALAR
            return inner
        if isinstance(node, cst.BinaryOperation):
            left = self._expr(node.left, frame)
            right = self._expr(node.right, frame)
            return self._binary(type(node.operator).__name__, left, right, node, frame)
        if isinstance(node, cst.BooleanOperation):
            return join([self._expr(node.left, frame), self._expr(node.right, frame)])
        if isinstance(node, cst.Comparison):
            facts = [
                self._expr(node.left, frame),
                *(self._expr(c.comparator, frame) for c in node.comparisons),
            ]
            return _INTEGER if any(f.kind == TENSOR for f in facts) else _SCALAR
        if isinstance(node, cst.IfExp):
            self._expr(node.test, frame)
            branches = [self._expr(node.body, frame), self._expr(node.orelse, frame)]
            taken = self._on_gpu(node.test)
            if taken is None:
                return join(self._guarded(node, branches))
            chosen = branches[taken]
            return replace(chosen, why=(*chosen.why[-(_MAX_WHY - 1) :], Step(node.test, _ON_GPU)))
        if isinstance(node, cst.Dict):
            for item in node.elements:
                if isinstance(item, cst.DictElement):
                    self._expr(item.key, frame)
                self._expr(item.value, frame)
            return _OTHER
        if isinstance(node, (cst.Tuple, cst.List)):
            return Fact(OTHER, items=tuple(self._expr(e.value, frame) for e in node.elements))
        if isinstance(node, (cst.ListComp, cst.GeneratorExp)):
            return self._comprehension(node, frame)
        if isinstance(node, cst.Call):
            return self._call(node, frame)
        if isinstance(node, cst.NamedExpr):
            fact = self._expr(node.value, frame)
            self._bind(node.target, fact, node.value, frame)
            return fact
        for child in _children(node):
            self._expr(child, frame)
        return UNKNOWN_FACT

    def _name(self, node: cst.Name, frame: _Frame) -> Fact:
        fact = frame.env.get(node.value)
        if fact is not None:
            return fact
        qualified = self.ctx.qualified(node)
        if qualified is not None:
            return self._qualified(qualified, node)
        if node.value in ("True", "False", "None"):
            return _SCALAR if node.value != "None" else _OTHER
        if node.value in self._classes or node.value in self._functions:
            return _OTHER
        return self._module_constants().get(node.value, UNKNOWN_FACT)

    def _qualified(self, qualified: str, node: cst.CSTNode) -> Fact:
        dtype = _DTYPE_NAMES.get(qualified)
        if dtype is not None:
            return Fact(DTYPE, frozenset({dtype}), (Step(node, f"`{qualified}`"),))
        if qualified in _INTEGER_DTYPE_NAMES:  # `dtype=torch.bool`: an integer tensor, no floating dtype
            return Fact(DTYPE, why=(Step(node, f"`{qualified}`"),), module=_INTEGER_DTYPE)
        if qualified in ("math.pi", "math.e", "math.inf", "math.tau"):
            return Fact(SCALAR, number=getattr(math, qualified[5:]))
        if qualified in ("torch.inf", "numpy.inf", "numpy.Inf"):
            return Fact(SCALAR, number=math.inf)
        return _OTHER

    def _attribute(self, node: cst.Attribute, frame: _Frame) -> Fact:
        qualified = self.ctx.qualified(node)
        if qualified is not None:
            return self._qualified(qualified, node)
        name = node.attr.value
        if isinstance(node.value, cst.Name) and node.value.value == "self":
            return self._self_attribute(name, node, frame)
        value = self._expr(node.value, frame)
        if name == "dtype":
            if value.kind == TENSOR:
                return replace(value, kind=DTYPE)
            return Fact(DTYPE) if value.kind == UNKNOWN else _OTHER
        if name in ops.TENSOR_ATTRIBUTES_SCALAR:
            return _SCALAR
        if name in ("min", "max", "eps", "tiny", "smallest_normal", "bits", "resolution"):
            number = self._finfo_number(node.value, name)
            if number is not None:  # `torch.finfo(torch.float32).min`: a dtype written out
                return Fact(SCALAR, number=number)
            return value if value.kind == SCALAR else _SCALAR
        if value.kind == TENSOR:
            return value  # `.T`, `.mT`, `.data`, `.grad`, `.real`
        return UNKNOWN_FACT

    def _finfo_number(self, call: cst.BaseExpression, name: str) -> float | None:
        """`torch.finfo(torch.float32).min` (or `numpy.finfo`, `.eps`, `.tiny`): a number only where
        the dtype is written out; `finfo(x.dtype)` is whatever dtype `x` has at run time."""
        if not isinstance(call, cst.Call) or len(call.args) != 1:
            return None
        if self.ctx.qualified(call.func) not in ("torch.finfo", "numpy.finfo"):
            return None
        arg = call.args[0].value
        written = self.ctx.qualified(arg) or ""
        dtype = _DTYPE_NAMES.get(written) or _DTYPE_NAMES.get(written.replace("numpy.", "torch.", 1))
        if dtype is None and isinstance(arg, cst.Name) and arg.value == "float":
            dtype = F64
        return constants.finfo(dtype, name) if dtype is not None else None

    def _self_attribute(self, name: str, node: cst.CSTNode, frame: _Frame) -> Fact:
        converted = frame.env.get(f"self.{name}")  # `self.model.half()` earlier in this function
        if converted is not None:
            return converted
        cls = self._class_name(frame)
        if (cls, name) in self._reading:
            return UNKNOWN_FACT  # `self.inv_freq = self._scale(self.inv_freq)`: a cycle sees nothing
        built = self._built_buffer(cls, name, node)
        if built is not None:
            return built
        if (cls, name) not in self._attributes:
            self._reading.add((cls, name))
            try:
                self._attributes[(cls, name)] = self._init_attribute(cls, name, node)
            finally:
                self._reading.discard((cls, name))
        fact = self._attributes[(cls, name)]
        return (
            fact
            if fact.kind != UNKNOWN
            else self._caller_tensor(
                node, f"`self.{name}` is the model's, in the caller's dtype", weights=True
            )
        )

    def _init_attribute(self, cls: str, name: str, where: cst.CSTNode) -> Fact:
        """What `self.<name>` holds, from its assignments in the class's `__init__`: a submodule, a
        number, a parameter or buffer (in the weights' dtype), or another value; else from a class
        attribute (`eps = 1e-8` in the class body)."""
        klass = self._classes.get(cls)
        if klass is None:
            return UNKNOWN_FACT
        init = next(
            (
                f
                for f in suite_body(klass.body)
                if isinstance(f, cst.FunctionDef) and f.name.value == "__init__"
            ),
            None,
        )
        if init is None:
            return self._class_attribute(klass, name)
        frame = _Frame(dict(self._parameters(init)), frozenset({OFF}))
        frame.env["__class__"] = Fact(OTHER, module=cls)
        found: list[Fact] = []
        bodies = [init.body, *(method.body for method in self._construction_methods(klass))]
        for statement in (node for body in bodies for node in walk(body)):
            if isinstance(statement, cst.Assign):
                for target in statement.targets:
                    t = target.target
                    if (
                        isinstance(t, cst.Attribute)
                        and t.attr.value == name
                        and isinstance(t.value, cst.Name)
                        and t.value.value == "self"
                    ):
                        found.append(self._init_value(statement.value, frame))
            elif (
                isinstance(statement, cst.Call)
                and isinstance(statement.func, cst.Attribute)
                and statement.func.attr.value in ("register_buffer", "register_parameter")
                and statement.args
            ):
                first = statement.args[0].value
                if isinstance(first, cst.SimpleString) and first.evaluated_value == name:
                    if _converts_itself(klass) and len(statement.args) > 1:
                        # `_apply` overridden (timm's rotary embeddings re-make their frequencies in
                        # float32 after `.half()`): the buffer keeps the dtype it is registered in.
                        found.append(self._expr(statement.args[1].value, frame))
                    else:
                        found.append(
                            self._caller_tensor(
                                where, f"`self.{name}` is a buffer, in the model's dtype", weights=True
                            )
                        )
        return join(found) if found else self._class_attribute(klass, name)

    def _building(self, function: cst.FunctionDef | None) -> bool:
        """Whether a method runs only while its module is built: `__init__`, or a method that only
        construction calls (torchtune's `rope_init` and the `build_rope_cache` it calls), before any
        `.to(dtype)` can have converted the module's buffers."""
        if function is None or function not in self._class_of:
            return False
        if function.name.value == "__init__":
            return True
        cached = self._built.get(function)
        if cached is None:
            self._built[function] = False  # a cycle of calls is not construction
            sites = self._sites(function)
            cached = bool(sites) and all(
                isinstance(scope, cst.FunctionDef) and self._building(scope) for _, scope in sites
            )
            self._built[function] = cached
        return cached

    def _construction_methods(self, klass: cst.ClassDef) -> list[cst.FunctionDef]:
        """The methods of `klass` besides `__init__` that only its construction calls."""
        return [
            item
            for item in suite_body(klass.body)
            if isinstance(item, cst.FunctionDef) and item.name.value != "__init__" and self._building(item)
        ]

    def _built_buffer(self, cls: str, name: str, where: cst.CSTNode) -> Fact | None:
        """`self.<name>` read while the module is built, where construction registers it as a buffer:
        the dtype of the value registered (`theta` computed in float32), not yet the model's."""
        function = self.scope_of(where)
        klass = self._classes.get(cls)
        if klass is None or not isinstance(function, cst.FunctionDef) or not self._building(function):
            return None
        init = [
            f for f in suite_body(klass.body) if isinstance(f, cst.FunctionDef) and f.name.value == "__init__"
        ]
        for method in [*init, *self._construction_methods(klass)]:
            for node in walk(method.body):
                if (
                    isinstance(node, cst.Call)
                    and isinstance(node.func, cst.Attribute)
                    and node.func.attr.value == "register_buffer"
                    and len(node.args) > 1
                    and isinstance(node.args[0].value, cst.SimpleString)
                    and node.args[0].value.evaluated_value == name
                ):
                    fact = self.of(node.args[1].value)
                    return fact if fact.kind == TENSOR and fact.dtypes else None
        return None

    def _class_attribute(self, klass: cst.ClassDef, name: str) -> Fact:
        """What a class attribute (`eps = 1e-8` in the class body) holds."""
        frame = _Frame(dict(self._module_constants()), frozenset({OFF}))
        found = [
            self._init_value(small.value, frame)
            for item in suite_body(klass.body)
            if isinstance(item, cst.SimpleStatementLine)
            for small in item.body
            if isinstance(small, cst.Assign)
            and any(isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets)
        ]
        return join(found) if found else UNKNOWN_FACT

    def _init_value(self, value: cst.BaseExpression, frame: _Frame) -> Fact:
        if isinstance(value, cst.Call):
            constructor = (self.ctx.qualified(value.func) or self.ctx.code(value.func)).rsplit(".", 1)[-1]
            if constructor in ("Parameter", "Buffer"):
                return self._caller_tensor(
                    value, f"a {constructor.lower()}, in the model's dtype", weights=True
                )
            if constructor in ops.MODULE_OPS or constructor[:1].isupper():
                return Fact(MODULE, module=constructor)
        # A plain tensor attribute keeps the dtype it is made in: `.half()` converts only the
        # parameters and buffers (the same fact whether or not `__init__` was analysed first).
        return self._expr(value, frame)

    def _per_item(self, name: str, iterated: Fact, body: cst.BaseExpression, frame: _Frame) -> Fact | None:
        """`[x[i] for x in (q, k)]`, `map(lambda x: x.float(), (q, k))` over a literal tuple: one
        fact per element, so that `q_i, k_i = ...` keeps each its own; None for any other iterable.
        The caller then evaluates `body` once more on the joined elements, which is what its nodes
        keep as their facts."""
        if not iterated.items:
            return None
        return Fact(
            OTHER,
            items=tuple(
                self._expr(body, replace(frame, env={**frame.env, name: item})) for item in iterated.items
            ),
        )

    def _comprehension(self, node: cst.ListComp | cst.GeneratorExp, frame: _Frame) -> Fact:
        loop = node.for_in
        per_item = None
        if loop.inner_for_in is None and not loop.ifs and isinstance(loop.target, cst.Name):
            per_item = self._per_item(loop.target.value, self._expr(loop.iter, frame), node.elt, frame)
        joined = self._joined_comprehension(node, frame)
        return per_item if per_item is not None else joined

    def _joined_comprehension(self, node: cst.ListComp | cst.GeneratorExp, frame: _Frame) -> Fact:
        inner = replace(frame, env=dict(frame.env))
        loop: cst.CompFor | None = node.for_in
        while loop is not None:
            iterated = self._expr(loop.iter, inner)
            element = join(iterated.items) if iterated.items else iterated
            self._bind(loop.target, element, None, inner)
            for condition in loop.ifs:
                self._expr(condition.test, inner)
            loop = loop.inner_for_in
        elt = self._expr(node.elt, inner)
        return (
            Fact(OTHER, items=None, dtypes=elt.dtypes, why=elt.why)
            if elt.kind != TENSOR
            else replace(elt, kind=TENSOR)
        )

    def _binary(self, operator: str, left: Fact, right: Fact, node: cst.CSTNode, frame: _Frame) -> Fact:
        if left.kind == SCALAR and right.kind == SCALAR:
            return Fact(SCALAR, number=_arith(operator, left.number, right.number))
        if operator == "MatrixMultiply":
            return self._op("matmul", [left, right], node, frame)
        if operator == "Power":
            return self._op("pow", [left, right], node, frame)
        if operator == "Divide" and left.kind == SCALAR and right.kind == TENSOR:
            return self._op("reciprocal", [right], node, frame)
        if operator in ("BitAnd", "BitOr", "BitXor"):
            return (
                _INTEGER
                if TENSOR in (left.kind, right.kind) or INTEGER in (left.kind, right.kind)
                else _SCALAR
            )
        return promote([left, right])

    def _op(
        self, op: str, inputs: list[Fact], node: cst.CSTNode, frame: _Frame, natural: Fact | None = None
    ) -> Fact:
        """The result of `op` on `inputs` under each autocast state the code can run in."""
        if natural is not None:
            base = natural
        else:
            base = agree(inputs, node, op) if ops.same_dtype(op) else promote(inputs)
        if not any(fact.kind in (TENSOR, UNKNOWN) for fact in inputs) and natural is None:
            return base
        lower: dict[str, list[Autocast]] = {}  # by how the states are described
        fp32: list[Autocast] = []
        results: list[Fact] = []
        for state in frame.autocast:
            policy = ops.autocast_policy(op, state.device) if state.device else None
            if policy == "lower" and state.dtype and base.dtypes != {F64}:  # autocast leaves float64 alone
                lower.setdefault(_under([state], self), []).append(state)
            elif policy == "fp32" and base.dtypes != {F32}:
                fp32.append(state)
            else:
                results.append(base)
        for under, states in lower.items():
            dtypes = frozenset(s.dtype for s in states if s.dtype)
            names = "/".join(_SHORT[d] for d in ops.FLOATS if d in dtypes)
            step = Step(node, f"`{op}` runs in {names} {under}")
            caller = states[0].where is None and states[0].mode is None
            results.append(Fact(TENSOR, dtypes, (step,), caller=caller))
        if fp32:
            results.append(
                Fact(TENSOR, frozenset({F32}), (Step(node, f"`{op}` runs in float32 {_under(fp32, self)}"),))
            )
        return join(results)

    def _call(self, node: cst.Call, frame: _Frame) -> Fact:
        func = node.func
        args = [self._expr(arg.value, frame) for arg in node.args]
        context = self._autocast_of(node, frame, lambda arg: self._facts.get(arg, UNKNOWN_FACT))
        if context is not None:
            return Fact(OTHER, context=context)
        qualified = self.ctx.qualified(func)
        keywords = {arg.keyword.value: fact for arg, fact in zip(node.args, args, strict=True) if arg.keyword}
        positional = [
            fact for arg, fact in zip(node.args, args, strict=True) if not arg.keyword and not arg.star
        ]
        if qualified is not None:
            return self._library_call(qualified, node, positional, keywords, frame)
        if isinstance(func, cst.Name):
            local = self._local_call(func.value, node, frame, positional, keywords)
            if local is not None:
                return local
            if func.value == "float":
                return Fact(SCALAR, number=_float_literal(node))
            if func.value == "map" and len(positional) == 2:
                return self._map(node, positional[1], frame)
            callee = frame.env.get(func.value) or self._module_constants().get(func.value)
            if callee is not None and callee.kind == MODULE and callee.dtypes:  # a model loaded in a dtype
                weights = Fact(TENSOR, callee.dtypes, callee.why, callee.caller)
                return self._op("linear", positional[:1], node, frame, natural=weights)
            if callee is not None and callee.kind != MODULE and self._model_parameter(func, node):
                # `logits = model(x).logits` with the model passed in (`def generate(model, ...)`):
                # its output is in the weights' dtype (a cast at the call site), as `self.model(x)`'s is.
                text = f"`{func.value}(...)` runs the model, in its weights' dtype"
                weights = (
                    Fact(
                        TENSOR,
                        callee.dtypes,
                        (*callee.why[-(_MAX_WHY - 1) :], Step(node, text)),
                        callee.caller,
                    )
                    if callee.kind == TENSOR and callee.dtypes and not callee.caller
                    else self._caller_tensor(node, text + ", the caller's")
                )
                return self._op("linear", positional[:1], node, frame, natural=weights)
            if func.value in ("int", "len", "round", "abs", "min", "max", "sum") and all(
                f.kind in (SCALAR, INTEGER) for f in args
            ):
                return _SCALAR
            # An opaque function: as its tensor inputs are (`*args`, `**kwargs` are containers).
            tensors = [f for arg, f in zip(node.args, args, strict=True) if f.kind == TENSOR and not arg.star]
            return promote(tensors) if tensors else UNKNOWN_FACT
        if not isinstance(func, cst.Attribute):
            callee = self._expr(func, frame)  # `nn.Softmax(dim=-1)(scores)`: a module built and called
            if callee.kind == MODULE:
                return self._module_call(callee.module or "", node, positional, frame)
            return UNKNOWN_FACT
        method = func.attr.value
        if isinstance(func.value, cst.Name) and func.value.value in ("self", "cls"):
            local = self._local_call("self." + method, node, frame, positional, keywords)
            if local is not None:
                return local
            owner = self._self_attribute(method, func, frame)
            self._facts[func] = owner
            if owner.kind == MODULE:
                return self._module_call(owner.module or "", node, positional, frame)
            return self._module_call("", node, positional, frame)
        receiver = self._expr(func.value, frame)
        if receiver.kind == MODULE:
            return self._module_method(method, receiver, node, positional, keywords, frame)
        return self._tensor_method(method, receiver, node, positional, keywords, frame)

    def _model_parameter(self, func: cst.Name, call: cst.Call) -> bool:
        """`model` in `model(x)` is a parameter of the function that calls it, named as a model."""
        function = self.ctx.function_of(call)
        return (
            _MODEL_NAME.search(func.value) is not None
            and function is not None
            and any(p.name.value == func.value for p in named_params(function))
        )

    def _converted_in_place(
        self, node: cst.BaseExpression, fact: Fact
    ) -> Iterator[tuple[cst.Name | cst.Attribute, Fact]]:
        """The modules a statement converts in place, with what they hold after it. `model.half()`
        with its result unused: only a module converts in place (a tensor's cast is a copy), so the
        name holds a module in that dtype. diffusers' `cast_training_params(unet, dtype=...)` upcasts
        only the trainable parameters: the module's parameters have no one dtype after it."""
        module = _cast_module(node)
        if module is not None and fact.kind in (TENSOR, MODULE) and fact.dtypes:
            yield module, fact if fact.kind == MODULE else replace(fact, kind=MODULE, module=None)
        elif isinstance(node, cst.Call) and self.ctx.qualified(node.func) in _TRAINABLE_CASTS and node.args:
            first = node.args[0].value
            for name in (e.value for e in first.elements) if isinstance(first, cst.List) else (first,):
                if isinstance(name, cst.Name):
                    yield name, Fact(MODULE, module="cast_training_params")

    def _module_method(
        self,
        method: str,
        receiver: Fact,
        node: cst.Call,
        positional: list[Fact],
        keywords: dict[str, Fact],
        frame: _Frame,
    ) -> Fact:
        """A method of a module: a cast (`.half()`, `.to(torch.bfloat16)`) converts its parameters
        and buffers, `.parameters()` are in its dtype, `.cuda()` or `.train()` keep it; any other
        method runs it (`model.generate(...)`)."""
        if method in ops.CAST_METHODS and not positional:
            target = ops.CAST_METHODS[method]
            step = Step(node, f"`.{method}()` makes it {_SHORT[target]}")
            return Fact(MODULE, frozenset({target}), (step,), module=receiver.module)
        if method in ("to", "type"):
            # A module's `.to(tensor)` is rare, `.to(device)` with a device passed in is not.
            dtype = keywords.get("dtype") or next((f for f in positional if f.kind == DTYPE), None)
            if dtype is None or not dtype.dtypes:
                return receiver
            cast = self._cast_to(dtype, node, f"`.{method}(...)`")
            return Fact(MODULE, cast.dtypes, cast.why, cast.caller, module=receiver.module)
        if method in ops.MODULE_KEEPING_METHODS:
            return receiver
        if method in ops.PARAMETER_METHODS:
            return (
                Fact(TENSOR, receiver.dtypes, receiver.why, receiver.caller)
                if receiver.dtypes
                else UNKNOWN_FACT
            )
        return self._module_call(receiver.module or "", node, positional, frame)

    def _map(self, node: cst.Call, iterated: Fact, frame: _Frame) -> Fact:
        """`map(lambda x: x.float(), (q, k))` or `map(local_function, ...)`: each element is what the
        function returns for the iterable's elements (unpacked as in `q, k = map(...)`)."""
        function = node.args[0].value
        element = join(iterated.items) if iterated.items else iterated
        if isinstance(function, cst.Lambda) and len(function.params.params) == 1:
            name = function.params.params[0].name.value
            per_item = self._per_item(name, iterated, function.body, frame)
            joined = self._expr(function.body, replace(frame, env={**frame.env, name: element}))
            return per_item if per_item is not None else joined
        if isinstance(function, cst.Name):
            return self._local_call(function.value, node, frame, [element], {}) or UNKNOWN_FACT
        return UNKNOWN_FACT

    def _local_call(
        self, name: str, node: cst.Call, frame: _Frame, positional: list[Fact], keywords: dict[str, Fact]
    ) -> Fact | None:
        """A call of this file's own function or method: its return value, analysed with these
        arguments (to a limited depth, and not inside itself)."""
        bare = name.removeprefix("self.")
        candidates = [
            f for f in self._functions.get(bare, []) if (f in self._class_of) == name.startswith("self.")
        ]
        if len(candidates) != 1 or _skipped(candidates[0]):
            return None  # a body the parser skipped (`amplint.static.regions`): as an opaque call
        function = candidates[0]
        if function in self._active or frame.depth >= _MAX_DEPTH:
            return UNKNOWN_FACT
        signature = (function, tuple(positional) + tuple(sorted(keywords.items())))
        cached = self._returns.get(signature)  # type: ignore[arg-type]
        if cached is not None:
            return cached
        params = [*function.params.posonly_params, *function.params.params]
        if self._bound(function):
            params = params[1:]
        env = dict(self._parameters(function))
        for param, fact in zip(params, positional, strict=False):
            env[param.name.value] = fact
        for key, fact in keywords.items():
            if key in env:
                env[key] = fact
        if function in self._class_of:
            env["__class__"] = Fact(OTHER, module=self._class_of[function].name.value)
        inner = _Frame(env, frame.autocast, depth=frame.depth + 1)
        # The callee's own expressions keep the facts of its own analysis: this run only returns.
        saved, states, done = self._facts, self._states, set(self._done)
        self._facts, self._states = {}, {}
        self._active.add(function)
        try:
            self._run(suite_body(function.body), inner)
        finally:
            self._active.discard(function)
            # A scope analysed meanwhile (for a parameter's call sites) wrote into the throwaway
            # facts: it is analysed again when asked about.
            self._facts, self._states, self._done = saved, states, done
        result = join(inner.returns) if inner.returns else _OTHER
        if result.kind == TENSOR:
            result = replace(
                result, why=(*result.why[-(_MAX_WHY - 1) :], Step(node, f"returned by `{bare}`"))
            )
        self._returns[signature] = result  # type: ignore[index]
        return result

    def _module_call(self, constructor: str, node: cst.Call, positional: list[Fact], frame: _Frame) -> Fact:
        if self._foreign():
            return UNKNOWN_FACT  # a Keras or Flax layer: no torch autocast
        op = ops.MODULE_OPS.get(constructor)
        first = positional[0] if positional else UNKNOWN_FACT
        weights = self._caller_tensor(
            node, f"`{dotted_name(node.func) or constructor}` runs in the model's dtype", weights=True
        )
        if op in ("sigmoid", "tanh", "softmax", "log_softmax", "softplus"):
            return self._op(op, [first], node, frame)
        if op is not None:
            return self._op(op, [first], node, frame, natural=weights)
        # Any other layer: under autocast its products run low; its output in the weights' dtype, or
        # wider where its input is (a hook, a dropout or a norm passes an upcast input on in float32).
        return self._op("linear", [first], node, frame, natural=promote([first, weights]))

    def _library_call(
        self, qualified: str, node: cst.Call, positional: list[Fact], keywords: dict[str, Fact], frame: _Frame
    ) -> Fact:
        module, _, name = qualified.rpartition(".")
        if qualified == "functools.reduce" and len(positional) > 1 and positional[1].items:
            # `reduce(torch.promote_types, (x.dtype, scale.dtype, torch.float32))` (k-diffusion)
            items = list(positional[1].items)
            if self.ctx.qualified(node.args[0].value) == "torch.promote_types" and any(
                f.kind == DTYPE for f in items
            ):
                return self._promote_types(node, items)
        if not module.startswith("torch"):
            if module == "math" or module == "numpy" or module == "np":
                return _SCALAR
            dtype = keywords.get("torch_dtype") or keywords.get("dtype")
            if name in _MODEL_LOADERS and dtype is not None and dtype.kind == DTYPE and dtype.dtypes:
                # `AutoModel.from_pretrained(..., torch_dtype=torch.float16)`: calling it runs in that dtype.
                loaded = self._cast_to(dtype, node, f"`{name}(...)` loads the model and")
                return Fact(MODULE, loaded.dtypes, loaded.why, loaded.caller, module=name)
            if qualified in _ADAPTER_WRAPPERS:
                return self._adapted(name, node, positional)
            tensors = [f for f in positional if f.kind == TENSOR]
            return promote(tensors) if tensors else UNKNOWN_FACT
        if name == "finfo" or name == "iinfo":
            return positional[0] if positional and positional[0].kind == DTYPE else _OTHER
        if name == "promote_types" and len(positional) == 2 and any(f.kind == DTYPE for f in positional):
            return self._promote_types(node, positional)
        dtype = keywords.get("dtype")
        if name in ops.FLOAT_FACTORIES or name == "arange":
            if dtype is not None and dtype.kind == DTYPE:
                return self._cast_to(dtype, node, f"`dtype=` of `{name}`")
            if name == "arange" and not any(
                f.kind == SCALAR and f.number is not None and not f.number.is_integer() for f in positional
            ):
                return _INTEGER
            if name in ("tensor", "as_tensor") and positional and positional[0].kind == TENSOR:
                return positional[0]
            return Fact(
                TENSOR, frozenset({F32}), (Step(node, f"`{name}` makes float32 (the default dtype)"),)
            )
        if name in ops.LIKE_FACTORIES:
            if dtype is not None and dtype.kind == DTYPE:
                return self._cast_to(dtype, node, f"`dtype=` of `{name}`")
            return positional[0] if positional else UNKNOWN_FACT
        if name in ops.INTEGER_OPS:
            return _INTEGER
        if name in ("where",):
            if len(positional) == 3 and all(f.kind == SCALAR for f in positional[1:]):
                # `torch.where(mask, 0.0, -1e9)`: a tensor of the default dtype (int64 for two ints)
                values = [a.value for a in node.args if not a.keyword and not a.star][1:]
                if all(isinstance(_unsigned(v), cst.Integer) for v in values):
                    return _INTEGER
                return Fact(
                    TENSOR, frozenset({F32}), (Step(node, "`where` of Python numbers makes float32"),)
                )
            return promote(positional[1:3])
        if module.endswith(".nn") or name[:1].isupper():
            if dtype is not None and dtype.kind == DTYPE and dtype.dtypes:  # `nn.Linear(4, 4, dtype=...)`
                made = self._cast_to(dtype, node, f"`dtype=` of `{name}`")
                return Fact(MODULE, made.dtypes, made.why, made.caller, module=name)
            return Fact(MODULE, module=name)
        # A list or tuple of tensors (`torch.cat([a, b])`, `torch.einsum(eq, [q, k])`) counts as its elements.
        flat = [
            item
            for f in positional
            for item in ((f.items or (UNKNOWN_FACT,)) if f.items is not None else (f,))
        ]
        inputs = [f for f in flat if f.kind in (TENSOR, UNKNOWN)]
        if not inputs and "input" in keywords:  # `F.pad(input=x, ...)`
            inputs = [keywords["input"]]
        equation = _equation(node) if name == "einsum" else None
        if equation is not None and not ops.einsum_contracts(equation):
            name = "mul"  # `einsum("i,j->ij", t, inv_freq)`: an outer product, no matmul
        return self._tensor_op(name, inputs, node, keywords, frame)

    def _promote_types(self, node: cst.Call, dtypes: list[Fact]) -> Fact:
        """`torch.promote_types(x.dtype, torch.float32)`: the widest of the dtypes, whatever the others
        are (a `dtype` parameter, in the caller's dtypes: float32 still)."""
        promoted = promote([replace(f, kind=TENSOR) for f in dtypes])
        names = "/".join(_SHORT[d] for d in ops.FLOATS if d in promoted.dtypes)
        why = (*promoted.why[-(_MAX_WHY - 1) :], Step(node, f"`promote_types` gives {names}"))
        return replace(promoted, kind=DTYPE, why=why)

    def _adapted(self, name: str, node: cst.Call, positional: list[Fact]) -> Fact:
        """A model PEFT prepares: `get_peft_model` freezes the base, which keeps its dtype, and trains
        float32 adapters (`autocast_adapter_dtype=True`, the default, upcasts bf16/fp16 ones);
        `prepare_model_for_kbit_training` freezes it and upcasts it to float32. Its parameters have
        no one dtype; with `autocast_adapter_dtype=False` the adapters take the base model's."""
        keeps = any(
            arg.keyword is not None
            and arg.keyword.value == "autocast_adapter_dtype"
            and isinstance(arg.value, cst.Name)
            and arg.value.value == "False"
            for arg in node.args
        )
        model = positional[0] if positional else UNKNOWN_FACT
        if keeps and model.dtypes:
            step = Step(
                node, f"`{name}(..., autocast_adapter_dtype=False)` keeps the adapters in the model's dtype"
            )
            return Fact(
                MODULE, model.dtypes, (*model.why[-(_MAX_WHY - 1) :], step), model.caller, module=name
            )
        return Fact(MODULE, module=name)

    def _tensor_op(
        self, op: str, inputs: list[Fact], node: cst.Call, keywords: dict[str, Fact], frame: _Frame
    ) -> Fact:
        dtype = keywords.get("dtype")
        result = self._op(op, inputs, node, frame)
        if dtype is not None and dtype.kind == DTYPE and (dtype.dtypes or dtype.module == _INTEGER_DTYPE):
            return self._cast_to(dtype, node, f"`dtype=` of `{op}`")
        return result

    def _tensor_method(
        self,
        method: str,
        receiver: Fact,
        node: cst.Call,
        positional: list[Fact],
        keywords: dict[str, Fact],
        frame: _Frame,
    ) -> Fact:
        if method in ops.CAST_METHODS and not positional:
            target = ops.CAST_METHODS[method]
            return Fact(
                TENSOR, frozenset({target}), (Step(node, f"`.{method}()` makes it {_SHORT[target]}"),)
            )
        if method in ("to", "type"):
            dtype = keywords.get("dtype") or next((f for f in positional if f.kind in (DTYPE, TENSOR)), None)
            if dtype is not None and (dtype.dtypes or dtype.module == _INTEGER_DTYPE):
                return self._cast_to(dtype, node, f"`.{method}(...)`")
            return receiver
        if method == "type_as":
            return positional[0] if positional else receiver
        if method in ops.NEW_FACTORIES:
            if keywords.get("dtype") is not None and keywords["dtype"].dtypes:
                return self._cast_to(keywords["dtype"], node, f"`dtype=` of `{method}`")
            return receiver
        if method in ops.SCALAR_METHODS:
            return _SCALAR
        if method in ops.INTEGER_OPS:
            return _INTEGER
        if receiver.kind not in (TENSOR, UNKNOWN):
            return UNKNOWN_FACT if receiver.kind != SCALAR else _SCALAR
        if method in ("chunk", "split", "unbind", "tensor_split") or method in ops.LAYOUT_METHODS:
            return receiver
        if method in ops.PARAMETER_METHODS:
            return receiver  # a model's parameters, in the dtype it was given
        if method in ("masked_fill", "masked_fill_", "masked_scatter", "masked_scatter_"):
            return receiver  # the mask and the fill value never change the dtype
        if method in ("max", "min", "topk", "sort", "mode", "median") and (positional or keywords):
            return receiver
        inputs = [receiver, *(f for f in positional if f.kind in (TENSOR, UNKNOWN))]
        return self._tensor_op(method.rstrip("_"), inputs, node, keywords, frame)

    def _cast_to(self, dtype: Fact, node: cst.CSTNode, how: str) -> Fact:
        if dtype.kind == DTYPE and dtype.module == _INTEGER_DTYPE:
            return _INTEGER
        names = "/".join(_SHORT[d] for d in ops.FLOATS if d in dtype.dtypes)
        why = (
            (*dtype.why[-1:], Step(node, f"{how} makes it {names}"))
            if dtype.kind == TENSOR
            else (
                *[s for s in dtype.why if not s.text.startswith("`torch.")][-1:],
                Step(node, f"{how} makes it {names}"),
            )
        )
        return Fact(TENSOR, dtype.dtypes, why, caller=dtype.caller)

    def _autocast_of(
        self, expr: cst.BaseExpression, frame: _Frame, dtype_of: Callable[[cst.CSTNode], Fact] | None = None
    ) -> frozenset[Autocast] | None:
        """The states inside `with <expr>:` when `expr` is an autocast context, else None
        (`dtype_of`: the facts of a finished analysis, for a `dtype=` argument)."""

        call = expr if isinstance(expr, cst.Call) else None
        if call is None or not autocast_call(self.ctx, call):
            return None
        device, dtype, enabled = autocast_settings(self.ctx, call)
        dtype_arg = next((a.value for a in call.args if a.keyword and a.keyword.value == "dtype"), None)
        dtypes: frozenset[str] = frozenset({dtype}) if dtype else frozenset()
        if dtype_arg is not None and not dtypes:
            fact = dtype_of(dtype_arg) if dtype_of is not None else UNKNOWN_FACT
            fact = fact if fact.kind != UNKNOWN else self._expr(dtype_arg, frame)
            # `dtype=torch.float32` written in the code: the ops autocast lowers run in float32.
            dtypes = fact.dtypes & (HALF if fact.caller else HALF | {F32})
        if not dtypes:
            dtypes = frozenset(self.profile.half) or frozenset({F16})
        enabled_arg = next((a.value for a in call.args if a.keyword and a.keyword.value == "enabled"), None)
        if not enabled or self._off_by_default(call, enabled_arg):
            return frozenset({OFF})
        states = {Autocast(device or "cuda", d, call) for d in dtypes}
        literal_true = isinstance(enabled_arg, cst.Name) and enabled_arg.value == "True"
        if enabled_arg is not None and not literal_true:
            states.add(OFF)  # `enabled=flag`: either
        return frozenset(states)

    def _off_by_default(self, call: cst.Call, enabled: cst.BaseExpression | None) -> bool:
        """`enabled=flag` where `flag` is a parameter that defaults to False and that no call in this
        file passes (nemo's `forward(..., enable_autocast=False)`): autocast stays off unless a caller
        elsewhere asks for it."""
        function = self.ctx.function_of(call)
        if not isinstance(enabled, cst.Name) or function is None:
            return False
        param = next((p for p in named_params(function) if p.name.value == enabled.value), None)
        default = param.default if param is not None else None
        return (
            isinstance(default, cst.Name)
            and default.value == "False"
            and not self._sites(function)
            and not _rebinds(function, enabled.value)
        )

    def _custom_fwd_float32(self, decorator: cst.BaseExpression) -> bool:
        """`@custom_fwd(cast_inputs=torch.float32)`: inputs upcast, autocast off inside."""
        if not isinstance(decorator, cst.Call):
            return False
        name = (self.ctx.qualified(decorator.func) or "").rsplit(".", 1)[-1]
        cast = next((a.value for a in decorator.args if a.keyword and a.keyword.value == "cast_inputs"), None)
        return (
            name == "custom_fwd"
            and cast is not None
            and _DTYPE_NAMES.get(self.ctx.qualified(cast) or "") == F32
        )


# Integer and boolean dtypes: a DTYPE fact with no floating dtype, marked by `module`.
_INTEGER_DTYPE = "integer dtype"
_INTEGER_DTYPE_NAMES = frozenset(
    f"torch.{name}" for name in ("bool", "long", "int64", "int", "int32", "int16", "short", "int8", "uint8")
)
_FOREIGN = frozenset({"tensorflow", "jax", "flax", "keras", "mlx", "paddle", "mindspore"})
_DTYPE_NAMES = {
    "torch.float32": F32,
    "torch.float": F32,
    "torch.float64": F64,
    "torch.double": F64,
    "torch.float16": F16,
    "torch.half": F16,
    "torch.bfloat16": BF16,
}
# Strings that name a dtype where one is expected (`torch_dtype="float16"`).
_DTYPE_STRINGS = {
    **{name.removeprefix("torch."): dtype for name, dtype in _DTYPE_NAMES.items()},
    **_DTYPE_NAMES,
    "fp16": F16,
    "bf16": BF16,
    "fp32": F32,
}
# Calls that load or build a whole model, whose `dtype=` is the model's dtype.
_MODEL_LOADERS = frozenset({"from_pretrained", "from_single_file", "from_config", "_from_config"})
_PIPELINES = frozenset({"transformers.pipeline"})
# Calls that cast a module's trainable parameters in place (`DtypeFacts._converted_in_place`).
_TRAINABLE_CASTS = frozenset({"diffusers.training_utils.cast_training_params"})
# PEFT's calls that prepare a model for adapter training (`DtypeFacts._adapted`).
_ADAPTER_WRAPPERS = frozenset(
    {
        "peft.get_peft_model",
        "peft.PeftModel.from_pretrained",
        "peft.PeftModelForCausalLM.from_pretrained",
        "peft.prepare_model_for_kbit_training",
    }
)
_ON_GPU = "the branch of `torch.cuda.is_available()` a GPU takes"
# Names of a model passed around as a value (`def generate(model, idx)`).
_MODEL_NAME = re.compile(r"^(model|net|network)$|_model$")
# Parameters that by their name hold integers: token ids and indices (`input_ids`, `idx`,
# `position_ids`), counts and sizes (`num_heads`, `n_head`, `seq_len`, `lengths`).
_INTEGER_NAME = re.compile(
    r"^(ids|idx|indices|index|positions|lengths?|seq_?len)$"
    r"|_(ids?|idx|indices|len|length|lengths)$|^(num|n)_"
)


def shorten(code: str, limit: int = 60) -> str:
    """Code on one line for a message, cut to `limit` characters."""
    code = " ".join(code.split())
    return code if len(code) <= limit else code[: limit - 3] + "..."


def _under(states: list[Autocast], facts: DtypeFacts) -> str:
    """`under autocast at line 12`, or `if the caller enables autocast` for the caller's."""
    here = sorted({facts.line(s.where) for s in states if s.where is not None})
    if here:
        return "under autocast at line " + ", ".join(map(str, here))
    modes = tuple(dict.fromkeys(s.mode for s in states if s.mode is not None))
    if modes:
        return "under " + _modes_text(facts.profile, modes)
    return "if the caller enables autocast"


def _skipped(function: cst.FunctionDef) -> bool:
    """A body that is a lone `pass`: what `amplint.static.regions` leaves of a body no active rule
    needs (a stub too; either way it says nothing of what the function returns)."""
    body = suite_body(function.body)
    return (
        len(body) == 1
        and isinstance(body[0], cst.SimpleStatementLine)
        and all(isinstance(small, cst.Pass) for small in body[0].body)
    )


def _children(node: cst.CSTNode) -> Iterator[cst.BaseExpression]:
    return (child for child in node.children if isinstance(child, cst.BaseExpression))


def _cast_module(node: cst.BaseExpression) -> cst.Name | cst.Attribute | None:
    """The module a cast standing alone as a statement converts: `model` in `model.half()`,
    `model.cuda().to(dtype)`, `self.model` in `self.model.bfloat16()`; None for any other expression."""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)):
        return None
    method = node.func.attr.value
    if not (method in ops.CAST_METHODS or (method in ("to", "type") and node.args)):
        return None
    receiver = node.func.value
    while (
        isinstance(receiver, cst.Call)
        and isinstance(receiver.func, cst.Attribute)
        and receiver.func.attr.value in ops.MODULE_KEEPING_METHODS | {"to"}
    ):
        receiver = receiver.func.value
    if isinstance(receiver, cst.Name) and receiver.value not in ("self", "cls"):
        return receiver
    if (
        isinstance(receiver, cst.Attribute)
        and isinstance(receiver.value, cst.Name)
        and receiver.value.value == "self"
    ):
        return receiver
    return None


def _converts_itself(klass: cst.ClassDef) -> bool:
    """A module class that overrides `_apply`, the method `.to()`, `.half()` and `.cuda()` go
    through: it decides what becomes of its buffers itself."""
    return any(
        isinstance(item, cst.FunctionDef) and item.name.value == "_apply" for item in suite_body(klass.body)
    )


def _called(node: cst.BaseExpression) -> cst.BaseExpression:
    """What a decorator names: `triton.jit` for `@triton.jit` and `@triton.jit(debug=True)`."""
    return node.func if isinstance(node, cst.Call) else node


def _unsigned(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.expression if isinstance(node, cst.UnaryOperation) else node


def _literal_index(node: cst.Subscript) -> int | None:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    value = node.slice[0].slice.value
    if isinstance(value, cst.Integer):
        return value.evaluated_value  # `0x1`, `1_000` too
    if isinstance(value, cst.UnaryOperation) and isinstance(value.expression, cst.Integer):
        return -value.expression.evaluated_value
    return None


def _equation(node: cst.Call) -> str | None:
    """The literal equation of an `einsum` call, else None."""
    first = node.args[0].value if node.args and node.args[0].keyword is None else None
    value = first.evaluated_value if isinstance(first, cst.SimpleString) else None
    return value if isinstance(value, str) else None


def _float_literal(node: cst.Call) -> float | None:
    if len(node.args) == 1 and isinstance(node.args[0].value, cst.SimpleString):
        try:
            return float(str(node.args[0].value.evaluated_value))
        except ValueError:
            return None
    return None


def _arith(operator: str, left: float | None, right: float | None) -> float | None:
    if left is None or right is None:
        return None
    try:
        if operator == "Add":
            return left + right
        if operator == "Subtract":
            return left - right
        if operator == "Multiply":
            return left * right
        if operator == "Divide" and right:
            return left / right
        if operator == "Power":
            return float(left**right)
    except (OverflowError, ZeroDivisionError):
        return None
    return None


def _rebinds(function: cst.FunctionDef, name: str) -> bool:
    """Whether the body of `function` assigns `name`."""
    return any(
        isinstance(node, cst.Name) and node.value == name
        for target in walk(function.body)
        if isinstance(target, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign))
        for node in walk(target.target)
    )
