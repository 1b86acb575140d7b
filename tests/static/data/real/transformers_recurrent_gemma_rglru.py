# ruff: noqa
# fmt: off
# Source: transformers 4.46.3 (PyPI), transformers/models/recurrent_gemma/modeling_recurrent_gemma.py,
# lines 21-23, 286 and 306-348 (trimmed: __init__ and a comment are left out; kept lines verbatim).
# Class (c): two sigmoid gates side by side. `recurrent_gate` becomes the log-decay
# `log_recurrent_gate` and is exponentiated (a real AMP001 finding); `input_gate` is only
# multiplied into the activations (`activations * input_gate`) and must not be flagged.
import torch
import torch.utils.checkpoint
from torch import nn


class RecurrentGemmaRglru(nn.Module):
    def forward(
        self,
        activations: torch.Tensor,
        position_ids: torch.Tensor,
    ):
        batch_size, seq_len, lru_width = activations.shape
        reset = position_ids[:, :, None] == 0

        reshape_act = activations.reshape(batch_size * seq_len, self.num_attention_heads, self.block_width)
        reshape_act = reshape_act.permute(1, 0, 2)

        res = torch.baddbmm(self.input_gate_bias[:, None, :], reshape_act, self.input_gate_weight)
        input_gate = torch.sigmoid(res.transpose(0, 1).reshape(batch_size, seq_len, lru_width))

        res = torch.baddbmm(self.recurrent_gate_bias[:, None, :], reshape_act, self.recurrent_gate_weight)
        recurrent_gate = torch.sigmoid(res.transpose(0, 1).reshape(batch_size, seq_len, lru_width))  # expect: AMP001

        # Compute the parameter `A` of the recurrence.
        log_recurrent_gate = -8.0 * recurrent_gate * nn.functional.softplus(self.recurrent_param)
        recurrent_gate = torch.exp(log_recurrent_gate)
        a_square = torch.exp(2 * log_recurrent_gate)

        # Gate the input.
        gated_inputs = activations * input_gate

        multiplier = 1
        tracing = isinstance(activations, torch.fx.Proxy) or is_torchdynamo_compiling()
        if not torch.jit.is_tracing() and not tracing:
            multiplier = SqrtBoundDerivative.apply(1 - a_square)
        multiplier = reset + ~reset * multiplier
        normalized_x = gated_inputs * multiplier.type(activations.dtype)

        hidden_states, recurrent_states = self._rnn_scan(
            hidden_states=normalized_x,
            recurrent_gate=recurrent_gate,
            reset=reset,
            recurrent_states=self.recurrent_states,
        )
        self.recurrent_states = recurrent_states
        return hidden_states
