"""Calls across files, by text: where a project passes a function a value cast to float32.

The engine reads a parameter's dtype from the calls of its function in the same file. A sampler or a
loss is often called from another module, after the caller has upcast the logits
(`next_token_logits = logits[:, -1, :].to(torch.float32)`, then `self.sampler.sample_batch(
next_token_logits, ...)`). This text pass, run by the project-wide pass over the files it reads
anyway, finds the names called with such a value (`float32_callees`) and every line of a file that
calls a name (`call_lines`). The engine then reads each of those calls in its own file's facts and
takes the parameter as float32 only where every call passes float32.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

__all__ = ["call_lines", "calls_of", "float32_callees", "framework_hook"]

# `.float()`, `.to(torch.float32)`, `.to(dtype=torch.float)`, `.type(torch.float32)` ending a value.
_CAST = re.compile(rb"\.(?:float\(\)|(?:to|type)\([^()\n]*\b(?:torch\.)?float(?:32)?\b[^()\n]*\))")
# What stands before a cast on its line: a name bound to it (`x = y[:, -1]`), or an argument's start.
_BOUND = re.compile(rb"[ \t]*(\w+)[ \t]*=(?!=)")
_ARGUMENT = re.compile(rb"(?:[(,]|^)[ \t]*[\w.]+(?:\[[^\]\n]*\])*\Z")
_ENDS = re.compile(rb"[ \t]*(?:#[^\n]*)?(?:\n|\Z)")
_CLOSES = re.compile(rb"[ \t\r\n]*[,)]")
_CALLEE = re.compile(rb"(?:^|[^\w])(\w+)[ \t]*$", re.MULTILINE)
_KEYWORDS = {b"if", b"elif", b"while", b"return", b"and", b"or", b"not", b"in", b"yield", b"assert"}
# Methods a framework or Python calls without naming them in the project (a module's `forward`
# through `__call__`, an autograd function's `backward` and `setup_context`, Lightning's steps, hooks
# and `configure_optimizers`, Hugging Face's losses, weight initialisation and generation inputs):
# their calls are not all seen.
_HOOK = re.compile(
    r"^(__\w+__|forward|backward|setup_context|jvp|vjp|\w*_step|compute_loss|on_\w+|configure_\w+|"
    r"\w+_epoch_(?:start|end)|\w+_dataloader|setup|teardown|prepare_data|_init_weights|reset_parameters|"
    r"extra_repr|prepare_inputs_for_generation)$"
)


def framework_hook(name: str) -> bool:
    """Whether `name` is a method something outside the project calls (its calls are not all seen)."""
    return _HOOK.match(name) is not None


def float32_callees(code: bytes) -> set[str]:
    """The names `code` calls with a value cast to float32 as an argument: a cast written in the
    call, or a name bound to one (`x = y.to(torch.float32)`) passed alone or subscripted."""
    if b"float" not in code:  # every cast names it; a byte search skips most files at memory speed
        return set()
    found: set[str] = set()
    names: set[bytes] = set()
    for cast in _CAST.finditer(code):
        line = code.rfind(b"\n", 0, cast.start()) + 1
        before = code[line : cast.start()]
        argument = _ARGUMENT.search(before)
        if argument is not None and _CLOSES.match(code, cast.end()):
            found.update(_callee(code, line + argument.start()))  # `sample(logits.float(), ...)`
        elif (bound := _BOUND.match(before)) is not None and _ENDS.match(code, cast.end()):
            names.add(bound[1])
    if names:
        alternatives = b"|".join(re.escape(name) for name in sorted(names))
        passed = re.compile(rb"[(,][ \t\r\n]*(?:" + alternatives + rb")(?:\[[^\]\n]*\])*[ \t\r\n]*[,)]")
        for match in passed.finditer(code):
            found.update(_callee(code, match.start()))
    return {name for name in found if not framework_hook(name)}


def _callee(code: bytes, at: int) -> Iterator[str]:
    """The name called by the call whose argument list holds `code[at]` (a `(` or `,` there): found by
    going back to the unclosed `(` (over at most 4,000 characters)."""
    depth = 0
    for i in range(at, max(0, at - 4000) - 1, -1):
        char = code[i]
        if char in b")]}":
            depth += 1
        elif char in b"([{":
            if depth == 0:
                if char != 40:
                    return  # a list or a subscript, not a call
                line_start = code.rfind(b"\n", 0, i) + 1
                match = _CALLEE.search(code, line_start, i)
                if match is not None and match[1] not in _KEYWORDS:
                    yield match[1].decode()
                return
            depth -= 1


def calls_of(names: Iterable[str]) -> re.Pattern[bytes]:
    """A pattern for the calls of any of `names` (`name(` or `.name(`), for `call_lines`."""
    alternatives = b"|".join(re.escape(name.encode()) for name in sorted(names, key=len, reverse=True))
    return re.compile(rb"(?<![\w])(" + alternatives + rb")[ \t]*\(")


def call_lines(
    code: bytes, calls: re.Pattern[bytes], hidden: Callable[[int], bool]
) -> Iterator[tuple[str, int]]:
    """(name, line) of each call in `code` that `calls` (`calls_of`) finds, a `def` of the name and
    what `hidden` says is no code (a docstring's example, a comment) left out."""
    line, at = 1, 0
    for match in calls.finditer(code):
        before = code[code.rfind(b"\n", 0, match.start()) + 1 : match.start()]
        if _DEF_BEFORE.search(before) is None and not hidden(match.start()):
            line += code.count(b"\n", at, match.start())
            at = match.start()
            yield match[1].decode(), line


_DEF_BEFORE = re.compile(rb"\bdef[ \t]+$")
