"""The dtype facts of `self` attributes: what `__init__` (or a method that runs only while the
module is built) assigns them, buffers, and class attributes."""

from __future__ import annotations

import libcst as cst

from amplint.static import ops
from amplint.static.engine.state import EngineState, Frame
from amplint.static.facts import (
    MODULE,
    OFF,
    OTHER,
    TENSOR,
    UNKNOWN,
    UNKNOWN_FACT,
    Fact,
    join,
)
from amplint.static.scopes import registered_buffer, suite_body, walk


class AttributeFacts(EngineState):
    """The dtype facts of `self` attributes: what `__init__` (or a method that runs only while the
    module is built) assigns them, buffers, and class attributes._CLASS"""

    def _self_attribute(self, name: str, node: cst.CSTNode, frame: Frame) -> Fact:
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
        frame = Frame(dict(self._parameters(init)) if init is not None else {}, frozenset({OFF}))
        frame.env["__class__"] = Fact(OTHER, module=cls)
        found: list[Fact] = []
        methods = [*([init] if init is not None else []), *self._construction_methods(klass)]
        for statement in (node for method in methods for node in self._binding_nodes(method)):
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
                        kept = len(statement.args) > 1 and _made_float32(self.of(statement.args[1].value))
                        found.append(
                            self._caller_tensor(
                                where,
                                f"`self.{name}` is a buffer, in the model's dtype",
                                weights=True,
                                kept=kept,
                            )
                        )
        if found:
            return join(found)
        inherited = self._class_attribute(klass, name)
        for base in klass.bases:
            # `class LinearScalingRotaryEmbedding(RotaryEmbedding)`: `super().__init__()` made it.
            if inherited.kind == UNKNOWN and isinstance(base.value, cst.Name) and base.value.value != cls:
                inherited = self._init_attribute(base.value.value, name, where)
        return inherited

    def _binding_nodes(self, method: cst.FunctionDef) -> list[cst.Assign | cst.Call]:
        """The assignments and calls of a method's body, in walk order: walked once per method, not
        once per attribute asked about."""
        found = self._bindings.get(method)
        if found is None:
            found = self._bindings[method] = [
                node for node in walk(method.body) if isinstance(node, (cst.Assign, cst.Call))
            ]
        return found

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
        function = self.ctx.scope_of(where)
        klass = self._classes.get(cls)
        if klass is None or not isinstance(function, cst.FunctionDef) or not self._building(function):
            return None
        init = [
            f for f in suite_body(klass.body) if isinstance(f, cst.FunctionDef) and f.name.value == "__init__"
        ]
        for method in [*init, *self._construction_methods(klass)]:
            for node in self._binding_nodes(method):
                registered = registered_buffer(node, name)
                if registered is not None:
                    fact = self.of(registered)
                    return fact if fact.kind == TENSOR and fact.dtypes else None
        return None

    def _class_attribute(self, klass: cst.ClassDef, name: str) -> Fact:
        """What a class attribute (`eps = 1e-8` in the class body) holds."""
        frame = Frame(dict(self._module_constants()), frozenset({OFF}))
        found = [
            self._init_value(small.value, frame)
            for item in suite_body(klass.body)
            if isinstance(item, cst.SimpleStatementLine)
            for small in item.body
            if isinstance(small, cst.Assign)
            and any(isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets)
        ]
        return join(found) if found else UNKNOWN_FACT

    def _init_value(self, value: cst.BaseExpression, frame: Frame) -> Fact:
        if isinstance(value, cst.Call):
            constructor = (self.ctx.qualified(value.func) or self.ctx.code(value.func)).rsplit(".", 1)[-1]
            if constructor in ("Parameter", "Buffer"):
                # A checkpoint load casts parameters to its dtype; a buffer made in float32 it leaves.
                kept = (
                    constructor == "Buffer"
                    and bool(value.args)
                    and _made_float32(self.of(value.args[0].value))
                )
                return self._caller_tensor(
                    value, f"a {constructor.lower()}, in the model's dtype", weights=True, kept=kept
                )
            if constructor in ops.MODULE_OPS or constructor[:1].isupper():
                return Fact(MODULE, module=constructor)
        # A plain tensor attribute keeps the dtype it is made in: `.half()` converts only the
        # parameters and buffers (the same fact whether or not `__init__` was analysed first).
        return self._expr(value, frame)


def _converts_itself(klass: cst.ClassDef) -> bool:
    """A module class that overrides `_apply`, the method `.to()`, `.half()` and `.cuda()` go
    through: it decides what becomes of its buffers itself."""
    return any(
        isinstance(item, cst.FunctionDef) and item.name.value == "_apply" for item in suite_body(klass.body)
    )


def _made_float32(fact: Fact) -> bool:
    """A tensor made in float32 on purpose (`.float()`, `dtype=torch.float32`), whatever the caller
    runs: building the model in a half dtype leaves it float32."""
    return fact.kind == TENSOR and fact.is_wide and not fact.caller
