"""CudaIndexingMode: PyTorch's indexing semantics, re-expressed through dispatcher ops.

There is no GPU here, so the semantics are checked on real CPU tensors against PyTorch's own
indexing, and the fake ``cuda:0`` path only for shapes, dtypes and devices.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from amplint.runtime.cuda_indexing import CudaIndexingMode, getitem, setitem  # noqa: E402

aten = torch.ops.aten
T = torch.tensor
S = slice
SHAPE = (2, 3, 4, 5)
CUDA0 = torch.device("cuda:0")
MASK2 = T([[True, False, True], [False, True, True]])
MASK1 = T([True, False])


def base() -> torch.Tensor:
    return torch.arange(2 * 3 * 4 * 5).reshape(*SHAPE).float()


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    # PyTorch warns about list-as-tuple indices and uint8 masks; both are exercised on purpose.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


@pytest.fixture
def fake() -> tuple[FakeTensorMode, torch.Tensor]:
    mode = FakeTensorMode()
    with mode:
        t = torch.empty(*SHAPE, device="cuda:0")
    return mode, t


GET_CASES = [
    pytest.param(0, id="int"),
    pytest.param(-1, id="neg-int"),
    pytest.param((1, 2), id="two-ints"),
    pytest.param((-1, -3, -4, -5), id="all-neg-ints"),
    pytest.param(S(None), id="full-slice"),
    pytest.param(S(1, None), id="slice-start"),
    pytest.param(S(None, None, 2), id="slice-step"),
    pytest.param((S(None), S(None, None, 2)), id="slice-step-dim1"),
    pytest.param((S(None), S(None), S(1, None, 3)), id="slice-start-step"),
    pytest.param(S(-3, -1), id="slice-neg"),
    pytest.param(S(5, 10), id="slice-out-of-range"),
    pytest.param(S(-10, 1), id="slice-clamped-start"),
    pytest.param(S(1, 0), id="slice-empty"),
    pytest.param((S(0, 2), 0), id="slice-whole-dim-in-tuple"),
    pytest.param((S(T(0), T(1)),), id="slice-tensor-bounds"),
    pytest.param(None, id="none"),
    pytest.param((0, S(0, 3), None, S(None, None, 3)), id="none-between"),
    pytest.param(..., id="ellipsis"),
    pytest.param((..., 0), id="ellipsis-first"),
    pytest.param((0, ...), id="ellipsis-last"),
    pytest.param((0, ..., -1), id="ellipsis-middle"),
    pytest.param((..., None, 0), id="ellipsis-none-int"),
    pytest.param((..., ...), id="two-ellipses"),
    pytest.param((), id="empty-tuple"),
    pytest.param(True, id="true"),
    pytest.param(False, id="false"),
    pytest.param((None, True, ..., False), id="bools-none-ellipsis"),
    pytest.param((S(None), True, [0, 1]), id="bool-adjacent-advanced"),
    pytest.param(([0, 1], S(None), True), id="bool-separated-advanced"),
    pytest.param([0, 1], id="list"),
    pytest.param([-1, 0], id="list-neg"),
    pytest.param([], id="empty-list"),
    pytest.param([[0, 1], [1, 0]], id="list-of-lists-as-tuple"),
    pytest.param([0, S(None)], id="list-with-slice-as-tuple"),
    pytest.param([None, 0], id="list-with-none-as-tuple"),
    pytest.param([0] * 33, id="long-list-not-tuple"),
    pytest.param(((0, 1), 0), id="tuple-as-advanced"),
    pytest.param(([[0], [1]], [0, 2]), id="broadcast-advanced"),
    pytest.param(T([0, 1]), id="long-tensor"),
    pytest.param((T([0, 1], dtype=torch.int32),), id="int32-tensor"),
    pytest.param(T([[1, 0], [0, 1]]), id="2d-long-tensor"),
    pytest.param((S(None), [0, 2], S(1, 3)), id="slice-list-slice"),
    pytest.param(([0, 1], S(None), [1, 2]), id="separated-advanced"),
    pytest.param(([0, 1], [0, 2]), id="adjacent-advanced"),
    pytest.param((0, [0, 2], S(None), [1, 3]), id="int-then-separated-advanced"),
    pytest.param((..., [0, 1], 0), id="ellipsis-list-int"),
    pytest.param((..., None, [0, 1], None, 0), id="nones-around-list"),
    pytest.param((S(None), T([1]), S(None), [0, 1]), id="1d-tensor-separated"),
    pytest.param(T(0), id="0d-tensor"),
    pytest.param((S(None), T(-1)), id="0d-tensor-neg"),
    pytest.param((S(None), T(1), S(None), [0, 1]), id="0d-tensor-is-select"),
    pytest.param((T(0), T([0, 2])), id="0d-and-1d-tensor"),
    pytest.param(T(True), id="0d-bool-tensor"),
    pytest.param((T(1, dtype=torch.uint8), 0), id="0d-byte-tensor"),
    pytest.param(MASK1, id="mask"),
    pytest.param(MASK2, id="2d-mask"),
    pytest.param((MASK2, 0), id="2d-mask-then-int"),
    pytest.param((MASK2, ..., 0), id="2d-mask-ellipsis-int"),
    pytest.param((0, torch.ones(3, 4, dtype=torch.bool)), id="int-then-2d-mask"),
    pytest.param((S(None), MASK2[0], [1, 2]), id="mask-and-list"),
    pytest.param([[[True, False, True], [False, True, True]]], id="nested-bool-list"),
    pytest.param(T([1, 0], dtype=torch.uint8), id="byte-mask"),
]


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.parametrize("index", GET_CASES)
def test_getitem_matches_pytorch_on_cpu(index: Any) -> None:
    x = base()
    expected = x[index]
    got = getitem(x, index)
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)
    # View or copy, as PyTorch decides (e.g. a 0-dim long tensor index is a select).
    assert _shares_storage(got, x) == _shares_storage(expected, x)
    assert got is not x


@pytest.mark.parametrize("index", GET_CASES)
def test_getitem_on_fake_cuda(fake: tuple[FakeTensorMode, torch.Tensor], index: Any) -> None:
    mode, t = fake
    expected = base()[index]
    with mode, CudaIndexingMode():
        got = t[index]
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    assert got.device == CUDA0


SET_CASES = [
    pytest.param(0, id="int"),
    pytest.param(-1, id="neg-int"),
    pytest.param((1, -2), id="two-ints"),
    pytest.param(S(None, None, 2), id="slice-step"),
    pytest.param((S(None), S(1, 3)), id="slice-dim1"),
    pytest.param(S(5, 10), id="slice-empty"),
    pytest.param(None, id="none"),
    pytest.param(..., id="ellipsis"),
    pytest.param((0, ..., -1), id="ellipsis-middle"),
    pytest.param((..., None, 0), id="ellipsis-none-int"),
    pytest.param(True, id="true"),
    pytest.param(False, id="false"),
    pytest.param((S(None), True, 0), id="bool-in-tuple"),
    pytest.param([0, 1], id="list"),
    pytest.param(T([1]), id="long-tensor"),
    pytest.param((S(None), [0, 2], S(1, 3)), id="slice-list-slice"),
    pytest.param(([0, 1], S(None), [1, 2]), id="separated-advanced"),
    pytest.param((0, [0, 2], S(None), [1, 3]), id="int-then-separated-advanced"),
    pytest.param(T(1), id="0d-tensor"),
    pytest.param((S(None), T(1), S(None), [0, 1]), id="0d-tensor-is-select"),
    pytest.param(MASK1, id="mask"),
    pytest.param((MASK2, 0), id="2d-mask-then-int"),
    pytest.param((..., [0, 3]), id="ellipsis-list"),
]

VALUE_KINDS = ["float", "int", "bool", "0d-tensor", "same-shape", "broadcast", "leading-ones"]


def _value(kind: str, shape: torch.Size) -> Any:
    n = max(1, torch.Size(shape).numel())
    return {
        "float": -1.5,
        "int": -7,
        "bool": True,
        "0d-tensor": T(-2.0),
        "same-shape": -torch.arange(n, dtype=torch.float32)[: torch.Size(shape).numel()].reshape(shape),
        "broadcast": -torch.arange(1, 1 + shape[-1], dtype=torch.float32) if len(shape) else T(-3.0),
        "leading-ones": -torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(1, 1, *shape),
    }[kind]


@pytest.mark.parametrize("kind", VALUE_KINDS)
@pytest.mark.parametrize("index", SET_CASES)
def test_setitem_matches_pytorch_on_cpu(index: Any, kind: str) -> None:
    value = _value(kind, base()[index].shape)
    expected = base()
    expected[index] = value
    got = base()
    setitem(got, index, value)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("kind", VALUE_KINDS)
@pytest.mark.parametrize("index", SET_CASES)
def test_setitem_on_fake_cuda(fake: tuple[FakeTensorMode, torch.Tensor], index: Any, kind: str) -> None:
    mode, t = fake
    value = _value(kind, base()[index].shape)
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        # Values of a CUDA tensor live on CUDA; a real CPU 0-dim value is left as is on purpose.
        value = mode.from_tensor(value)
    with mode, CudaIndexingMode():
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            value = value.to("cuda")
        t[index] = value
    assert t.shape == SHAPE
    assert t.device == CUDA0


def test_setitem_casts_python_scalars_to_the_tensor_dtype() -> None:
    expected = torch.zeros(3, dtype=torch.int64)
    expected[[0, 2]] = 2.7
    expected[1] = True
    got = torch.zeros(3, dtype=torch.int64)
    setitem(got, [0, 2], 2.7)
    setitem(got, 1, True)
    assert torch.equal(got, expected)


def _raised(fn: Callable[[], Any]) -> BaseException:
    try:
        fn()
    except Exception as exc:
        return exc
    raise AssertionError("expected an exception")


BAD_CASES = [
    pytest.param(5, id="int-out-of-bounds"),
    pytest.param(-3, id="neg-int-out-of-bounds"),
    pytest.param((0, None, 7), id="bounds-reported-at-tuple-position"),
    pytest.param((0, 0, 0, 0, 0), id="too-many-indices"),
    pytest.param((..., ..., 0), id="ellipses-overrun"),
    pytest.param(1.5, id="float"),
    pytest.param((0, "a"), id="str-in-tuple"),
    pytest.param(S(None, None, -1), id="negative-step"),
    pytest.param(S(None, None, 0), id="zero-step"),
    pytest.param([5], id="list-out-of-bounds"),
    pytest.param(T([0.5]), id="float-tensor"),
    pytest.param(T([True, False, True]), id="mask-shape-mismatch"),
    pytest.param([[True, False, True], [False, True, True]], id="bool-lists-read-as-tuple"),
]


@pytest.mark.parametrize("index", BAD_CASES)
def test_invalid_indices_raise_like_pytorch(index: Any) -> None:
    x = base()
    expected = _raised(lambda: x[index])
    got = _raised(lambda: getitem(x, index))
    assert type(got) is type(expected)
    assert str(got).splitlines()[0] == str(expected).splitlines()[0]
    setitem_error = _raised(lambda: setitem(base(), index, 0.0))
    assert type(setitem_error) is type(_raised(lambda: base().__setitem__(index, 0.0)))


def test_invalid_index_of_0d_tensor() -> None:
    x = T(3.0)
    for index in (0, 5):
        expected = _raised(lambda index=index: x[index])
        got = _raised(lambda index=index: getitem(x, index))
        assert (type(got), str(got)) == (type(expected), str(expected))


# Errors that need no data: on fake tensors they are raised just as on real ones.
FAKE_BAD_CASES = [5, (0, None, 7), (0, 0, 0, 0, 0), 1.5, S(None, None, -1), T([True, False, True])]


@pytest.mark.parametrize("index", FAKE_BAD_CASES)
def test_invalid_indices_raise_on_fake_cuda(fake: tuple[FakeTensorMode, torch.Tensor], index: Any) -> None:
    mode, t = fake
    expected = _raised(lambda: base()[index])
    with mode, CudaIndexingMode():
        got = _raised(lambda: t[index])
    assert type(got) is type(expected)
    assert "cuda" not in str(got)


def test_without_the_mode_indexing_a_fake_cuda_tensor_fails(
    fake: tuple[FakeTensorMode, torch.Tensor],
) -> None:
    # Why the mode exists: on a CPU-only build the getitem binding opens a CUDA device guard.
    # With a CUDA-enabled torch this may not raise, and then there is nothing to assert.
    mode, t = fake
    with mode:
        try:
            t[0]
        except RuntimeError as exc:
            assert "cuda" in str(exc).lower()


def test_other_devices_take_the_default_path() -> None:
    x = base()
    with CudaIndexingMode():
        y = x[:, [0, 2]]
        x[0] = 1.0
        z = x.t() if x.dim() == 2 else x.transpose(0, 1).contiguous()
    assert y.shape == (2, 2, 4, 5)
    assert bool((x[0] == 1.0).all())
    assert z.is_contiguous()


def test_contiguous(fake: tuple[FakeTensorMode, torch.Tensor]) -> None:
    mode, t = fake
    with mode, CudaIndexingMode():
        assert t.contiguous() is t
        transposed = t.transpose(0, 1)
        out = transposed.contiguous()
        channels_last = t.contiguous(memory_format=torch.channels_last)
        with pytest.raises(RuntimeError, match="preserve"):
            t.contiguous(memory_format=torch.preserve_format)
    assert out.shape == (3, 2, 4, 5)
    assert out.is_contiguous()
    assert out.device == CUDA0
    assert channels_last.is_contiguous(memory_format=torch.channels_last)
    assert channels_last.device == CUDA0


def test_cuda_and_to_without_device_index(fake: tuple[FakeTensorMode, torch.Tensor]) -> None:
    mode, t = fake
    with mode:
        cpu = torch.empty(2, 3)
        other = torch.empty(1, device="cuda:0", dtype=torch.float16)
    with mode, CudaIndexingMode():
        assert t.cuda() is t
        assert t.cuda(0) is t
        assert t.to("cuda") is t
        assert t.to(torch.device("cuda")) is t
        assert t.to(device="cuda") is t
        half = t.to("cuda", torch.float16)
        like_other = t.to(other)
        moved = cpu.cuda()
        moved_to = cpu.to("cuda")
        back = t.to("cpu")
        with pytest.raises(RuntimeError, match="cuda device"):
            t.cuda("cpu")
    assert (half.dtype, half.device) == (torch.float16, CUDA0)
    assert (like_other.dtype, like_other.device) == (torch.float16, CUDA0)
    assert moved.device == CUDA0
    assert moved_to.device == CUDA0
    assert back.device == torch.device("cpu")


def _targets(gm: torch.fx.GraphModule) -> dict[Any, list[torch.fx.Node]]:
    found: dict[Any, list[torch.fx.Node]] = {}
    for node in gm.graph.nodes:
        if node.op == "call_function":
            found.setdefault(node.target, []).append(node)
    return found


def _shapes(nodes: list[torch.fx.Node]) -> list[tuple[int, ...]]:
    return [tuple(node.meta["val"].shape) for node in nodes]


def test_getitem_inside_make_fx(fake: tuple[FakeTensorMode, torch.Tensor]) -> None:
    _, t = fake

    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x[0], x[:, 1:3], x[:, [0, 2]], x[[0, 1], :, [1, 2]]

    with CudaIndexingMode():
        gm = make_fx(f, tracing_mode="fake")(t)
    found = _targets(gm)
    assert _shapes(found[aten.select.int]) == [(3, 4, 5)]
    # Like PyTorch, a bare ``:`` in a tuple still records a (no-op) slice.
    assert (2, 2, 4, 5) in _shapes(found[aten.slice.Tensor])
    assert sorted(_shapes(found[aten.index.Tensor])) == [(2, 2, 4, 5), (2, 3, 5)]
    for node in found[aten.index.Tensor]:
        assert node.meta["val"].device == CUDA0


def test_setitem_inside_make_fx(fake: tuple[FakeTensorMode, torch.Tensor]) -> None:
    _, t = fake

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[0] = 1.0
        y[:, [0, 2]] = 0.0
        y[1, :, 0] = x[0, :, 1]
        return y

    with CudaIndexingMode():
        gm = make_fx(f, tracing_mode="fake")(t)
    found = _targets(gm)
    assert _shapes(found[aten.fill_.Tensor]) == [(3, 4, 5)]
    assert _shapes(found[aten.index_put_.default]) == [SHAPE]
    assert _shapes(found[aten.copy_.default]) == [(3, 5)]


def test_data_dependent_0d_index_inside_make_fx(fake: tuple[FakeTensorMode, torch.Tensor]) -> None:
    mode, t = fake
    with mode:
        i = torch.empty((), dtype=torch.long, device="cuda:0")

    # PyTorch itself would call item() here; a lone 0-dim index keeps the same shape.
    with CudaIndexingMode():
        gm = make_fx(lambda x, i: x[:, i], tracing_mode="fake")(t, i)
    assert _shapes(_targets(gm)[aten.index.Tensor]) == [(2, 4, 5)]
