"""The bottom layer of the dtype-facts engine: the file's classes and functions, where each
function is called and what its parameters hold, and what code the file does not call runs under
(the project's execution modes, or the caller's choice)."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import libcst as cst

from amplint.static.facts import (
    DTYPE,
    INTEGER,
    INTEGER_FACT,
    OFF,
    OTHER,
    OTHER_FACT,
    SCALAR,
    SCALAR_FACT,
    TENSOR,
    UNKNOWN_FACT,
    Autocast,
    Fact,
    Step,
    join,
    modes_text,
)
from amplint.static.ops import F32, HALF
from amplint.static.parsed import ParsedFile
from amplint.static.profile import AUTOCAST, CALLER, CAST, ModeWhy, Profile
from amplint.static.scopes import named_params, suite_body, walk


@dataclass
class Frame:
    """The state of one function's interpretation."""

    env: dict[str, Fact]
    autocast: frozenset[Autocast]
    returns: list[Fact] = field(default_factory=list)
    depth: int = 0


class EngineState(ABC):
    """The bottom layer of the dtype-facts engine: the file's classes and functions, where each
    function is called and what its parameters hold, and what code the file does not call runs under
    (the project's execution modes, or the caller's choice)._CLASS"""

    def __init__(self, ctx: ParsedFile, *, caller_autocast: bool = True) -> None:
        self.ctx = ctx
        self.profile: Profile = getattr(ctx, "profile", None) or CALLER
        self.caller_autocast = caller_autocast  # False: only this file's own autocast regions
        self._facts: dict[cst.CSTNode, Fact] = {}
        self._states: dict[cst.CSTNode, frozenset[Autocast]] = {}
        self._done: set[cst.CSTNode] = set()
        self._definition_of: dict[cst.CSTNode, str] | None = None  # node -> its definition
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
        self._bindings: dict[cst.FunctionDef, list[cst.Assign | cst.Call]] = {}  # `_binding_nodes`
        self._reading: set[tuple[str, str]] = set()  # attributes whose `__init__` value is being read
        self._built: dict[cst.FunctionDef, bool] = {}  # methods that run only while a module is built
        self._returns: dict[tuple[cst.FunctionDef, tuple[Fact, ...]], Fact] = {}
        self._active: set[cst.FunctionDef] = set()
        self._framework: str | None = None
        self._index_definitions()

    def of(self, node: cst.CSTNode) -> Fact:
        """The fact of an expression (UNKNOWN for one the engine never reached)."""
        fact = self._facts.get(node)
        if fact is None:
            scope = self.ctx.scope_of(node)
            if scope is not None and scope not in self._done:
                self._analyse(scope)
                fact = self._facts.get(node)
        return fact or UNKNOWN_FACT

    def line(self, node: cst.CSTNode) -> int:
        return self.ctx.position(node).start.line

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
        if not whys and node is not None and self.profile.idle(self._definition(node)):
            return frozenset({OFF})  # a method nothing runs: what it calls gets no autocast from it
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
        """The execution modes of the definition that holds `node`: its top-level one's, or none
        for a method nothing runs."""
        if node is None or not self.profile.definitions:
            return self.profile.modes
        return self.profile.modes_of(self._definition(node))

    def _definition(self, node: cst.CSTNode) -> str | None:
        """The top-level definition that holds `node`, or its method (`Class.method`)."""
        if self._definition_of is None:
            self._definition_of = {}
            for top in self.ctx.module.body:
                if isinstance(top, (cst.ClassDef, cst.FunctionDef)):
                    self._definition_of.update((inner, top.name.value) for inner in walk(top))
                if isinstance(top, cst.ClassDef):
                    for method in top.body.body:
                        if isinstance(method, cst.FunctionDef):
                            name = f"{top.name.value}.{method.name.value}"
                            self._definition_of.update((inner, name) for inner in walk(method))
        return self._definition_of.get(node)

    def _caller_tensor(
        self, node: cst.CSTNode, what: str, *, weights: bool = False, kept: bool = False
    ) -> Fact:
        """A value whose dtype the code's runner picks: a function's input (or, with `weights`, a
        model's parameter, which autocast leaves float32; with `kept`, a buffer made in float32 on
        purpose, which only a mode that converts the built module makes half). The execution modes
        of the definition holding `node` decide it, and the evidence names them; where none reaches
        it, any dtype the caller may pick, marked as the caller's."""
        if self._foreign():
            return UNKNOWN_FACT  # a TensorFlow or JAX file: its inputs are no torch tensors
        modes = self._modes_at(node)
        if not modes:
            half = self._caller_half()
            return Fact(TENSOR, frozenset({F32, *half}), (Step(node, what),), caller=bool(half))
        found: set[str] = set()
        for why in modes:
            if why.mode.kind == CAST:
                found |= {F32} if kept and not why.converts else {why.mode.dtype}
            else:
                found |= {F32} if weights else {F32, why.mode.dtype}
        return Fact(
            TENSOR,
            frozenset(found),
            (
                Step(
                    node,
                    f"{what}, which runs as {modes_text(self.profile, modes)}",
                    side=self.profile.only_in(modes) is not None,
                ),
            ),
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
            frame = Frame(self._module_env, frozenset({OFF}))
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
                self._run(scope.body, Frame(dict(self._module_constants()), frozenset({OFF})))
                return
            frame = Frame(dict(self._parameters(scope)), self._entry_states(scope))
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
            decided = self._autocast_of(decorator.decorator, Frame({}, states))
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
        elif calls := self.profile.calls_of(function.name.value):
            env.update(self._float32_elsewhere(function, params[1 if method else 0 :], calls))
        return env

    def _float32_elsewhere(
        self, function: cst.FunctionDef, params: list[cst.Param], calls: tuple[tuple[str, int, str], ...]
    ) -> dict[str, Fact]:
        """The parameters of `function` (which this file never calls) that every call of its name in
        the project passes a float32 tensor: each call read in its own file's facts (with the caller's
        profile, so a value is float32 there only by a cast or an op that makes it so)."""
        name = function.name.value
        positional = [p.name.value for p in params]
        wanted = {p.name.value: p for p in [*params, *function.params.kwonly_params]}
        seen: dict[str, tuple[str, str]] = {}  # parameter -> the first call's argument and place
        engines: dict[str, EngineState] = {}  # one per caller's file, for all its calls
        for display, line, digest in calls:
            other = self.ctx.elsewhere(display, digest)
            found = [] if other is None else _calls_at(other, name, line)
            if not found:
                return {}  # a call this pass cannot place (a comment, a string, an unread file)
            assert other is not None
            if display not in engines:
                engines[display] = type(self)(other)
            facts = engines[display]
            for call in found:
                for param in list(wanted):
                    passed = _passed(call, positional, param)
                    fact = UNKNOWN_FACT if passed is None else facts.of(passed)
                    if passed is None or fact.kind != TENSOR or fact.dtypes != frozenset({F32}):
                        del wanted[param]
                    else:
                        seen.setdefault(param, (other.code(passed), f"{display}:{line}"))
            if not wanted:
                return {}
        more = f" and {len(calls) - 1} more" if len(calls) > 1 else ""
        return {
            param: Fact(
                TENSOR,
                frozenset({F32}),
                (
                    Step(
                        node,
                        f"`{param}` is float32 at every call of `{name}` in the project: "
                        f"`{seen[param][0]}` at {seen[param][1]}{more}",
                    ),
                ),
            )
            for param, node in wanted.items()
        }

    def _param_default(self, function: cst.FunctionDef, param: cst.Param, upcast: bool) -> Fact:
        name = param.name.value
        annotation = self.ctx.code(param.annotation.annotation) if param.annotation else ""
        # `x: Optional[torch.Tensor] = None`: a tensor when passed, not the None of its default
        optional = (
            isinstance(param.default, cst.Name) and param.default.value == "None" and "Tensor" in annotation
        )
        if param.default is not None and not optional:
            default = self._expr(param.default, Frame(dict(self._module_constants()), frozenset({OFF})))
            if default.kind in (SCALAR, DTYPE, OTHER):
                return default
        if annotation and "Tensor" not in annotation and annotation not in ("Any", "object"):
            return OTHER_FACT if annotation != "float" else SCALAR_FACT
        if name == "device" or name.endswith("_device"):
            return OTHER_FACT  # `x.to(device)` moves, it does not cast
        if _INTEGER_NAME.search(name):
            return INTEGER_FACT  # token ids, positions, counts (`input_ids`, `num_heads`): no floating dtype
        if function.name.value == "__init__" and "Tensor" not in annotation and self._module_class(function):
            # A module's settings (`scale`, `temperature`, `dim`): numbers, not activations; a tensor
            # it keeps is a parameter or buffer, in the weights' dtype. (A plain class, such as a
            # distribution over logits, is built from tensors.)
            return SCALAR_FACT
        if any(
            (self.ctx.qualified(_called(d.decorator)) or "").startswith("triton.")
            for d in function.decorators
        ):
            return UNKNOWN_FACT  # a Triton kernel's arguments are pointers and blocks, not torch tensors
        if upcast:
            return Fact(TENSOR, frozenset({F32}), (Step(param, "cast to float32 by `custom_fwd`"),))
        if self._inherited_hook(function):
            return UNKNOWN_FACT
        if _TARGET_NAME.search(name) and self._loss(function):
            # A loss's labels come from the data, not from an op autocast runs low: float32 (or
            # integer) under autocast, as a model's weights are; a cast mode still casts them.
            return self._caller_tensor(
                param, f"`{name}` is the target of loss `{function.name.value}`", weights=True
            )
        return self._caller_tensor(
            param, f"`{name}` is an input of `{function.name.value}`, in the caller's dtype"
        )

    def _loss(self, function: cst.FunctionDef) -> bool:
        """A loss: the function, or the class it is a method of, is named as one."""
        klass = self._class_of.get(function)
        return any(
            "loss" in name.lower() for name in (function.name.value, klass.name.value if klass else "")
        )

    def _module_class(self, function: cst.FunctionDef) -> bool:
        """A method of a class with a base class other than `object` (a module, in model code)."""
        klass = self._class_of.get(function)
        return klass is not None and any(self.ctx.code(base.value) != "object" for base in klass.bases)

    def _plain_object(self, function: cst.FunctionDef | None) -> bool:
        """A method of a plain class (`class TreeSearch(object)`, through this file's bases too): its
        objects are no modules, so a model's cast never reaches the modules they keep."""
        klass = self._class_of.get(function) if function is not None else None
        return klass is not None and all(
            self.ctx.code(base.value) in ("object", *self._classes)
            for cls in (klass, *self._ancestors(klass))
            for base in cls.bases
        )

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
        passed = _passed(call, positional, name)
        return None if passed is None else self._facts.get(passed)

    def _sites(self, function: cst.FunctionDef) -> list[tuple[cst.Call, cst.FunctionDef | cst.Module]]:
        """The calls of `function` in this file: `name(...)`, or `self.name(...)` for a method; for a
        function defined in another's body, the calls of its name in that body."""
        name = function.name.value
        if function not in self._class_of and function not in self._functions.get(name, ()):
            return [
                (call, outer)
                for call in self.ctx.index.calls
                if isinstance(call.func, cst.Name)
                and call.func.value == name
                and (outer := self.ctx.function_of(call)) is not None
                and any(item is function for item in suite_body(outer.body))
            ]
        if self._call_sites is None:
            self._call_sites = {}
            for call in self.ctx.index.calls:
                func = call.func
                if self.profile.definitions and self.profile.idle(self._definition(call)):
                    continue  # a call in a method nothing runs passes nothing
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
                elif (
                    isinstance(func, cst.Attribute)
                    and isinstance(func.value, cst.Name)
                    and func.attr.value in self._functions
                    and not self.ctx.qualified(func)
                ):
                    # `b.advance(score[i], step)` on an object of one of the file's classes
                    key = "." + func.attr.value
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
        ] + (self._sites_on_objects(klass, function) if klass is not None else [])

    def _sites_on_objects(
        self, klass: cst.ClassDef, function: cst.FunctionDef
    ) -> list[tuple[cst.Call, cst.FunctionDef | cst.Module]]:
        """The calls `obj.name(...)` of a method on an object other than `self` (`b.advance(score[i],
        step)` in the agent that builds the searches), where the name can only mean this method: only
        classes related to its own define it in this file, and it is no name that modules, tensors or
        other libraries' objects commonly have."""
        name = function.name.value
        if name.startswith("__") or _COMMON_METHOD.match(name):
            return []
        owners = {self._class_of[f] for f in self._functions[name] if f in self._class_of}
        if len(owners) != len(self._functions[name]) or not all(
            self._related(klass, other) for other in owners
        ):
            return []
        assert self._call_sites is not None
        return [
            (call, scope) for call, scope in self._call_sites.get("." + name, []) if scope is not function
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
            for node in walk(function.body, expressions=False):
                if isinstance(node, cst.AnnAssign) and node.value is not None:
                    target, value = node.target, node.value
                elif isinstance(node, cst.Assign) and len(node.targets) == 1:
                    target, value = node.targets[0].target, node.value
                else:
                    continue
                if not isinstance(target, cst.Name):
                    continue
                named = {
                    n.value for n in walk(value) if isinstance(n, cst.Name) and n.value in self._functions
                }
                if len(named) == 1:
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

    def _class_name(self, frame: Frame) -> str:
        return frame.env.get("__class__", OTHER_FACT).module or ""

    # Provided by the layers above (`amplint.static.engine`).
    @abstractmethod
    def _bind(
        self, target: cst.BaseExpression, fact: Fact, value: cst.BaseExpression | None, frame: Frame
    ) -> None: ...

    @abstractmethod
    def _expr(self, node: cst.BaseExpression, frame: Frame) -> Fact: ...

    @abstractmethod
    def _run(self, body: Iterable[cst.BaseStatement], frame: Frame) -> None: ...

    @abstractmethod
    def _autocast_of(
        self, expr: cst.BaseExpression, frame: Frame, dtype_of: Callable[[cst.CSTNode], Fact] | None = None
    ) -> frozenset[Autocast] | None: ...

    @abstractmethod
    def _custom_fwd_float32(self, decorator: cst.BaseExpression) -> bool: ...


def _passed(call: cst.Call, positional: list[str], name: str) -> cst.BaseExpression | None:
    """What `call` passes for parameter `name` (`positional`: the parameters a position fills, in
    order); None when it passes nothing, or passes `*args` or `**kwargs`, which may hold it."""
    index = positional.index(name) if name in positional else None
    at = 0
    for arg in call.args:
        if arg.star:
            return None
        if arg.keyword is not None:
            if arg.keyword.value == name:
                return arg.value
        else:
            if at == index:
                return arg.value
            at += 1
    return None


def _calls_at(ctx: ParsedFile, name: str, line: int) -> list[cst.Call]:
    """The calls of `name` (`name(...)` or `obj.name(...)`) whose name is on `line` of `ctx`'s file."""
    found = []
    for call in ctx.index.calls:
        func = call.func
        named = func if isinstance(func, cst.Name) else func.attr if isinstance(func, cst.Attribute) else None
        if named is not None and named.value == name and ctx.position(named).start.line == line:
            found.append(call)
    return found


# Method names that objects of other libraries have too (modules, tensors, optimizers, models,
# tokenizers): `obj.name(...)` with one of them may call something other than the file's method.
_COMMON_METHOD = re.compile(
    r"^(forward|step|update|reset|train|eval|to|cuda|cpu|float|half|double|type|get|set|apply|run"
    r"|load|save|sample|generate|encode|decode|backward|zero_grad|state_dict|load_state_dict|add"
    r"|parameters|append|extend|pop|copy|clone|view|reshape|split|call|predict|fit|transform|log|exp"
    r"|sum|mean|norm|close|start|stop|write|read|format|items|keys|values|register|build|init|setup"
    r"|loss|compute|score|process|prepare|embed|tokenize)$"
)

_FOREIGN = frozenset({"tensorflow", "jax", "flax", "keras", "mlx", "paddle", "mindspore"})


# The labels a loss compares its predictions with (`y`, `gt`, `target`, `labels`, `y_true`).
_TARGET_NAME = re.compile(r"^(y|y_true|gt|gts|ground_truth|targets?|labels?)$|_(gt|targets?|labels?)$")
# Parameters that by their name hold integers: token ids and indices (`input_ids`, `idx`,
# `position_ids`), counts and sizes (`num_heads`, `n_head`, `seq_len`, `lengths`).
_INTEGER_NAME = re.compile(
    r"^(ids|idx|indices|index|positions|lengths?|seq_?len)$"
    r"|_(ids?|idx|indices|len|length|lengths)$|^(num|n)_"
)


def _called(node: cst.BaseExpression) -> cst.BaseExpression:
    """What a decorator names: `triton.jit` for `@triton.jit` and `@triton.jit(debug=True)`."""
    return node.func if isinstance(node, cst.Call) else node
