"""Fixes that the dtype graph asks for, rendered as libcst edits of the source.

A chain of ops left in low precision (AMP101) is fixed where it starts, right after the last
low-precision product: the input of its first op is upcast, RWKV7-style,
`self.w_lora(xw).sigmoid()` -> `self.w_lora(xw).to(torch.float32).sigmoid()`. The graph knows the
op and its line; the call is found on that line of the file as it is now, so a file edited since
the trace gets a fix for its current text, or none when the line no longer holds exactly one such
call.
"""

from __future__ import annotations

import libcst as cst

from amplint.context import FileContext, FixPlan
from amplint.diagnostics import Fix
from amplint.patterns import argument, callee_name, method_call, upcast_input
from amplint.runner import render_fix
from amplint.source import LineIndex, SourceFile

# The Python calls each traced op comes from.
_CALLS = {
    "sigmoid": frozenset({"sigmoid", "expit"}),
    "tanh": frozenset({"tanh"}),
    "log_sigmoid_forward": frozenset({"logsigmoid"}),
    "silu": frozenset({"silu"}),
    "gelu": frozenset({"gelu"}),
    "erf": frozenset({"erf"}),
    "elu": frozenset({"elu"}),
    "hardsigmoid": frozenset({"hardsigmoid"}),
}


def upcast_fix(source: SourceFile, line: int, op: str) -> tuple[Fix | None, str]:
    """The fix that upcasts the input of the `op` call on `line`, with its description; or None and
    why there is none."""
    names = _CALLS.get(op)
    if names is None:
        return None, f"no upcast fix is known for `{op}`"
    try:
        module = cst.parse_module(source.text)
    except cst.ParserSyntaxError:
        return None, "the file does not parse any more"
    ctx = FileContext(source.path, module, text=source.text)
    calls = [
        call
        for call in ctx.index.calls
        if callee_name(call) in names and ctx.position(call).start.line == line
    ]
    if len(calls) != 1:
        return None, f"line {line} no longer holds exactly one `{op}` call"
    call = calls[0]
    data = method_call(ctx, call, names)
    if data is None:
        data = argument(call, 0, "input")
    if data is None:
        return None, f"the `{op}` call on line {line} has no input to upcast"
    float32, missing_import = ctx.float32()
    description = f"Upcast the input of `{callee_name(call)}` to float32"
    plan = FixPlan(description, ((call, upcast_input(call, data, float32)),), missing_import)
    fix = render_fix(ctx, plan, LineIndex(source.text))
    return fix, description if fix is not None else "the fix could not be laid out in the file"
