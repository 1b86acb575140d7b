"""AMP008: the device-specific AMP entry points that PyTorch 2.4 deprecated."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import libcst as cst

from amplint.diagnostics import DISPLAY_ONLY, Severity
from amplint.rule import Rule
from amplint.static.autocast import DEFAULT_DTYPE
from amplint.static.context import FileContext, Finding, FixPlan
from amplint.static.imports import dotted_name, import_aliases
from amplint.static.scopes import walk


@dataclass(frozen=True)
class _Api:
    kind: str  # "autocast", "GradScaler", "custom_fwd" or "custom_bwd"
    device: str


_DEPRECATED_IN = (2, 4)
# The first torch with each replacement: `torch.amp.autocast(device_type)` 1.10, `torch.amp.GradScaler`
# 2.3, `torch.amp.custom_fwd(device_type=)` 2.4 (the release that deprecates the old ones).
_REPLACEMENT_SINCE = {"autocast": (1, 10), "GradScaler": (2, 3), "custom_fwd": (2, 4), "custom_bwd": (2, 4)}


# Each deprecated name, under the modules that export it, with the device it is for.
_DEPRECATED = {
    f"torch.{device}.amp{submodule}.{kind}": _Api(kind, device)
    for device, kinds in (
        ("cuda", ("autocast", "GradScaler", "custom_fwd", "custom_bwd")),
        ("cpu", ("autocast", "GradScaler")),
    )
    for kind in kinds
    for submodule in ("", ".grad_scaler" if kind == "GradScaler" else ".autocast_mode")
}
# `torch.cuda.amp.autocast(enabled, dtype, cache_enabled)`: the old positional order. The new
# `torch.amp.autocast(device_type, dtype, enabled, cache_enabled)` differs, so they become keywords.
_AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")
# Exception types that a compatibility `try:`/`except` around an import catches.
_COMPAT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError", "TypeError", "Exception"})
# A test that picks an API by PyTorch version or by what the module offers (a helper named for
# it too: `is_torch_greater_or_equal("2.3")`, `is_pytorch_at_least_2_3()`).
_VERSION_TEST = re.compile(
    r"version|release|hasattr|getattr|is_(?:py)?torch|(?:py)?torch_(?:ge|gt|lt|le|ver|greater|less)|at_least",
    re.I,
)
# The device-generic APIs: `torch.amp.*`, and `torch.autocast` and `torch.GradScaler` (2.3), which
# the deprecated ones forward to.
_NEW_API = re.compile(r"torch\.amp\.|torch\.(?:autocast|GradScaler)$")
# The APIs a test of what `torch.amp` offers asks for (`hasattr(torch.amp, "autocast")`).
_NEW_API_NAMES = frozenset({"autocast", "GradScaler", "custom_fwd", "custom_bwd"})
_NO_SPACE = cst.AssignEqual(
    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
)


class DeprecatedCudaAmpApi(Rule):
    """
    ## What it does
    Flags the device-specific AMP entry points that PyTorch 2.4 deprecated:
    `torch.cuda.amp.autocast`, `torch.cpu.amp.autocast`, `torch.cuda.amp.GradScaler`,
    `torch.cpu.amp.GradScaler`, `torch.cuda.amp.custom_fwd` and `torch.cuda.amp.custom_bwd`, however
    they are imported (`from torch.cuda.amp import autocast`, `import torch.cuda.amp as amp`,
    `from torch.cuda import amp`).

    ## Why is this bad?
    Each of them emits a `FutureWarning` and only forwards to the device-generic API in `torch.amp`,
    which takes the device as an argument. The old `autocast` also takes its arguments in another
    order (`enabled, dtype, cache_enabled` instead of `device_type, dtype, enabled, cache_enabled`),
    so a positional call cannot be moved over by renaming it: `enabled` would land on `dtype`. Code
    that keeps the old names breaks when the deprecated aliases are removed.

    ## Example
    ```python
    scaler = torch.cuda.amp.GradScaler()
    with torch.cuda.amp.autocast(dtype=torch.bfloat16):
        loss = model(x)
    ```

    ## Fix
    ```python
    scaler = torch.amp.GradScaler("cuda")
    with torch.amp.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)
    ```
    Positional arguments of the old `autocast` become keywords (`enabled=`, `dtype=`,
    `cache_enabled=`). A call without a dtype gets the old default: `torch.cuda.amp.autocast()`
    becomes `torch.amp.autocast("cuda", dtype=torch.float16)` and `torch.cpu.amp.autocast()`
    `torch.amp.autocast("cpu", dtype=torch.bfloat16)`, because `torch.amp.autocast` without one takes
    the dtype of an enclosing autocast region: nested in a bfloat16 region, a bare rename would run
    the block in bfloat16 instead of float16 (a call passing `**kwargs` gets no fix, as they may
    hold a dtype). `@torch.cuda.amp.custom_fwd(cast_inputs=...)` becomes
    `@torch.amp.custom_fwd(device_type="cuda", cast_inputs=...)`. A name imported from
    `torch.cuda.amp` is rewritten at each use to `torch.amp.<name>` (adding `import torch` where the
    module lacks it); the import itself is left in place, and a linter such as ruff (F401) removes it
    once nothing uses it. In `isinstance` checks the class becomes `torch.amp.GradScaler`/
    `torch.amp.autocast` (the base class of the old one), since an object the fixed code builds is
    no instance of the old class. Annotations emit no warning and are not flagged, but the file's
    first fix of the same API rewrites them too. References that
    select the old API for old PyTorch versions (inside an `if` on the version or a
    `try`/`except ImportError`), or that only compare against it, are not flagged.

    The torch versions the project supports (`torch-version`, or the torch dependency in its
    `pyproject.toml`, else the torch pin in its `setup.cfg`, `setup.py` or `requirements*.txt`)
    decide the rest: where none of them deprecates the API (`torch<2.4`) nothing
    is flagged, and where the oldest lacks the replacement (`torch.amp.autocast(device_type)` came in
    1.10, `torch.amp.GradScaler` in 2.3, `torch.amp.custom_fwd`/`custom_bwd` in 2.4) the finding says
    so and its fix is display-only: the code has to pick the API by torch version.

    ## References
    - PyTorch AMP docs: https://pytorch.org/docs/stable/amp.html
    - `torch.amp.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)`
    - `torch.amp.GradScaler(device="cuda", ...)`, `torch.amp.custom_fwd(fwd=None, *, device_type, cast_inputs=None)`
    """

    code = "AMP008"
    name = "deprecated-cuda-amp-api"
    summary = (
        "torch.cuda.amp / torch.cpu.amp autocast, GradScaler, custom_fwd/custom_bwd instead of torch.amp"
    )
    severity = Severity.INFO
    triggers = frozenset({"amp"})

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.words & {"cuda", "cpu"} or not ctx.profile.torch.ever(_DEPRECATED_IN):
            return  # no torch the project supports deprecates them
        if not any(target.startswith("torch") for target in ctx.index.aliases.values()):
            return
        scan = _Scan(ctx)
        findings: list[tuple[_Api, Finding]] = []
        # An annotation is never evaluated into a warning (and not at all under `from __future__
        # import annotations`): no finding of its own, but rewritten with the file's first fix of
        # the same API, so that it still names the class the fixed code builds.
        annotations: dict[str, list[tuple[cst.CSTNode, cst.CSTNode]]] = {}
        for node in scan.references:
            api = _DEPRECATED.get(ctx.qualified(node) or "")
            if api is None or id(node) in scan.guarded or _shadowed(scan, node):
                continue
            call = scan.call_of.get(id(node))
            if call is not None:
                finding = _call_finding(ctx, call, node, api)
            elif id(node) in scan.decorators:
                finding = _decorator_finding(ctx, node, api)
            elif id(node) in scan.annotations and api.kind in {"autocast", "GradScaler"}:
                annotations.setdefault(api.kind, []).append((node, _new_name(ctx, api.kind)[0]))
                continue
            elif id(node) in scan.type_tests and api.kind in {"autocast", "GradScaler"}:
                finding = _replacement_finding(ctx, node, api, _new_name(ctx, api.kind)[0])
            elif id(node) in scan.compared:
                continue
            else:
                finding = _reference_finding(ctx, node, api)
            if finding is not None:
                findings.append((api, finding))
        for api, finding in findings:
            extra = annotations.pop(api.kind, None) if finding.fix is not None else None
            if extra and finding.fix is not None:
                fix = finding.fix
                names = ", ".join(f"`{ctx.code(new)}`" for _, new in extra)
                finding = replace(
                    finding,
                    fix=replace(fix, replacements=(*fix.replacements, *extra)),
                    help=f"{finding.help}, and {names} in annotations",
                )
            yield _for_supported_torch(ctx, api, finding)


@dataclass
class _Scan:
    """What one walk over the module finds: the references that may name a deprecated API, and
    where each sits (a called function, a decorator, an annotation, compatibility code)."""

    ctx: FileContext
    references: list[cst.Name | cst.Attribute] = field(default_factory=list)
    call_of: dict[int, cst.Call] = field(default_factory=dict)
    decorators: set[int] = field(default_factory=set)
    annotations: set[int] = field(default_factory=set)
    type_tests: set[int] = field(default_factory=set)  # the class named by `isinstance`/`issubclass`
    guarded: set[int] = field(default_factory=set)
    # References compared against (`func is torch.cuda.amp.autocast`, `f in [..., torch.cuda.amp.autocast]`)
    # or listed in a collection: code that recognises the old API (torch's own dynamo), not code that uses it.
    compared: set[int] = field(default_factory=set)
    bindings: dict[str, set[str]] = field(default_factory=dict)  # local name -> what imports bind it to
    assigned: set[str] = field(default_factory=set)
    uses: dict[str, list[cst.Name]] = field(default_factory=dict)  # name -> where it is read (`.name` too)

    def __post_init__(self) -> None:
        # Names that are not references: imports, attribute names, keywords, parameters, definitions.
        skipped: set[int] = set()
        definitions: list[cst.FunctionDef] = []
        aliases = self.ctx.index.aliases
        # A module-level `def autocast(...)` beside `from torch.cuda.amp import autocast` (a wrapper in
        # `try:`, the old import in `except ImportError:`) binds the name to either.
        self.assigned.update(_module_definitions(self.ctx.module.body))
        for top, node in ((statement, n) for statement in self.ctx.module.body for n in walk(statement)):
            if isinstance(node, (cst.Import, cst.ImportFrom)):
                for local, target in import_aliases(node):
                    self.bindings.setdefault(local, set()).add(target)
                skipped.update(id(n) for n in walk(node))
            elif isinstance(node, cst.Attribute):
                skipped.add(id(node.attr))
                self.uses.setdefault(node.attr.value, []).append(node.attr)
            elif isinstance(node, cst.Arg) and node.keyword is not None:
                skipped.add(id(node.keyword))
            elif isinstance(node, cst.Param):
                skipped.add(id(node.name))
                self.assigned.add(node.name.value)  # `def f(autocast): ...` shadows an import
            elif isinstance(node, cst.ClassDef):
                skipped.add(id(node.name))
            elif isinstance(node, cst.Call):
                self.call_of[id(node.func)] = node
                if isinstance(node.func, cst.Name) and node.func.value in {"isinstance", "issubclass"}:
                    # A class tested against: once the constructor is fixed, the old one no longer matches.
                    self.type_tests.update(id(n) for arg in node.args[1:2] for n in walk(arg.value))
            elif isinstance(node, cst.FunctionDef):
                skipped.add(id(node.name))
                definitions.append(node)
                self.decorators.update(id(d.decorator) for d in node.decorators)
            elif isinstance(node, cst.Annotation):
                self.annotations.update(id(n) for n in walk(node.annotation))
            elif isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                self.assigned.update(t.value for t in targets if isinstance(t, cst.Name))
                if not isinstance(node, cst.AugAssign):
                    # `torch.cuda.amp.autocast = shim` replaces the old API (a shim that runs CUDA
                    # scripts on another device): no use of it, and nothing warns.
                    skipped.update(id(t) for t in targets if isinstance(t, cst.Attribute))
            elif isinstance(node, cst.Comparison):
                self.compared.update(id(n) for n in walk(node))
            elif isinstance(node, (cst.List, cst.Tuple, cst.Set)):
                self.compared.update(id(element.value) for element in node.elements)
            elif _is_compat_branch(self.ctx, node):
                self.guarded.update(id(n) for n in walk(node))
            elif isinstance(node, cst.IndentedBlock):
                self.guarded.update(
                    id(n) for statement in _after_compat_exit(self.ctx, node) for n in walk(statement)
                )
            if isinstance(node, cst.Name) and id(node) not in skipped:
                self.uses.setdefault(node.value, []).append(node)
            if isinstance(node, (cst.Name, cst.Attribute)) and id(node) not in skipped:
                name = dotted_name(node)
                if name is not None and name.partition(".")[0] in aliases:
                    self.references.append(node)
                    # Where it is: a finding's position is then computed for this statement only.
                    self.ctx.index.top_of.setdefault(node, top)
        # A function the module uses only in compatibility code (a polyfill it installs as
        # `torch.autocast` where torch has none) runs only where that code picks it.
        for definition in definitions:
            uses = self.uses.get(definition.name.value, [])
            if uses and all(id(use) in self.guarded for use in uses):
                self.guarded.update(id(n) for n in walk(definition.body))


def _for_supported_torch(ctx: FileContext, api: _Api, finding: Finding) -> Finding:
    """A project that still supports a torch without the replacement needs the old API there: the
    finding says so, and its fix is shown but never applied."""
    since = _REPLACEMENT_SINCE[api.kind]
    torch = ctx.profile.torch
    if torch.low is None or torch.always(since):
        return finding
    note = (
        f"; the project supports torch {torch.describe()}, and `torch.amp.{api.kind}` needs torch "
        f"{since[0]}.{since[1]}: choose the API by torch version"
    )
    fix = replace(finding.fix, applicability=DISPLAY_ONLY) if finding.fix is not None else None
    return replace(finding, message=finding.message + note, fix=fix)


def _is_compat_branch(ctx: FileContext, node: cst.CSTNode) -> bool:
    """An `if`/conditional expression on the PyTorch version (or on what a module offers), or a
    `try` that falls back on an import or attribute error: code that picks the old API on purpose."""
    if isinstance(node, (cst.If, cst.IfExp)):
        if _VERSION_TEST.search(ctx.code(node.test)):
            return True
        # `torch.amp.X("cuda") if new_api else torch.cuda.amp.X()`, or the classes themselves
        # (`torch.amp.autocast if find_spec("torch.amp") else torch.cuda.amp.autocast`): one branch
        # is the new API (`torch.autocast` included).
        return isinstance(node, cst.IfExp) and any(
            _NEW_API.match(ctx.qualified(n) or "")
            for branch in (node.body, node.orelse)
            for n in walk(branch)
            if isinstance(n, (cst.Attribute, cst.Name))
        )
    if isinstance(node, cst.Try):
        for handler in node.handlers:
            if handler.type is None:
                return True
            caught = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
            for element in caught:
                value = element.value if isinstance(element, cst.Element) else element
                if isinstance(value, cst.Name) and value.value in _COMPAT_ERRORS:
                    return True
    return False


def _after_compat_exit(ctx: FileContext, block: cst.IndentedBlock) -> Iterator[cst.BaseStatement]:
    """The statements after an `if` on the version that uses the new API and returns or raises (`if
    hasattr(torch, "amp"): return torch.amp.autocast(...)`): the fallback for a torch without it."""
    exited = False
    bound: dict[str, cst.BaseExpression] = {}
    for statement in block.body:
        if exited:
            yield statement
        elif (
            isinstance(statement, cst.If)
            and statement.orelse is None
            and _is_compat_branch(ctx, statement)
            and _always_exits(statement.body)
            and (
                _asks_torch_amp(ctx, statement.test, bound)
                or any(
                    _NEW_API.match(ctx.qualified(n) or "")
                    for n in walk(statement.body)
                    if isinstance(n, (cst.Attribute, cst.Name))
                )
            )
        ):
            exited = True
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    target = small.targets[0].target
                    if isinstance(target, cst.Name):
                        bound[target.value] = small.value


def _asks_torch_amp(ctx: FileContext, test: cst.BaseExpression, bound: dict[str, cst.BaseExpression]) -> bool:
    """Whether the test asks if `torch.amp` offers one of the new APIs: `hasattr(torch.amp,
    "autocast")`, or of a name bound just before to `torch.amp` or `getattr(torch, "amp", None)`."""
    for call in walk(test):
        if not (
            isinstance(call, cst.Call)
            and isinstance(call.func, cst.Name)
            and call.func.value == "hasattr"
            and len(call.args) == 2
            and isinstance(call.args[1].value, cst.SimpleString)
            and call.args[1].value.evaluated_value in _NEW_API_NAMES
        ):
            continue
        module = call.args[0].value
        if isinstance(module, cst.Name) and module.value in bound:
            module = bound[module.value]
        if _is_torch_amp(ctx, module):
            return True
    return False


def _is_torch_amp(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """`torch.amp`, however `torch` is imported, or `getattr(torch, "amp"[, default])`."""
    if ctx.qualified(node) == "torch.amp":
        return True
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value == "getattr"
        and len(node.args) >= 2
        and ctx.qualified(node.args[0].value) == "torch"
        and isinstance(node.args[1].value, cst.SimpleString)
        and node.args[1].value.evaluated_value == "amp"
    )


def _always_exits(block: cst.BaseSuite) -> bool:
    """Whether the block ends in a `return` or `raise` on every path (a `try` whose body and handlers
    each return: `try: return torch.amp.GradScaler("cuda") except TypeError: return ...`)."""
    if not isinstance(block, cst.IndentedBlock) or not block.body:
        return False
    last = block.body[-1]
    if isinstance(last, cst.SimpleStatementLine):
        return isinstance(last.body[-1], (cst.Return, cst.Raise))
    if isinstance(last, cst.Try):
        return (
            last.orelse is None
            and _always_exits(last.body)
            and all(_always_exits(handler.body) for handler in last.handlers)
        )
    return False


def _module_definitions(nodes: Sequence[cst.CSTNode]) -> Iterator[str]:
    """The names `def` and `class` bind at module level, in `if`, `try` and `with` blocks too."""
    for node in nodes:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            yield node.name.value
        elif isinstance(node, _BLOCKS):
            yield from _module_definitions(node.children)


_BLOCKS = (cst.If, cst.Else, cst.Try, cst.ExceptHandler, cst.Finally, cst.With, cst.IndentedBlock)


def _shadowed(scan: _Scan, node: cst.Name | cst.Attribute) -> bool:
    """The name the reference starts from is bound by more than one import, or also assigned:
    which API it names depends on the branch taken, so leave it alone."""
    root = (dotted_name(node) or "").partition(".")[0]
    return len(scan.bindings.get(root, ())) > 1 or root in scan.assigned


def _new_name(ctx: FileContext, kind: str) -> tuple[cst.Attribute, bool]:
    torch, missing = ctx.torch_name()
    return cst.Attribute(value=cst.Attribute(value=torch, attr=cst.Name("amp")), attr=cst.Name(kind)), missing


def _string(value: str) -> cst.SimpleString:
    return cst.SimpleString(f'"{value}"')


def _keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(keyword=cst.Name(name), value=value, equal=_NO_SPACE)


def _message(ctx: FileContext, node: cst.BaseExpression, api: _Api) -> str:
    old = ctx.qualified(node)
    if api.kind in {"autocast", "GradScaler"}:
        new = f'torch.amp.{api.kind}("{api.device}", ...)'
    else:
        new = f'torch.amp.{api.kind}(device_type="{api.device}")'
    return (
        f"`{old}` is deprecated since PyTorch 2.4 and emits a FutureWarning: use `{new}`, "
        "the device-generic API it forwards to"
    )


def _with_first(call: cst.Call, first: list[cst.Arg], rest: list[cst.Arg]) -> cst.Call:
    """`call` with the arguments `first` put before `rest`, separated as the call separates its own."""
    own = rest[0].comma if rest else None
    separator = own.whitespace_after if isinstance(own, cst.Comma) else cst.SimpleWhitespace(" ")
    if isinstance(separator, cst.ParenthesizedWhitespace):
        separator = cst.SimpleWhitespace(" ")  # one argument per line: keep the others where they are
    comma = cst.Comma(whitespace_after=separator)
    # Every new argument but a last one with nothing after it takes a comma.
    separated = [arg.with_changes(comma=comma) for arg in first[:-1]]
    separated.append(first[-1].with_changes(comma=comma) if rest else first[-1])
    return call.with_changes(args=[*separated, *rest])


def _with_last(call: cst.Call, last: cst.Arg) -> cst.Call:
    """`call` with the keyword argument `last` added after its arguments."""
    args = list(call.args)
    final = args[-1]
    if isinstance(final.comma, cst.Comma):
        args[-1] = final.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return call.with_changes(args=[*args, last.with_changes(comma=final.comma)])
    args[-1] = final.with_changes(
        comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
        whitespace_after_arg=cst.SimpleWhitespace(""),
    )
    return call.with_changes(args=[*args, last.with_changes(whitespace_after_arg=final.whitespace_after_arg)])


def _new_api_call(call: cst.Call, api: _Api) -> bool:
    """The call already has the new signature (a compatibility alias bound to the old name)."""
    if any(arg.keyword is not None and arg.keyword.value in {"device_type", "device"} for arg in call.args):
        return True
    first = call.args[0].value if call.args and call.args[0].keyword is None else None
    return api.kind in {"autocast", "GradScaler"} and isinstance(first, cst.SimpleString)


def _call_finding(ctx: FileContext, call: cst.Call, node: cst.BaseExpression, api: _Api) -> Finding | None:
    if _new_api_call(call, api):
        return None
    func, missing = _new_name(ctx, api.kind)
    args = list(call.args)
    fixed: cst.Call | None = None
    unfixable = f'pass the old positional arguments by keyword to `torch.amp.{api.kind}("{api.device}", ...)`'
    if api.kind == "autocast":
        converted = _autocast_keywords(args)
        dtype = _old_default_dtype(ctx, api, converted or [])
        if dtype is None:
            unfixable = (
                f'use `torch.amp.autocast("{api.device}", dtype=torch.{DEFAULT_DTYPE[api.device]}, ...)` '
                "(the old default dtype) unless the `**` arguments pass a dtype"
            )
        elif converted is not None:
            first = [cst.Arg(_string(api.device)), *dtype]
            fixed = _with_first(call.with_changes(func=func), first, converted)
    elif api.kind == "GradScaler":
        fixed = _with_first(call.with_changes(func=func), [cst.Arg(_string(api.device))], args)
    else:
        device = _keyword("device_type", _string(api.device))
        renamed = call.with_changes(func=func)
        passes_function = any(arg.keyword is None for arg in args)
        fixed = _with_last(renamed, device) if passes_function else _with_first(renamed, [device], args)
    message = _message(ctx, node, api)
    if fixed is None:
        return Finding(call, message, help=unfixable)
    description = f"Use `torch.amp.{api.kind}` with the device"
    return Finding(
        call,
        message,
        fix=FixPlan(description, ((call, fixed),), missing),
        help=f"`{' '.join(ctx.code(fixed).split())}`",
    )


def _old_default_dtype(ctx: FileContext, api: _Api, args: list[cst.Arg]) -> list[cst.Arg] | None:
    """The `dtype=` argument that keeps the old API's default: `torch.amp.autocast` without a dtype
    inherits an enclosing autocast's instead. Empty where the call passes a dtype; None where a
    `**` argument may pass one (adding it would raise)."""
    if any(arg.keyword is not None and arg.keyword.value == "dtype" for arg in args):
        return []
    if any(arg.star == "**" for arg in args):
        return None
    torch, _ = ctx.torch_name()
    return [_keyword("dtype", cst.Attribute(value=torch, attr=cst.Name(DEFAULT_DTYPE[api.device])))]


def _autocast_keywords(args: list[cst.Arg]) -> list[cst.Arg] | None:
    """The old `autocast`'s arguments with the positional ones passed by keyword; None where that
    cannot be done (`*args`, or more positional arguments than the old signature has)."""
    converted: list[cst.Arg] = []
    positional = 0
    for arg in args:
        if arg.star == "*":
            return None
        if arg.keyword is None and not arg.star:
            if positional == len(_AUTOCAST_POSITIONAL):
                return None
            arg = arg.with_changes(keyword=cst.Name(_AUTOCAST_POSITIONAL[positional]), equal=_NO_SPACE)
            positional += 1
        converted.append(arg)
    return converted


def _decorator_finding(ctx: FileContext, node: cst.BaseExpression, api: _Api) -> Finding:
    if api.kind not in {"custom_fwd", "custom_bwd"}:
        return _reference_finding(ctx, node, api)
    func, missing = _new_name(ctx, api.kind)
    fixed = cst.Call(func=func, args=[_keyword("device_type", _string(api.device))])
    return _replacement_finding(ctx, node, api, fixed, missing)


def _replacement_finding(
    ctx: FileContext,
    node: cst.BaseExpression,
    api: _Api,
    fixed: cst.BaseExpression,
    missing: bool | None = None,
) -> Finding:
    if missing is None:
        missing = ctx.torch_name()[1]
    return Finding(
        node,
        _message(ctx, node, api),
        fix=FixPlan(f"Use `torch.amp.{api.kind}`", ((node, fixed),), missing),
        help=f"`{ctx.code(fixed)}`",
    )


def _reference_finding(ctx: FileContext, node: cst.BaseExpression, api: _Api) -> Finding:
    if api.kind in {"custom_fwd", "custom_bwd"}:
        advice = f'use `functools.partial(torch.amp.{api.kind}, device_type="{api.device}")`'
    else:
        advice = f'use `torch.amp.{api.kind}` and pass `"{api.device}"` first where it is called'
        if api.kind == "autocast":
            advice += (
                f", with `dtype=torch.{DEFAULT_DTYPE[api.device]}` where no dtype is passed (the old default)"
            )
    return Finding(node, _message(ctx, node, api), help=advice)
