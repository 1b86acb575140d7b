"""The interpretation of statements and expressions: bindings, branches (joined), loops (run
twice), names, attributes, comprehensions and operators."""

from __future__ import annotations

import ast
import bisect
import math
import re
from abc import abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import replace

import libcst as cst

from amplint.source import LineIndex
from amplint.static import constants, ops
from amplint.static.engine.attributes import AttributeFacts
from amplint.static.engine.state import Frame
from amplint.static.facts import (
    DTYPE,
    INTEGER,
    INTEGER_FACT,
    KEEP,
    MAX_WHY,
    OFF,
    OTHER,
    OTHER_FACT,
    SCALAR,
    SCALAR_FACT,
    SHORT_NAMES,
    TENSOR,
    UNKNOWN,
    UNKNOWN_FACT,
    Autocast,
    Fact,
    Step,
    agree,
    join,
    modes_text,
    on_host,
    promote,
)
from amplint.static.flow import names_read
from amplint.static.ops import BF16, F16, F32, F64, HALF
from amplint.static.profile import Profile
from amplint.static.regions import called_name
from amplint.static.scopes import suite_body


class Interpreter(AttributeFacts):
    """The interpretation of statements and expressions: bindings, branches (joined), loops (run
    twice), names, attributes, comprehensions and operators._CLASS"""

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

    def _run(self, body: Iterable[cst.BaseStatement], frame: Frame) -> None:
        for statement in body:
            self._statement(statement, frame)

    def _branch(self, bodies: list[Iterable[cst.BaseStatement]], frame: Frame, keep: bool) -> None:
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

    def _statement(self, node: cst.BaseStatement, frame: Frame) -> None:
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
                self._bind(node.target, element if element.kind != SCALAR else SCALAR_FACT, None, frame)
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
                    states = (context - {KEEP}) | (states if KEEP in context else frozenset())
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
            frame.env[node.name.value] = OTHER_FACT

    def _small(self, node: cst.BaseSmallStatement, frame: Frame) -> None:
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
        self, target: cst.BaseExpression, fact: Fact, value: cst.BaseExpression | None, frame: Frame
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

    # -- expressions -----------------------------------------------------------------------------
    def _expr(self, node: cst.BaseExpression, frame: Frame) -> Fact:
        fact = self._evaluate(node, frame)
        previous = self._facts.get(node)
        self._facts[node] = fact if previous is None else join([previous, fact])
        states = self._states.get(node)
        self._states[node] = frame.autocast if states is None else states | frame.autocast
        return fact

    def _evaluate(self, node: cst.BaseExpression, frame: Frame) -> Fact:
        # The commonest kinds first: a libcst class's `isinstance` that fails costs a Python call.
        if isinstance(node, cst.Name):
            return self._name(node, frame)
        if isinstance(node, cst.Attribute):
            return self._attribute(node, frame)
        if isinstance(node, cst.Call):
            return self._call(node, frame)
        if isinstance(node, (cst.Integer, cst.Float)):
            return Fact(SCALAR, number=literal_number(node))
        if isinstance(node, (cst.Imaginary, cst.BaseString)):
            for child in _children(node):
                self._expr(child, frame)
            literal = node.evaluated_value if isinstance(node, cst.SimpleString) else None
            if isinstance(literal, str) and literal in _DTYPE_STRINGS:
                # `torch_dtype="float16"`: a string that names a dtype carries it
                return Fact(OTHER, frozenset({_DTYPE_STRINGS[literal]}), (Step(node, f'`"{literal}"`'),))
            return OTHER_FACT
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
            if value.kind == SCALAR:  # `q.shape[-1]`: a number, whatever it is divided by
                return SCALAR_FACT
            return value if value.kind in (TENSOR, UNKNOWN) else UNKNOWN_FACT
        if isinstance(node, cst.UnaryOperation):
            inner = self._expr(node.expression, frame)
            if isinstance(node.operator, cst.Minus) and inner.number is not None:
                return replace(inner, number=-inner.number)
            if isinstance(node.operator, (cst.BitInvert, cst.Not)):
                return INTEGER_FACT if inner.kind in (TENSOR, INTEGER) else SCALAR_FACT
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
            return INTEGER_FACT if any(f.kind == TENSOR for f in facts) else SCALAR_FACT
        if isinstance(node, cst.IfExp):
            self._expr(node.test, frame)
            branches = [self._expr(node.body, frame), self._expr(node.orelse, frame)]
            taken = self._on_gpu(node.test)
            if taken is None:
                return join(self._guarded(node, branches))
            chosen = branches[taken]
            return replace(chosen, why=(*chosen.why[-(MAX_WHY - 1) :], Step(node.test, _ON_GPU)))
        if isinstance(node, cst.Dict):
            for item in node.elements:
                if isinstance(item, cst.DictElement):
                    self._expr(item.key, frame)
                self._expr(item.value, frame)
            return OTHER_FACT
        if isinstance(node, (cst.Tuple, cst.List)):
            return Fact(OTHER, items=tuple(self._expr(e.value, frame) for e in node.elements))
        if isinstance(node, (cst.ListComp, cst.GeneratorExp)):
            return self._comprehension(node, frame)
        if isinstance(node, cst.NamedExpr):
            fact = self._expr(node.value, frame)
            self._bind(node.target, fact, node.value, frame)
            return fact
        for child in _children(node):
            self._expr(child, frame)
        return UNKNOWN_FACT

    def _name(self, node: cst.Name, frame: Frame) -> Fact:
        fact = frame.env.get(node.value)
        if fact is not None:
            return fact
        qualified = self.ctx.qualified(node)
        if qualified is not None:
            return self._qualified(qualified, node)
        if node.value in ("True", "False", "None"):
            return SCALAR_FACT if node.value != "None" else OTHER_FACT
        if node.value in self._classes or node.value in self._functions:
            return OTHER_FACT
        return self._module_constants().get(node.value, UNKNOWN_FACT)

    def _qualified(self, qualified: str, node: cst.CSTNode) -> Fact:
        dtype = DTYPE_NAMES.get(qualified)
        if dtype is not None:
            return Fact(DTYPE, frozenset({dtype}), (Step(node, f"`{qualified}`"),))
        if qualified in _INTEGER_DTYPE_NAMES:  # `dtype=torch.bool`: an integer tensor, no floating dtype
            return Fact(DTYPE, why=(Step(node, f"`{qualified}`"),), module=INTEGER_DTYPE)
        if qualified in ("math.pi", "math.e", "math.inf", "math.tau"):
            return Fact(SCALAR, number=getattr(math, qualified[5:]))
        if qualified in ("torch.inf", "numpy.inf", "numpy.Inf"):
            return Fact(SCALAR, number=math.inf)
        return OTHER_FACT

    def _attribute(self, node: cst.Attribute, frame: Frame) -> Fact:
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
            return Fact(DTYPE) if value.kind == UNKNOWN else OTHER_FACT
        if name in ops.TENSOR_ATTRIBUTES_SCALAR:
            return SCALAR_FACT
        if name in ("min", "max", "eps", "tiny", "smallest_normal", "bits", "resolution"):
            number = self._finfo_number(node.value, name)
            if number is not None:  # `torch.finfo(torch.float32).min`: a dtype written out
                return Fact(SCALAR, number=number)
            return value if value.kind == SCALAR else SCALAR_FACT
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
        dtype = DTYPE_NAMES.get(written) or DTYPE_NAMES.get(written.replace("numpy.", "torch.", 1))
        if dtype is None and isinstance(arg, cst.Name) and arg.value == "float":
            dtype = F64
        return constants.finfo(dtype, name) if dtype is not None else None

    def _per_item(self, name: str, iterated: Fact, body: cst.BaseExpression, frame: Frame) -> Fact | None:
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

    def _comprehension(self, node: cst.ListComp | cst.GeneratorExp, frame: Frame) -> Fact:
        loop = node.for_in
        per_item = None
        if loop.inner_for_in is None and not loop.ifs and isinstance(loop.target, cst.Name):
            per_item = self._per_item(loop.target.value, self._expr(loop.iter, frame), node.elt, frame)
        joined = self._joined_comprehension(node, frame)
        return per_item if per_item is not None else joined

    def _joined_comprehension(self, node: cst.ListComp | cst.GeneratorExp, frame: Frame) -> Fact:
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

    def _binary(self, operator: str, left: Fact, right: Fact, node: cst.CSTNode, frame: Frame) -> Fact:
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
                INTEGER_FACT
                if TENSOR in (left.kind, right.kind) or INTEGER in (left.kind, right.kind)
                else SCALAR_FACT
            )
        result = promote([left, right])
        return replace(result, host=True) if on_host([left, right]) else result

    def _op(
        self,
        op: str,
        inputs: list[Fact],
        node: cst.CSTNode,
        frame: Frame,
        natural: Fact | None = None,
        cpu_op: str | None = None,
    ) -> Fact:
        """The result of `op` on `inputs` under each autocast state the code can run in (`cpu_op`:
        what CPU autocast sees of an op it has no kernel for, an einsum's decomposition)."""
        if natural is not None:
            base = natural
        else:
            base = agree(inputs, node, op) if ops.same_dtype(op) else promote(inputs)
        if not any(fact.kind in (TENSOR, UNKNOWN) for fact in inputs) and natural is None:
            return base
        # Tensors made on the CPU here: only CPU autocast reaches the op.
        host = natural is None and on_host(inputs)
        autocast = (
            ([s for s in frame.autocast if s.device in ("cpu", None)] or [OFF]) if host else frame.autocast
        )
        lower: dict[str, list[Autocast]] = {}  # by how the states are described
        fp32: list[Autocast] = []
        results: list[Fact] = []
        # In a fixed order: the set's would follow string hashes, and messages would change per run.
        for state in sorted(autocast, key=self._state_order):
            seen = cpu_op if cpu_op is not None and state.device == "cpu" else op
            policy = ops.autocast_policy(seen, state.device) if state.device else None
            if policy == "lower" and state.dtype and base.dtypes != {F64}:  # autocast leaves float64 alone
                lower.setdefault(_under([state], self), []).append(state)
            elif policy == "fp32" and base.dtypes != {F32}:
                fp32.append(state)
            else:
                results.append(base)
        for under, states in lower.items():
            dtypes = frozenset(s.dtype for s in states if s.dtype)
            names = "/".join(SHORT_NAMES[d] for d in ops.FLOATS if d in dtypes)
            step = Step(node, f"`{op}` runs in {names} {under}", dtypes & HALF, _side(states, self))
            caller = states[0].where is None and states[0].mode is None
            results.append(Fact(TENSOR, dtypes, (step,), caller=caller))
        if fp32:
            results.append(
                Fact(
                    TENSOR,
                    frozenset({F32}),
                    (Step(node, f"`{op}` runs in float32 {_under(fp32, self)}", side=_side(fp32, self)),),
                )
            )
        result = join(results)
        return replace(result, host=True) if host else result

    def _state_order(self, state: Autocast) -> tuple[object, ...]:
        mode = state.mode
        return (
            state.device or "",
            state.dtype or "",
            self.line(state.where) if state.where is not None else 0,
            (*mode.rank(), mode.path, mode.line, mode.what, mode.via) if mode is not None else (),
        )

    # Provided by the layers above (`amplint.static.engine`).
    @abstractmethod
    def _call(self, node: cst.Call, frame: Frame) -> Fact: ...

    @abstractmethod
    def _converted_in_place(
        self, node: cst.BaseExpression, fact: Fact
    ) -> Iterator[tuple[cst.Name | cst.Attribute, Fact]]: ...


# Integer and boolean dtypes: a DTYPE fact with no floating dtype, marked by `module`.
INTEGER_DTYPE = "integer dtype"


_INTEGER_DTYPE_NAMES = frozenset(
    f"torch.{name}" for name in ("bool", "long", "int64", "int", "int32", "int16", "short", "int8", "uint8")
)


DTYPE_NAMES = {
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
    **{name.removeprefix("torch."): dtype for name, dtype in DTYPE_NAMES.items()},
    **DTYPE_NAMES,
    "fp16": F16,
    "bf16": BF16,
    "fp32": F32,
}


# Every spelling by which a file's own code makes a value half: a dtype (`torch.float16`, `"bf16"`),
# a cast (`.half()`), an autocast region (`autocast` inside longer names too). Where none is written
# and no execution mode reaches the file, each half value the engine finds is one its caller may
# pass (`Fact.caller`).
def _spellings(dtypes: frozenset[str]) -> frozenset[str]:
    """The words that write one of `dtypes`: its names and strings, and the casts to it."""
    names = {name.removeprefix("torch.") for name, dtype in _DTYPE_STRINGS.items() if dtype in dtypes}
    return frozenset(names | {method for method, dtype in ops.CAST_METHODS.items() if dtype in dtypes})


HALF_SPELLINGS = _spellings(HALF)
# A float16 setting is spelled with one of these (`torch.float16`, `"fp16"`, `.half()`), or is
# autocast (float16 by default on CUDA): a file without them sets no float16.
FLOAT16_WORDS = _spellings(frozenset({F16})) | {"autocast"}


def half_only_by_caller(
    words: frozenset[str], text: str, profile: Profile, tree: ast.Module | None = None
) -> bool:
    """Whether every half value in a file (its `words`, its `text`) is the caller's choice: no
    precision is configured, no execution mode reaches it, nothing in it is autocast, and it spells
    no half dtype or cast (`HALF_SPELLINGS`), or (given Python's `tree` of it) spells them only
    where they make no value half (`_makes_half`). Then every finding of a rule that rests on half
    values (`Rule.rests_on_half`) holds only when the caller runs the code in half."""
    if profile.origin != "caller" or profile.modes or "autocast" in text:
        return False
    return words.isdisjoint(HALF_SPELLINGS) or (tree is not None and not _makes_half(tree, text))


def _makes_half(tree: ast.Module, text: str) -> bool:
    """Whether a half spelling stands where it can make a value half: anywhere but as an operand of
    a comparison (`x.dtype == torch.float16`, `in (torch.float16, torch.bfloat16)`: a bool, and a
    branch on it keeps the value the caller's), the argument of `finfo` (a number), or a docstring.
    A half name imported from elsewhere (`from torch import float16`) counts wherever it is used.
    Only the statements holding a line that spells one are read (a model file's tree is large)."""
    starts = LineIndex(text).starts  # lines as Python counts them: `\r` alone ends one too
    lines = {bisect.bisect_right(starts, match.start()) for match in _SPELLED.finditer(text)}
    statements: list[ast.AST] = list(tree.body)
    while statements:
        node = statements.pop()
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        decorators: list[ast.expr] = getattr(node, "decorator_list", [])
        start = min([start, *(decorator.lineno for decorator in decorators)]) if start is not None else None
        if start is not None and not any(start <= line <= (end or start) for line in lines):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        parts: list[ast.AST] = []
        for _, value in ast.iter_fields(node):
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, (ast.stmt, ast.excepthandler)):
                    statements.append(child)
                elif isinstance(child, ast.AST):
                    parts.append(child)
        if _spelled_where_it_makes_half(parts):
            return True
    return False


# A word that spells a half dtype or cast, to find the lines `_makes_half` reads.
_SPELLED = re.compile(r"\b(?:" + "|".join(sorted(HALF_SPELLINGS)) + r")\b")


def _spelled_where_it_makes_half(roots: list[ast.AST]) -> bool:
    nodes = [node for root in roots for node in ast.walk(root)]
    harmless: set[int] = set()
    for node in nodes:
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                harmless.add(id(operand))
                if isinstance(operand, (ast.Tuple, ast.List, ast.Set)):
                    harmless.update(id(element) for element in operand.elts)
        elif isinstance(node, ast.Call) and called_name(node.func) == "finfo":
            harmless.update(id(argument) for argument in node.args)
    for node in nodes:
        if isinstance(node, ast.alias) and node.name.rsplit(".", 1)[-1] in HALF_SPELLINGS:
            return True
        spelled = (isinstance(node, ast.Attribute) and node.attr in HALF_SPELLINGS) or (
            isinstance(node, ast.Constant)
            and node.value in _DTYPE_STRINGS
            and _DTYPE_STRINGS[node.value] in HALF
        )
        if spelled and id(node) not in harmless:
            return True
    return False


_ON_GPU = "the branch of `torch.cuda.is_available()` a GPU takes"


def _under(states: list[Autocast], facts: Interpreter) -> str:
    """`under autocast at line 12`, or `if the caller enables autocast` for the caller's."""
    here = sorted({facts.line(s.where) for s in states if s.where is not None})
    if here:
        return "under autocast at line " + ", ".join(map(str, here))
    modes = tuple(dict.fromkeys(s.mode for s in states if s.mode is not None))
    if modes:
        return "under " + modes_text(facts.profile, modes)
    return "if the caller enables autocast"


def _side(states: list[Autocast], facts: Interpreter) -> bool:
    """Whether `_under(states)` names execution modes that tests, benchmarks or examples alone set."""
    if any(s.where is not None for s in states):
        return False
    modes = tuple(dict.fromkeys(s.mode for s in states if s.mode is not None))
    return bool(modes) and facts.profile.only_in(modes) is not None


def literal_number(node: cst.Integer | cst.Float) -> float:
    """A number literal's value (an integer past float's range, `10**400` spelled out, is inf)."""
    try:
        return float(node.evaluated_value)
    except OverflowError:
        return math.inf


def _children(node: cst.CSTNode) -> Iterator[cst.BaseExpression]:
    return (child for child in node.children if isinstance(child, cst.BaseExpression))


def _literal_index(node: cst.Subscript) -> int | None:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    value = node.slice[0].slice.value
    if isinstance(value, cst.Integer):
        return value.evaluated_value  # `0x1`, `1_000` too
    if isinstance(value, cst.UnaryOperation) and isinstance(value.expression, cst.Integer):
        return -value.expression.evaluated_value
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
