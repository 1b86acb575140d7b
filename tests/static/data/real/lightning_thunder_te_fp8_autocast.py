# ruff: noqa
# fmt: off
# Source: lightning-thunder 0.2.6 (PyPI sdist), thunder/tests/test_transformer_engine_executor.py,
# lines 1, 4, 23, 574 and 586-627 (verbatim; the skips, the state reset and the checks after the
# training loop left out).
# False positive (issue 29, review 4): `te.fp8_autocast` is TransformerEngine's FP8 context with its
# own delayed scaling, not torch's float16 autocast: the bf16 TE modules need no loss scaler. The
# variant after it autocasts to float16 with torch, and is flagged.
from functools import partial

import torch

import transformer_engine.pytorch as te


def test_te_activation_checkpointing_correctness(fp8_recipe, compile_path: str):
    dtype = torch.bfloat16

    device = "cuda"
    iterations = 6

    checkpoint_fn = partial(torch.utils.checkpoint.checkpoint, use_reentrant=False)

    input_shape = (768, 4096)
    te_linear1 = te.Linear(4096, 4096, params_dtype=dtype)
    te_linear2 = te.Linear(4096, 2048, params_dtype=dtype)

    def clone_params(*params):
        return tuple(param.detach().clone() for param in params)

    w1, w2, b1, b2 = clone_params(te_linear1.weight, te_linear2.weight, te_linear1.bias, te_linear2.bias)

    target_value = torch.randint(42, (768,), dtype=torch.int64, device=device)
    inputs = tuple(torch.rand(*input_shape, device=device, dtype=dtype, requires_grad=True) for _ in range(iterations))

    def train_model(model, optimizer, loss_hist):
        for iter_n in range(iterations):
            x = inputs[iter_n]
            with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
                result = model(x)
            loss = torch.nn.functional.cross_entropy(result, target_value)
            loss_hist.append(loss.item())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()


# Variant (not in the source): the same loop under torch's float16 autocast.
def train_model_fp16(model, optimizer, inputs, target_value):
    for x in inputs:
        with torch.autocast("cuda", dtype=torch.float16):
            result = model(x)
        loss = torch.nn.functional.cross_entropy(result, target_value)
        loss.backward()  # expect: AMP009
        optimizer.step()
        optimizer.zero_grad()
