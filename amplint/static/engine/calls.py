"""What a call returns: casts, factories, the file's own functions (analysed with their
arguments' facts), module calls, library calls and tensor methods, and autocast regions."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

import libcst as cst

from amplint.static import ops
from amplint.static.autocast import autocast_call, autocast_settings
from amplint.static.engine.interpret import DTYPE_NAMES, INTEGER_DTYPE, Interpreter
from amplint.static.engine.state import Frame
from amplint.static.facts import (
    DTYPE,
    INTEGER,
    INTEGER_FACT,
    MAX_WHY,
    MODULE,
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
    join,
    promote,
)
from amplint.static.imports import dotted_name
from amplint.static.ops import F16, F32, HALF
from amplint.static.scopes import named_params, suite_body, walk


class CallFacts(Interpreter):
    """What a call returns: casts, factories, the file's own functions (analysed with their
    arguments' facts), module calls, library calls and tensor methods, and autocast regions._CLASS"""

    def _call(self, node: cst.Call, frame: Frame) -> Fact:
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
                        (*callee.why[-(MAX_WHY - 1) :], Step(node, text)),
                        callee.caller,
                    )
                    if callee.kind == TENSOR and callee.dtypes and not callee.caller
                    else self._caller_tensor(node, text + ", the caller's")
                )
                return self._op("linear", positional[:1], node, frame, natural=weights)
            if func.value in ("int", "len", "round", "abs", "min", "max", "sum") and all(
                f.kind in (SCALAR, INTEGER) for f in args
            ):
                return SCALAR_FACT
            # An opaque function: as its tensor inputs are (`*args`, `**kwargs` are containers).
            return _as_inputs(f for arg, f in zip(node.args, args, strict=True) if not arg.star)
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
                # A module a plain object keeps (a search's n-gram blocker) is no submodule of a
                # model: the model's cast does not reach it, its output follows its input.
                plain = not owner.dtypes and self._plain_object(self.ctx.function_of(node))
                return self._module_call(owner.module or "", node, positional, frame, plain=plain)
            if owner.kind in (OTHER, SCALAR):
                # A callable the class was handed (`self.apply_nonlin = apply_nonlin`, a function
                # or None by default): no layer of the model, so its output follows its inputs.
                return _as_inputs(positional)
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
        frame: Frame,
    ) -> Fact:
        """A method of a module: a cast (`.half()`, `.to(torch.bfloat16)`) converts its parameters
        and buffers, `.parameters()` are in its dtype, `.cuda()` or `.train()` keep it; any other
        method runs it (`model.generate(...)`)."""
        if method in ops.CAST_METHODS and not positional:
            target = ops.CAST_METHODS[method]
            step = Step(node, f"`.{method}()` makes it {SHORT_NAMES[target]}")
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

    def _map(self, node: cst.Call, iterated: Fact, frame: Frame) -> Fact:
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
        self, name: str, node: cst.Call, frame: Frame, positional: list[Fact], keywords: dict[str, Fact]
    ) -> Fact | None:
        """A call of this file's own function or method: its return value, analysed with these
        arguments (to a limited depth, and not inside itself)."""
        bare = name.removeprefix("self.")
        candidates = [
            f for f in self._functions.get(bare, []) if (f in self._class_of) == name.startswith("self.")
        ]
        if len(candidates) > 1 and name.startswith("self."):
            candidates = self._method_of_self(candidates, node)
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
        inner = Frame(env, frame.autocast, depth=frame.depth + 1)
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
        result = join(inner.returns) if inner.returns else OTHER_FACT
        if result.kind == TENSOR:
            result = replace(result, why=(*result.why[-(MAX_WHY - 1) :], Step(node, f"returned by `{bare}`")))
        self._returns[signature] = result  # type: ignore[index]
        return result

    def _method_of_self(self, candidates: list[cst.FunctionDef], call: cst.Call) -> list[cst.FunctionDef]:
        """Of the file's methods named alike, those `self.name(...)` may reach from the class that
        holds `call`: its own or its nearest in-file base's (unless a stub), and the overrides of
        its in-file subclasses (two handlers that each define `_apply_sampling` call their own; a
        base's `self._load_model()` reaches every subclass's)."""
        klass = self.ctx.index.top_of.get(call)
        if not isinstance(klass, cst.ClassDef):
            return candidates
        lineage = (klass, *self._ancestors(klass))
        defined = ([f for f in candidates if self._class_of[f] is k] for k in lineage)
        nearest = next((own for own in defined if own), [])
        below = [f for f in candidates if klass in self._ancestors(self._class_of[f])]
        return [f for f in nearest if not _stub(f)] + below

    def _module_call(
        self, constructor: str, node: cst.Call, positional: list[Fact], frame: Frame, *, plain: bool = False
    ) -> Fact:
        if self._foreign():
            return UNKNOWN_FACT  # a Keras or Flax layer: no torch autocast
        op = ops.MODULE_OPS.get(constructor)
        first = positional[0] if positional else UNKNOWN_FACT
        weights = (
            UNKNOWN_FACT
            if plain
            else self._caller_tensor(
                node, f"`{dotted_name(node.func) or constructor}` runs in the model's dtype", weights=True
            )
        )
        if op in ("sigmoid", "tanh", "softmax", "log_softmax", "softplus"):
            return self._op(op, [first], node, frame)
        if op is not None:
            return self._op(op, [first], node, frame, natural=weights)
        # Any other layer: under autocast its products run low; its output in the weights' dtype, or
        # wider where its input is (a hook, a dropout or a norm passes an upcast input on in float32).
        return self._op("linear", [first], node, frame, natural=promote([first, weights]))

    def _library_call(
        self, qualified: str, node: cst.Call, positional: list[Fact], keywords: dict[str, Fact], frame: Frame
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
                return SCALAR_FACT
            dtype = keywords.get("torch_dtype") or keywords.get("dtype")
            if name in MODEL_LOADERS and dtype is not None and dtype.kind == DTYPE and dtype.dtypes:
                # `AutoModel.from_pretrained(..., torch_dtype=torch.float16)`: calling it runs in that dtype.
                loaded = self._cast_to(dtype, node, f"`{name}(...)` loads the model and")
                return Fact(MODULE, loaded.dtypes, loaded.why, loaded.caller, module=name)
            if qualified in _ADAPTER_WRAPPERS:
                return self._adapted(name, node, positional)
            return _as_inputs(positional)
        if name == "finfo" or name == "iinfo":
            return positional[0] if positional and positional[0].kind == DTYPE else OTHER_FACT
        if name == "promote_types" and len(positional) == 2 and any(f.kind == DTYPE for f in positional):
            return self._promote_types(node, positional)
        dtype = keywords.get("dtype")
        if name in ops.FLOAT_FACTORIES or name == "arange":
            if name in ("tensor", "as_tensor") and positional and positional[0].kind == TENSOR:
                return positional[0]
            return replace(self._factory(name, node, positional, dtype), host="device" not in keywords)
        if name in ops.LIKE_FACTORIES:
            if dtype is not None and dtype.kind == DTYPE:
                return self._cast_to(dtype, node, f"`dtype=` of `{name}`")
            return positional[0] if positional else UNKNOWN_FACT
        if name in ops.INTEGER_OPS:
            return INTEGER_FACT
        if name in ("where",):
            if len(positional) == 3 and all(f.kind == SCALAR for f in positional[1:]):
                # `torch.where(mask, 0.0, -1e9)`: a tensor of the default dtype (int64 for two ints)
                values = [a.value for a in node.args if not a.keyword and not a.star][1:]
                if all(isinstance(_unsigned(v), cst.Integer) for v in values):
                    return INTEGER_FACT
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
        cpu_op = ops.einsum_runs_as(_equation(node)) if name == "einsum" else None
        return self._tensor_op(name, inputs, node, keywords, frame, cpu_op)

    def _promote_types(self, node: cst.Call, dtypes: list[Fact]) -> Fact:
        """`torch.promote_types(x.dtype, torch.float32)`: the widest of the dtypes, whatever the others
        are (a `dtype` parameter, in the caller's dtypes: float32 still)."""
        promoted = promote([replace(f, kind=TENSOR) for f in dtypes])
        names = "/".join(SHORT_NAMES[d] for d in ops.FLOATS if d in promoted.dtypes)
        why = (*promoted.why[-(MAX_WHY - 1) :], Step(node, f"`promote_types` gives {names}"))
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
            return Fact(MODULE, model.dtypes, (*model.why[-(MAX_WHY - 1) :], step), model.caller, module=name)
        return Fact(MODULE, module=name)

    def _tensor_op(
        self,
        op: str,
        inputs: list[Fact],
        node: cst.Call,
        keywords: dict[str, Fact],
        frame: Frame,
        cpu_op: str | None = None,
    ) -> Fact:
        dtype = keywords.get("dtype")
        result = self._op(op, inputs, node, frame, cpu_op=cpu_op)
        if dtype is not None and dtype.kind == DTYPE and (dtype.dtypes or dtype.module == INTEGER_DTYPE):
            return self._cast_to(dtype, node, f"`dtype=` of `{op}`")
        return result

    def _tensor_method(
        self,
        method: str,
        receiver: Fact,
        node: cst.Call,
        positional: list[Fact],
        keywords: dict[str, Fact],
        frame: Frame,
    ) -> Fact:
        if method in ops.CAST_METHODS and not positional:
            target = ops.CAST_METHODS[method]
            why = (Step(node, f"`.{method}()` makes it {SHORT_NAMES[target]}"),)
            return Fact(TENSOR, frozenset({target}), why, host=receiver.host)
        if method == "cuda":
            return replace(receiver, host=False)
        if method in ("to", "type"):
            dtype = keywords.get("dtype") or next((f for f in positional if f.kind in (DTYPE, TENSOR)), None)
            # `.to(torch.float32)` keeps the tensor where it is; a device or another tensor moves it.
            host = receiver.host and all(f.kind == DTYPE for f in positional) and "device" not in keywords
            if dtype is not None and (dtype.dtypes or dtype.module == INTEGER_DTYPE):
                return replace(self._cast_to(dtype, node, f"`.{method}(...)`"), host=host)
            return replace(receiver, host=host)
        if method == "type_as":
            return positional[0] if positional else receiver
        if method in ops.NEW_FACTORIES:
            if keywords.get("dtype") is not None and keywords["dtype"].dtypes:
                return self._cast_to(keywords["dtype"], node, f"`dtype=` of `{method}`")
            return receiver
        if method in ops.SCALAR_METHODS:
            return SCALAR_FACT
        if method in ops.INTEGER_OPS:
            return INTEGER_FACT
        if receiver.kind not in (TENSOR, UNKNOWN):
            return UNKNOWN_FACT if receiver.kind != SCALAR else SCALAR_FACT
        if method in ("chunk", "split", "unbind", "tensor_split") or method in ops.LAYOUT_METHODS:
            return receiver
        if method in ops.PARAMETER_METHODS:
            if len(receiver.why) == 1 and isinstance(receiver.why[0].node, cst.Param):
                # A model passed in (`def train(model): Adam(model.parameters())`): its weights,
                # which autocast leaves float32, not an input in the caller's dtype.
                name = receiver.why[0].node.name.value
                return self._caller_tensor(
                    node, f"`{name}.{method}()` are the weights of the model passed in", weights=True
                )
            return receiver  # a model's parameters, in the dtype it was given
        if method in ("masked_fill", "masked_fill_", "masked_scatter", "masked_scatter_"):
            return receiver  # the mask and the fill value never change the dtype
        if method in ("max", "min", "topk", "sort", "mode", "median") and (positional or keywords):
            return receiver
        inputs = [receiver, *(f for f in positional if f.kind in (TENSOR, UNKNOWN))]
        return self._tensor_op(method.rstrip("_"), inputs, node, keywords, frame)

    def _factory(self, name: str, node: cst.Call, positional: list[Fact], dtype: Fact | None) -> Fact:
        if dtype is not None and dtype.kind == DTYPE:
            return self._cast_to(dtype, node, f"`dtype=` of `{name}`")
        if name == "arange" and not any(
            f.kind == SCALAR and f.number is not None and not f.number.is_integer() for f in positional
        ):
            return INTEGER_FACT
        return Fact(TENSOR, frozenset({F32}), (Step(node, f"`{name}` makes float32 (the default dtype)"),))

    def _cast_to(self, dtype: Fact, node: cst.CSTNode, how: str) -> Fact:
        if dtype.kind == DTYPE and dtype.module == INTEGER_DTYPE:
            return INTEGER_FACT
        names = "/".join(SHORT_NAMES[d] for d in ops.FLOATS if d in dtype.dtypes)
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
        self, expr: cst.BaseExpression, frame: Frame, dtype_of: Callable[[cst.CSTNode], Fact] | None = None
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
            and DTYPE_NAMES.get(self.ctx.qualified(cast) or "") == F32
        )


_MAX_DEPTH = 3  # calls of the file's own functions followed inside each other


# Calls that load or build a whole model, whose `dtype=` is the model's dtype.
MODEL_LOADERS = frozenset({"from_pretrained", "from_single_file", "from_config", "_from_config"})


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


# Names of a model passed around as a value (`def generate(model, idx)`).
_MODEL_NAME = re.compile(r"^(model|net|network)$|_model$")


def _skipped(function: cst.FunctionDef) -> bool:
    """A body that is a lone `pass`: what `amplint.static.regions` leaves of a body no active rule
    needs (a stub too; either way it says nothing of what the function returns)."""
    body = suite_body(function.body)
    return (
        len(body) == 1
        and isinstance(body[0], cst.SimpleStatementLine)
        and all(isinstance(small, cst.Pass) for small in body[0].body)
    )


def _stub(function: cst.FunctionDef) -> bool:
    """An abstract method: `@abstractmethod`, or a body of a docstring and `pass`, `...` or `raise
    NotImplementedError` (a lone `pass` may be a body `amplint.static.regions` skipped)."""
    if any(
        (dotted_name(d.decorator) or "").rsplit(".", 1)[-1] == "abstractmethod" for d in function.decorators
    ):
        return True
    body = list(suite_body(function.body))
    docstring = function.get_docstring() is not None
    rest = body[1:] if docstring else body
    if len(rest) != 1 or not isinstance(rest[0], cst.SimpleStatementLine) or len(rest[0].body) != 1:
        return False
    small = rest[0].body[0]
    if isinstance(small, cst.Raise):
        raised = small.exc.func if isinstance(small.exc, cst.Call) else small.exc
        return raised is not None and dotted_name(raised) == "NotImplementedError"
    ellipsis = isinstance(small, cst.Expr) and isinstance(small.value, cst.Ellipsis)
    return ellipsis or (docstring and isinstance(small, cst.Pass))


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


def _unsigned(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.expression if isinstance(node, cst.UnaryOperation) else node


def _equation(node: cst.Call) -> str | None:
    """The literal equation of an `einsum` call, else None."""
    first = node.args[0].value if node.args and node.args[0].keyword is None else None
    value = first.evaluated_value if isinstance(first, cst.SimpleString) else None
    return value if isinstance(value, str) else None


def _as_inputs(facts: Iterable[Fact]) -> Fact:
    """What an opaque call returns: its tensor inputs promoted, else nothing known."""
    tensors = [f for f in facts if f.kind == TENSOR]
    return promote(tensors) if tensors else UNKNOWN_FACT


def _float_literal(node: cst.Call) -> float | None:
    if len(node.args) == 1 and isinstance(node.args[0].value, cst.SimpleString):
        try:
            return float(str(node.args[0].value.evaluated_value))
        except ValueError:
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
