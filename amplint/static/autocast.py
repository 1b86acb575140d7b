"""What an autocast call sets: the device, the dtype and whether it is on, read from its arguments
wherever the call stands (a `with` item, a decorator, or `ctx = torch.autocast(...)` entered later).
"""

from __future__ import annotations

import libcst as cst

from amplint.static.parsed import ParsedFile
from amplint.static.patterns import argument, callee_name

AUTOCAST = frozenset(
    {
        "torch.autocast",
        "torch.amp.autocast",
        "torch.amp.autocast_mode.autocast",
        "torch.cuda.amp.autocast",
        "torch.cpu.amp.autocast",
    }
)
# The dtype each autocast defaults to when the call names none (outside any other autocast region:
# `torch.amp.autocast(device)` takes an enclosing region's, the old `torch.cuda.amp`/`torch.cpu.amp`
# ones always these).
DEFAULT_DTYPE = {"cuda": "float16", "cpu": "bfloat16"}
# The dtypes an autocast call may name: a float32 one is CUDA autocast computing in float32 (its
# "low" dtype), which CPU autocast refuses and disables itself for.
_AUTOCAST_DTYPES = {
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32",
    "float": "float32",
}


# The autocasts of other number formats, which leave torch's autocast as it is: TransformerEngine's
# `te.fp8_autocast(enabled=True, fp8_recipe=...)` runs its own modules in FP8 with their own scaling.
_OTHER_FORMATS = ("transformer_engine.",)
_LOW_BIT = ("fp8", "fp4", "int8")


def autocast_call(ctx: ParsedFile, node: cst.CSTNode) -> bool:
    """`torch.autocast(...)` and its aliases, or a project's own wrapper of it (transformers'
    `maybe_autocast(device_type=..., enabled=False)`): a call whose name says autocast and that
    passes `enabled=` or `dtype=` by keyword, which is all that is read of a wrapper. Not another
    format's autocast (`_OTHER_FORMATS`, a name that says FP8)."""
    if not isinstance(node, cst.Call):
        return False
    qualified = ctx.qualified(node.func)
    if qualified in AUTOCAST:
        return True
    name = callee_name(node).lower()
    return (
        (qualified is None or not qualified.startswith(("torch.", *_OTHER_FORMATS)))
        and "autocast" in name
        and not any(low in name for low in _LOW_BIT)
        and any(arg.keyword is not None and arg.keyword.value in ("enabled", "dtype") for arg in node.args)
    )


def _literal(node: cst.BaseExpression | None) -> str | None:
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value if isinstance(node.evaluated_value, str) else None
    return None


def autocast_settings(ctx: ParsedFile, call: cst.Call) -> tuple[str | None, str | None, bool]:
    """`(device, dtype, enabled)` that an autocast call sets; None where not literal. CPU autocast
    to float32 is off: torch warns and disables it."""
    qualified = ctx.qualified(call.func) or ""
    device: str | None
    if qualified not in AUTOCAST:  # a wrapper: its keywords only
        keywords = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
        device = _literal(keywords.get("device_type"))
        dtype_arg, enabled_arg = keywords.get("dtype"), keywords.get("enabled")
    elif qualified.startswith(("torch.cuda.", "torch.cpu.")):
        device = qualified.split(".")[1]
        dtype_arg = argument(call, 1, "dtype")
        enabled_arg = argument(call, 0, "enabled")
    else:
        device = _literal(argument(call, 0, "device_type"))
        dtype_arg = argument(call, 1, "dtype")
        enabled_arg = argument(call, 2, "enabled")
    if dtype_arg is None:
        dtype = DEFAULT_DTYPE.get(device or "")
    else:
        name = dtype_arg.attr.value if isinstance(dtype_arg, cst.Attribute) else _literal(dtype_arg)
        dtype = _AUTOCAST_DTYPES.get(name or "")
    enabled = not (isinstance(enabled_arg, cst.Name) and enabled_arg.value == "False")
    if dtype == "float32" and device == "cpu":
        enabled = False
    return device, dtype, enabled
