"""AMP014: log/exp compositions that have a numerically stable fused form."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import libcst as cst

from amplint.rule import Rule
from amplint.static.attention import SOFTMAX_FUNCTIONS, softmax_module_call
from amplint.static.consumers import op_dtype
from amplint.static.context import FileContext, Finding, FixPlan, scopes_holding
from amplint.static.facts import Fact, why_half
from amplint.static.flow import Flow, Policy, analyse
from amplint.static.ops import autocast_policy
from amplint.static.patterns import (
    argument,
    callee_name,
    function_call,
    method_call,
    needs_parentheses,
    with_method,
)
from amplint.static.scopes import Scope, walk

_LOG_FUNCTIONS = frozenset({"torch.log"})
_EXP_FUNCTIONS = frozenset({"torch.exp"})
_SUM_FUNCTIONS = frozenset({"torch.sum"})
_SIGMOID_FUNCTIONS = frozenset({"torch.sigmoid", "torch.nn.functional.sigmoid", "torch.special.expit"})
_ONE = frozenset({"1", "1.0", "1."})
_TWO = frozenset({"2", "2.0", "2."})
# Without one of these words a name passed to `log` cannot hold a softmax, sigmoid or sum of exp.
_NAMED_INNER = frozenset({"softmax", "sigmoid", "expit", "sum"})
# Integer-valued results in a floating dtype: `log(1 + floor(n))` loses nothing.
_INTEGER_VALUED = frozenset({"floor", "ceil", "round", "trunc", "bincount"})
# What a stable exponent subtracts: the maximum, or a log-sum-exp.
_STABILISERS = frozenset({"max", "amax", "logsumexp", "max_values", "cummax"})

_UNDERFLOW = (
    "a probability that rounds to 0 (below about 1e-38 in float32 and bfloat16, 6e-8 in float16) gives "
    "`-inf` and NaN gradients"
)


# The ops a composition is made of, and the fused op that replaces it.
Ops = tuple[tuple[str, ...], str]


@dataclass(frozen=True)
class Problem:
    node: cst.CSTNode  # what the finding points at, and what a fix replaces
    message: str
    help: str
    fixed: cst.BaseExpression | None = None
    description: str = ""
    needs_torch: bool = False
    # For the precision losses (`log1p`, `expm1`): the engine's fact that the operand may be half.
    fact: Fact | None = None
    # The ops of the composition and the fused op that replaces it (`_autocast_keeps`); None where
    # the fix casts its input to the composition's dtype itself.
    ops: Ops | None = None


class UnstableLogExp(Rule):
    """
    ## What it does
    Flags compositions of `log` and `exp` that lose precision or overflow, where PyTorch has a fused,
    stable form: `log(softmax(x))` (use `log_softmax`), `log(sigmoid(x))` (`logsigmoid`),
    `log(sum(exp(x)))` (`logsumexp`), `log(exp(a) + exp(b))` (`logaddexp`), `log(1 + x)`
    (`log1p`), `log(1 + exp(x))` (`softplus`), `exp(x) - 1` (`expm1`), and a softmax written by
    hand as `exp(x) / exp(x).sum(...)` without subtracting the maximum first.

    The overflows and underflows (`log_softmax`, `logsigmoid`, `logsumexp`, `logaddexp`,
    `softplus`, the hand-written softmax) do not depend on the dtype: they are unstable in any
    precision (float32's `exp` overflows above 88 too), so they are flagged whatever it is. The forms
    that only lose precision (`log1p`, `expm1`) are flagged where the dtype-facts engine says the
    operand may be bfloat16/float16 (in float32 they cost a few ulps at step-size magnitudes), and
    not integer-valued (`floor`, `round`); a value that only the caller's choice makes half counts
    in model code (a file with `torch.nn.Module` classes), not in a scheduler's step sizes.

    Off by default (opt-in): on public projects it was not written against, fewer than 60% of its
    findings were worth acting on (docs/precision.md). Turn it on with `--extend-select AMP014` or
    `extend-select = ["AMP014"]` under `[tool.amplint]`.

    ## Why is this bad?
    `softmax` and `sigmoid` round small probabilities to 0 (below about 1e-38 in float32 and
    bfloat16, 6e-8 in float16), and `log(0)` is `-inf`, whose gradient is NaN. `exp` overflows to
    `inf` above 88 (11 in float16), so a sum of exponentials, or a softmax that does not subtract
    the maximum, turns into `inf` and then NaN. `1 + x` rounds `x` away when it is below about 2e-3
    in bfloat16 (2e-4 in float16), so `log(1 + x)` returns 0 instead of about `x`; `exp(x) - 1`
    cancels the same way. Half precision makes all of these happen at
    ordinary values; the fused functions compute the same quantity without the intermediate that
    overflows or rounds.

    ## Example
    ```python
    log_probs = torch.log(torch.softmax(logits, dim=-1))
    ```

    ## Fix
    ```python
    log_probs = torch.log_softmax(logits, dim=-1)
    ```
    `--fix` rewrites the direct compositions (keeping the module's spelling: `F.softmax(...).log()`
    becomes `F.log_softmax(...)`); where the intermediate is bound to a name, the help shows the
    fused call.

    A rewrite keeps the dtype the composition gave in every mode. Outside autocast every op keeps
    its input's dtype; CUDA autocast runs `log`, `exp`, `sum` and `softmax` in float32, and so it
    runs `log_softmax`, `logsumexp`, `softplus`, `log1p` and `expm1`, but not `logsigmoid` or
    `logaddexp` (`amplint.static.ops`): `log(sigmoid(x))` of a half `x` is float32 there and
    `logsigmoid(x)` would be half, and less accurate. So the fix casts the input to the dtype `log`
    gives it where the code runs, float32 under CUDA autocast and its own dtype elsewhere:
    ```python
    logits + logits.sigmoid().log()  # x-transformers' sigsoftmax
    logits + F.logsigmoid(logits.to(logits.new_empty(0).log().dtype))
    ```
    Where the input's dtype cannot be read without computing it twice (`self.proj(x)`), and for
    `logaddexp`, no fix is offered; the help shows the fused call.

    ## References
    - `torch.log_softmax`, `torch.nn.functional.logsigmoid`, `torch.logsumexp`, `torch.logaddexp`,
      `torch.log1p`, `torch.expm1`, `torch.nn.functional.softplus`
    """

    code = "AMP014"
    default_on = False
    name = "unstable-log-exp"
    summary = "log(softmax), log(sum(exp)), log(1 + x), exp(x) - 1 and hand-written softmax instead of the stable fused op"
    triggers = frozenset({"log", "exp"})
    region_words = triggers

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        reported: set[cst.CSTNode] = set()
        named: list[cst.CSTNode] = []
        pending: dict[cst.CSTNode, Problem] = {}
        for call in ctx.index.calls:
            if _is_log(ctx, call):
                problem = _log_problem(ctx, call, None)
                if problem is not None:
                    reported.add(problem.node)
                    pending[problem.node] = problem
                elif isinstance(_log_input(ctx, call), cst.Name) and ctx.words & _NAMED_INNER:
                    named.append(call)
        for node in ctx.index.top_of:
            if isinstance(node, cst.BinaryOperation) and node not in reported:
                problem = _expm1_problem(ctx, node) or _softmax_problem(ctx, node, None)
                if problem is not None:
                    reported.add(problem.node)
                    pending[problem.node] = problem
                elif _divides_a_name(ctx, node):
                    named.append(node)
        for problem in pending.values():
            yield _finding(ctx, problem)
        if named:
            yield from _named_problems(ctx, named, reported)


def _named_problems(
    ctx: FileContext, named: list[cst.CSTNode], reported: set[cst.CSTNode]
) -> Iterator[Finding]:
    """The compositions whose inner value is bound to a name first (`p = softmax(x); log(p)`),
    judged when the flow reaches them so that the name means what it means at that line."""
    for scope in scopes_holding(ctx, named):
        for problem in _scope_problems(ctx, scope, set(named), reported):
            yield _finding(ctx, problem)


def _scope_problems(
    ctx: FileContext, scope: Scope, wanted: set[cst.CSTNode], reported: set[cst.CSTNode]
) -> list[Problem]:
    problems: list[Problem] = []

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        if node in wanted and node not in reported:
            reported.add(node)
            problem: Problem | None = None
            if isinstance(node, cst.Call):
                problem = _log_problem(ctx, node, flow)
            elif isinstance(node, cst.BinaryOperation):
                problem = _softmax_problem(ctx, node, flow)
            if problem is not None:
                problems.append(problem)
        return False

    analyse(scope, Policy(seed=seed))
    return problems


def _finding(ctx: FileContext, problem: Problem) -> Finding:
    message, fact = problem.message, problem.fact
    if fact is not None:
        message += "; " + why_half(fact)
    evidence = fact.why if fact is not None else ()
    caller = fact is not None and fact.caller
    if problem.fixed is not None and problem.ops is not None and not _autocast_keeps(*problem.ops):
        composed, fused = problem.ops
        lost = f"; autocast runs `{'`/`'.join(composed)}` in float32 and `{fused}` in the input's dtype: cast its inputs to float32 there"
        return Finding(problem.node, message, help=problem.help + lost, evidence=evidence, caller_only=caller)
    if problem.fixed is None:
        return Finding(problem.node, message, help=problem.help, evidence=evidence, caller_only=caller)
    fix = FixPlan(problem.description, ((problem.node, problem.fixed),), problem.needs_torch)
    return Finding(problem.node, message, fix=fix, help=problem.help, evidence=evidence, caller_only=caller)


# -- recognisers ----------------------------------------------------------------------------------


def _is_log(ctx: FileContext, call: cst.Call) -> bool:
    return function_call(ctx, call, _LOG_FUNCTIONS) or (
        method_call(ctx, call, frozenset({"log"})) is not None and not call.args
    )


def _log_input(ctx: FileContext, call: cst.Call) -> cst.BaseExpression | None:
    if function_call(ctx, call, _LOG_FUNCTIONS):
        return argument(call, 0, "input")
    return method_call(ctx, call, frozenset({"log"}))


def _exp_input(ctx: FileContext, node: cst.BaseExpression) -> cst.BaseExpression | None:
    """`x` in `torch.exp(x)` or `x.exp()`."""
    if not isinstance(node, cst.Call):
        return None
    if function_call(ctx, node, _EXP_FUNCTIONS):
        return argument(node, 0, "input")
    if method_call(ctx, node, frozenset({"exp"})) is not None and not node.args:
        return method_call(ctx, node, frozenset({"exp"}))
    return None


def _is_method(call: cst.Call, ctx: FileContext) -> bool:
    return isinstance(call.func, cst.Attribute) and ctx.qualified(call.func) is None


def _softmax_call(ctx: FileContext, node: cst.BaseExpression) -> cst.Call | None:
    if not isinstance(node, cst.Call):
        return None
    if function_call(ctx, node, SOFTMAX_FUNCTIONS) or softmax_module_call(ctx, node):
        name = ctx.qualified(node.func) or ""
        return node if not name.endswith("log_softmax") else None
    if method_call(ctx, node, frozenset({"softmax"})) is not None:
        return node
    return None


def _sigmoid_input(ctx: FileContext, node: cst.BaseExpression) -> cst.BaseExpression | None:
    if not isinstance(node, cst.Call):
        return None
    if function_call(ctx, node, _SIGMOID_FUNCTIONS):
        return argument(node, 0, "input")
    receiver = method_call(ctx, node, frozenset({"sigmoid"}))
    return receiver if receiver is not None and not node.args else None


def _sum_of(ctx: FileContext, node: cst.BaseExpression) -> tuple[cst.BaseExpression, list[cst.Arg]] | None:
    """(summed, the other arguments) for `summed.sum(...)` or `torch.sum(summed, ...)`."""
    if not isinstance(node, cst.Call):
        return None
    receiver = method_call(ctx, node, frozenset({"sum"}))
    if receiver is not None:
        return receiver, list(node.args)
    if function_call(ctx, node, _SUM_FUNCTIONS) and node.args and node.args[0].keyword is None:
        return node.args[0].value, list(node.args[1:])
    return None


def _is_one(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) and node.value in _ONE


def _one_plus(node: cst.BaseExpression) -> tuple[str, cst.BaseExpression] | None:
    """("+", x) for `1 + x` or `x + 1`; ("-", x) for `1 - x`."""
    if not isinstance(node, cst.BinaryOperation):
        return None
    if isinstance(node.operator, cst.Add):
        if _is_one(node.left):
            return "+", node.right
        if _is_one(node.right):
            return "+", node.left
    if isinstance(node.operator, cst.Subtract) and _is_one(node.left):
        return "-", node.right
    return None


def _stabilised(ctx: FileContext, exponent: cst.BaseExpression, flow: Flow | None) -> bool:
    """The exponent subtracts a maximum or a log-sum-exp (`x - x.max(-1, keepdim=True).values`,
    `x - m` with `m = x.amax(...)`, `scores - lse`), or is shifted by some tensor (`x - m`)."""
    if (
        isinstance(exponent, cst.BinaryOperation)
        and isinstance(exponent.operator, cst.Subtract)
        and not isinstance(exponent.right, (cst.Integer, cst.Float))
    ):
        return True
    for node in walk(exponent):
        if isinstance(node, cst.Name):
            value = node.value.lower()
            if "max" in value or "lse" in value or "logsumexp" in value:
                return True
            if flow is not None:
                bound = flow.resolve(node)
                if bound is not node and any(_stabiliser_call(ctx, inner) for inner in walk(bound)):
                    return True
        elif _stabiliser_call(ctx, node):
            return True
    return False


def _negated_square(exponent: cst.BaseExpression) -> bool:
    """`-0.5 * (x / sigma).pow(2)`, `-x.pow(2) / (2 * s**2)`, `-(d ** 2)`: a Gaussian, whose `exp`
    is at most 1."""
    negated = False
    squared = False
    for node in walk(exponent):
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            negated = True
        elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
            squared = squared or (
                isinstance(node.right, (cst.Integer, cst.Float)) and node.right.value in _TWO
            )
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            method = node.func.attr.value
            first = node.args[0].value if node.args else None
            squared = (
                squared
                or method == "square"
                or (method == "pow" and isinstance(first, (cst.Integer, cst.Float)) and first.value in _TWO)
            )
    return negated and squared


def _stabiliser_call(ctx: FileContext, node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.Call):
        return False
    func = node.func
    if isinstance(func, cst.Attribute):
        return func.attr.value in _STABILISERS
    return isinstance(func, cst.Name) and func.value in _STABILISERS


# -- the problems -----------------------------------------------------------------------------------


def _log_problem(ctx: FileContext, call: cst.Call, flow: Flow | None) -> Problem | None:
    data = _log_input(ctx, call)
    if data is None:
        return None
    direct = flow is None
    inner = flow.resolve(data) if flow is not None else data
    if inner is data and not direct:
        return None
    if not direct and not isinstance(data, cst.Name):
        return None
    method = _is_method(call, ctx)

    softmax = _softmax_call(ctx, inner)
    if softmax is not None:
        message = f"`log` of a softmax underflows: {_UNDERFLOW}; `log_softmax` computes `x - logsumexp(x)` and stays finite"
        if softmax_module_call(ctx, softmax):
            return Problem(call, message, "use an `nn.LogSoftmax` module (or `torch.log_softmax`) instead")
        renamed = _renamed(softmax, "log_softmax")
        shown = _code(ctx, renamed or softmax)
        ops: Ops = (("log", "softmax"), "log_softmax")
        return Problem(call, message, f"`{shown}`", renamed if direct else None, "Use `log_softmax`", ops=ops)

    sigmoid_x = _sigmoid_input(ctx, inner)
    if sigmoid_x is not None:
        message = f"`log` of a sigmoid underflows: {_UNDERFLOW}; `logsigmoid` stays finite"
        return _logsigmoid(ctx, call, message, sigmoid_x, direct, negate=False)

    summed = _sum_of(ctx, inner)
    if summed is not None:
        exponent = _exp_input(ctx, flow.resolve(summed[0]) if flow is not None else summed[0])
        if exponent is None or _stabilised(ctx, exponent, flow):
            return None
        message = (
            "`log(sum(exp(x)))` overflows: `exp` is `inf` above 88 (11 in float16), and underflow to 0 "
            "gives `-inf`; `logsumexp` subtracts the maximum first"
        )
        logsumexp = _logsumexp(ctx, call, summed, exponent)
        needs_torch = logsumexp is not None and not _is_method(logsumexp, ctx) and ctx.torch_name()[1]
        ops = (("log", "sum", "exp"), "logsumexp")
        return _maybe_fixed(ctx, call, message, logsumexp, "Use `logsumexp`", direct, needs_torch, ops)

    if isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Add):
        left, right = _exp_input(ctx, inner.left), _exp_input(ctx, inner.right)
        if left is not None and right is not None and not _stabilised(ctx, inner, flow):
            torch_name, needs_torch = ctx.torch_name()
            fixed = cst.Call(
                func=cst.Attribute(value=torch_name, attr=cst.Name("logaddexp")),
                args=[_arg(left, last=False), _arg(right)],
            )
            message = "`log(exp(a) + exp(b))` overflows once `a` or `b` passes 88 (11 in float16); `logaddexp` does not"
            ops = (("log", "exp"), "logaddexp")
            return _maybe_fixed(ctx, call, message, fixed, "Use `logaddexp`", direct, needs_torch, ops)

    one = _one_plus(inner)
    if one is not None and direct:
        return _log1p_problem(ctx, call, one, method, direct)
    return None


def _log1p_problem(
    ctx: FileContext, call: cst.Call, one: tuple[str, cst.BaseExpression], method: bool, direct: bool
) -> Problem | None:
    sign, x = one
    exponent = _exp_input(ctx, x)
    if exponent is not None and sign == "+":
        fixed, needs_torch = _functional(ctx, "softplus", exponent)
        message = (
            "`log(1 + exp(x))` is a softplus written by hand: `exp` overflows to `inf` above 88 (11 in "
            "float16) and `1 + exp(x)` rounds small values away; `softplus` does neither"
        )
        ops: Ops = (("log", "exp"), "softplus")
        return _maybe_fixed(ctx, call, message, fixed, "Use `softplus`", direct, needs_torch, ops)
    fact = _half_operand(ctx, x if exponent is None else exponent)
    if fact is None:
        return None
    if exponent is not None:
        torch_name, needs_torch = ctx.torch_name()
        expm1 = cst.Call(func=cst.Attribute(value=torch_name, attr=cst.Name("expm1")), args=[_arg(exponent)])
        fixed = cst.Call(
            func=cst.Attribute(value=torch_name, attr=cst.Name("log")),
            args=[_arg(cst.UnaryOperation(operator=cst.Minus(), expression=expm1))],
        )
        message = (
            "`log(1 - exp(x))` cancels: for `x` near 0, `exp(x)` rounds to 1 and the result is `-inf`; "
            "`log(-expm1(x))` keeps the digits"
        )
        ops = (("log", "exp"), "log")  # `log(-expm1(x))`: the outer op stays `log`
        problem = _maybe_fixed(ctx, call, message, fixed, "Use `expm1`", direct, needs_torch, ops)
        return replace(problem, fact=fact)
    sigmoid_x = _sigmoid_input(ctx, x)
    if sigmoid_x is not None and sign == "-":
        message = (
            f"`log(1 - sigmoid(x))` underflows: {_UNDERFLOW}; `logsigmoid(-x)` is the same value, stable"
        )
        return _logsigmoid(ctx, call, message, sigmoid_x, direct, negate=True)
    operand = x if sign == "+" else _negated(x)
    if method:
        fixed_expr: cst.BaseExpression = with_method(operand, "log1p")
        needs_torch = False
    else:
        torch_name, needs_torch = ctx.torch_name()
        fixed_expr = cst.Call(
            func=cst.Attribute(value=torch_name, attr=cst.Name("log1p")), args=[_arg(operand)]
        )
    message = (
        f"`log(1 {sign} x)` loses `x` when it is small: `1 {sign} x` rounds to 1 once `|x|` is below about "
        "2e-3 in bfloat16 (2e-4 in float16, 3e-8 in float32), so the log is 0 where `log1p` is accurate"
    )
    ops = (("log",), "log1p")
    return replace(
        _maybe_fixed(ctx, call, message, fixed_expr, "Use `log1p`", direct, needs_torch, ops), fact=fact
    )


def _half_operand(ctx: FileContext, x: cst.BaseExpression) -> Fact | None:
    """The engine's fact of `x` in `log(1 + x)` or `exp(x) - 1` where it may be bfloat16/float16,
    which the cancellation costs all its digits at ordinary values (in float32 only below 1e-7,
    a few ulps for step-size arithmetic); None for a float32 or integer-valued operand. A value
    that only the caller's choice makes half counts in model code (a file with `torch.nn.Module`
    classes, whose weights `.half()` or `torch_dtype=` convert), not in a scheduler's step sizes."""
    fact = ctx.facts.of(x)
    if not fact.may_be_half or any(
        isinstance(node, cst.Call) and callee_name(node) in _INTEGER_VALUED for node in walk(x)
    ):
        return None
    return fact if not fact.caller or _model_code(ctx) else None


def _model_code(ctx: FileContext) -> bool:
    """Whether a class of the file derives from `torch.nn.Module` (directly or through another)."""
    classes = {s.name.value: s for s in ctx.module.body if isinstance(s, cst.ClassDef)}
    seen: set[str] = set()

    def module(klass: cst.ClassDef) -> bool:
        seen.add(klass.name.value)
        for base in klass.bases:
            name = ctx.code(base.value)
            if ctx.qualified(base.value) == "torch.nn.Module":
                return True
            if name in classes and name not in seen and module(classes[name]):
                return True
        return False

    return any(module(klass) for klass in classes.values())


def _expm1_problem(ctx: FileContext, node: cst.BinaryOperation) -> Problem | None:
    """`exp(x) - 1` and `1 - exp(x)`."""
    if not isinstance(node.operator, cst.Subtract):
        return None
    if _is_one(node.right):
        exp_call, negate = node.left, False
    elif _is_one(node.left):
        exp_call, negate = node.right, True
    else:
        return None
    x = _exp_input(ctx, exp_call)
    fact = _half_operand(ctx, x) if x is not None else None
    if x is None or fact is None:
        return None
    assert isinstance(exp_call, cst.Call)
    needs_torch = False
    if _is_method(exp_call, ctx):
        expm1: cst.BaseExpression = with_method(x, "expm1")
    else:
        torch_name, needs_torch = ctx.torch_name()
        expm1 = cst.Call(func=cst.Attribute(value=torch_name, attr=cst.Name("expm1")), args=[_arg(x)])
    fixed: cst.BaseExpression = (
        cst.UnaryOperation(operator=cst.Minus(), expression=expm1) if negate else expm1
    )
    written = "1 - exp(x)" if negate else "exp(x) - 1"
    if node.lpar:  # the replacement goes inside the parentheses, which stay
        fixed = fixed.with_changes(lpar=node.lpar, rpar=node.rpar)
    message = (
        f"`{written}` cancels: for small `x`, `exp(x)` rounds to 1 and the difference keeps none of `x`'s "
        "digits (in bfloat16 anything below about 1e-3 becomes 0); `expm1` is accurate"
    )
    ops = (("exp",), "expm1")
    return Problem(node, message, f"`{_code(ctx, fixed)}`", fixed, "Use `expm1`", needs_torch, fact, ops)


def _divides_a_name(ctx: FileContext, node: cst.BinaryOperation) -> bool:
    """`e / e.sum(...)`: a name divided by its own sum (is `e` an exponential? the flow tells)."""
    if not isinstance(node.operator, cst.Divide) or not isinstance(node.left, cst.Name):
        return False
    denominator = node.right
    if isinstance(denominator, cst.BinaryOperation) and isinstance(denominator.operator, cst.Add):
        denominator = denominator.left
    summed = _sum_of(ctx, denominator)
    return summed is not None and isinstance(summed[0], cst.Name) and summed[0].value == node.left.value


def _softmax_problem(ctx: FileContext, node: cst.BinaryOperation, flow: Flow | None) -> Problem | None:
    """`exp(x) / exp(x).sum(...)` (or with the exponentials bound to a name) without the maximum
    subtracted."""
    if not isinstance(node.operator, cst.Divide):
        return None
    numerator = flow.resolve(node.left) if flow is not None else node.left
    x = _exp_input(ctx, numerator)
    if x is None:
        return None
    denominator = node.right
    if isinstance(denominator, cst.BinaryOperation) and isinstance(denominator.operator, cst.Add):
        denominator = denominator.left  # `+ eps`
    summed = _sum_of(ctx, denominator)
    if summed is None or not _same_exponentials(ctx, node.left, summed[0], flow):
        return None
    if _stabilised(ctx, x, flow) or _negated_square(x):
        return None
    message = (
        "a softmax written as `exp(x) / sum(exp(x))` without subtracting the maximum overflows to `inf` "
        "(then NaN) once a logit passes 88 (11 in float16); `softmax` subtracts the maximum first"
    )
    dim = argument_dim(summed[1])
    keepdim = next((arg.value for arg in summed[1] if arg.keyword and arg.keyword.value == "keepdim"), None)
    fixed: cst.BaseExpression | None = None
    needs_torch = False
    if dim is not None and isinstance(keepdim, cst.Name) and keepdim.value == "True":
        torch_name, needs_torch = ctx.torch_name()
        fixed = cst.Call(
            func=cst.Attribute(value=torch_name, attr=cst.Name("softmax")),
            args=[_arg(x, last=False), _arg(dim, keyword="dim")],
        )
    direct = flow is None
    shown = _code(ctx, fixed) if fixed is not None else "torch.softmax(x, dim=...)"
    if not direct or fixed is None:
        return Problem(node, message, f"`{shown}`")
    ops = (("exp", "sum"), "softmax")
    return Problem(node, message, f"`{shown}`", fixed, "Use `softmax`", needs_torch, ops=ops)


def argument_dim(args: list[cst.Arg]) -> cst.BaseExpression | None:
    positional = [arg.value for arg in args if arg.keyword is None and not arg.star]
    keyword = next((arg.value for arg in args if arg.keyword and arg.keyword.value == "dim"), None)
    return keyword if keyword is not None else positional[0] if positional else None


def _same_exponentials(
    ctx: FileContext, numerator: cst.BaseExpression, summed: cst.BaseExpression, flow: Flow | None
) -> bool:
    if isinstance(numerator, cst.Name):
        return isinstance(summed, cst.Name) and summed.value == numerator.value
    return summed.deep_equals(numerator)


# -- building fixes -------------------------------------------------------------------------------


def _autocast_keeps(composed: tuple[str, ...], fused: str) -> bool:
    """Whether the fused op gives the dtype the composition gave under autocast on each device: where
    autocast runs one of the composed ops in float32 (`log` under CUDA autocast), the unfixed result
    is float32 there, and the fused op must run in float32 too (`log_softmax` does, `logsigmoid`
    keeps the half dtype of its input). Outside autocast every op keeps its input's dtype."""
    return all(
        autocast_policy(fused, device) == "fp32"
        or all(autocast_policy(op, device) != "fp32" for op in composed)
        for device in ("cuda", "cpu")
    )


def _logsigmoid(
    ctx: FileContext, call: cst.Call, message: str, x: cst.BaseExpression, direct: bool, *, negate: bool
) -> Problem:
    """`F.logsigmoid(x)` for `log(sigmoid(x))` (`logsigmoid(-x)` for `log(1 - sigmoid(x))`). Autocast
    runs the unfixed `log` in float32 on CUDA and leaves `logsigmoid` in its input's dtype
    (`_autocast_keeps`), so where it does, `x` is first cast to the dtype `log` gives it there:
    `x.to(x.new_empty(0).log().dtype)` is float32 under CUDA autocast (the unfixed result's dtype,
    and its float32 accuracy) and `x`'s own dtype elsewhere (the plain rewrite). No fix where `x`'s
    dtype cannot be read without computing it twice."""
    composed, fused = ("log", "sigmoid"), "logsigmoid"
    plain, needs_torch = _functional(ctx, fused, _negated(x) if negate else x)
    if _autocast_keeps(composed, fused):
        return _maybe_fixed(ctx, call, message, plain, "Use `logsigmoid`", direct, needs_torch)
    if not all(isinstance(node, (cst.Name, cst.Attribute)) for node in walk(x)):
        where = "its input cast to float32 where CUDA autocast runs `log` in float32"
        return Problem(call, message, f"`{_code(ctx, plain)}`, {where}")
    x = x.with_changes(lpar=[], rpar=[])  # a name needs none
    dtype = op_dtype(cst.Attribute(value=x, attr=cst.Name("dtype")), "log")
    cast = with_method(x, "to", dtype)
    fixed, needs_torch = _functional(ctx, fused, _negated(cast) if negate else cast)
    description = "Use `logsigmoid`, in the dtype `log` gives (float32 under CUDA autocast)"
    return _maybe_fixed(ctx, call, message, fixed, description, direct, needs_torch)


def _maybe_fixed(
    ctx: FileContext,
    call: cst.Call,
    message: str,
    fixed: cst.BaseExpression | None,
    description: str,
    direct: bool,
    needs_torch: bool = False,
    ops: Ops | None = None,
) -> Problem:
    shown = f"`{_code(ctx, fixed)}`" if fixed is not None else "the fused op"
    if not direct or fixed is None:
        return Problem(call, message, f"compute it directly: {shown}")
    return Problem(call, message, shown, fixed, description, needs_torch, ops=ops)


def _code(ctx: FileContext, node: cst.CSTNode | None) -> str:
    if node is None:
        return ""
    code = " ".join(ctx.code(node).split())
    return code if len(code) <= 90 else code[:87] + "..."


def _arg(value: cst.BaseExpression, *, last: bool = True, keyword: str | None = None) -> cst.Arg:
    comma = cst.MaybeSentinel.DEFAULT if last else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if keyword is None:
        return cst.Arg(value=value, comma=comma)
    return cst.Arg(
        value=value,
        keyword=cst.Name(keyword),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
        comma=comma,
    )


def _negated(node: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and not node.lpar:
        return node.expression
    if needs_parentheses(node) and not isinstance(node, (cst.Integer, cst.Float)):
        node = node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.UnaryOperation(operator=cst.Minus(), expression=node)


def _renamed(call: cst.Call, name: str) -> cst.Call | None:
    """`F.softmax(...)` as `F.log_softmax(...)`, `x.softmax(...)` as `x.log_softmax(...)`."""
    if isinstance(call.func, cst.Attribute):
        return call.with_changes(func=call.func.with_changes(attr=cst.Name(name)))
    return None


def _functional(ctx: FileContext, name: str, x: cst.BaseExpression) -> tuple[cst.Call, bool]:
    """`F.<name>(x)` in the module's spelling of `torch.nn.functional`."""
    functional = ctx.imports.alias_for("torch.nn.functional")
    needs_torch = False
    module: cst.BaseExpression
    if functional is not None:
        module = cst.Name(functional)
    else:
        nn = ctx.imports.alias_for("torch.nn")
        if nn is not None:
            module = cst.Attribute(value=cst.Name(nn), attr=cst.Name("functional"))
        else:
            torch_name, needs_torch = ctx.torch_name()
            module = cst.Attribute(
                value=cst.Attribute(value=torch_name, attr=cst.Name("nn")), attr=cst.Name("functional")
            )
    return cst.Call(func=cst.Attribute(value=module, attr=cst.Name(name)), args=[_arg(x)]), needs_torch


def _logsumexp(
    ctx: FileContext,
    call: cst.Call,
    summed: tuple[cst.BaseExpression, list[cst.Arg]],
    exponent: cst.BaseExpression,
) -> cst.Call | None:
    """`torch.logsumexp(x, dim, ...)` (or `x.logsumexp(dim, ...)` where the log and the exp are
    methods), from the arguments of the sum; None without a dim or with a dtype."""
    _, rest = summed
    if argument_dim(rest) is None or any(arg.keyword and arg.keyword.value == "dtype" for arg in rest):
        return None
    rest = [*rest[:-1], rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
    exp_call = summed[0]
    if _is_method(call, ctx) and isinstance(exp_call, cst.Call) and _is_method(exp_call, ctx):
        node = with_method(exponent, "logsumexp")
        return node.with_changes(args=rest)
    torch_name, _ = ctx.torch_name()
    return cst.Call(
        func=cst.Attribute(value=torch_name, attr=cst.Name("logsumexp")),
        args=[_arg(exponent, last=False), *rest],
    )
