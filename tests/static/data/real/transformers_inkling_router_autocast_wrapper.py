# ruff: noqa
# fmt: off
# Source: transformers 5.24.0 (PyPI), transformers/models/inkling/modular_inkling.py, lines 19-21,
# 44 and 510-548 (verbatim).
# False-positive cause: routing runs in float32 inside the project's own autocast wrapper
# (`maybe_autocast(..., enabled=False)`) on `.float()` inputs, so the sigmoid is not half.
# expect-none: AMP001,AMP007
import torch
import torch.nn as nn
import torch.nn.functional as F
from ...utils.generic import maybe_autocast, merge_with_config_defaults


class InklingTopkRouter(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_experts = config.n_routed_experts
        self.n_shared_experts = config.n_shared_experts
        self.n_total_experts = self.num_experts + self.n_shared_experts
        self.hidden_dim = config.hidden_size
        self.route_scale = config.route_scale
        self.top_k = config.num_experts_per_tok

        self.weight = nn.Parameter(torch.empty(self.n_total_experts, config.hidden_size))
        self.global_scale = nn.Parameter(torch.ones(1, dtype=torch.float32))
        self.e_score_correction_bias = nn.Buffer(torch.zeros(self.num_experts, dtype=torch.float32))

    def forward(self, hidden_states) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        flat = hidden_states.reshape(-1, self.hidden_dim)
        # Keep routing in FP32 even under autocast, so distinct scores do not round to ties before top-k.
        with maybe_autocast(device_type=hidden_states.device.type, enabled=False):
            router_logits = F.linear(flat.float(), self.weight.float())

            scores = router_logits.sigmoid()
            routed_scores = scores[..., : -self.n_shared_experts]
            scores_for_choice = routed_scores + self.e_score_correction_bias.float()
            topk_indices = torch.topk(scores_for_choice, self.top_k, dim=-1, sorted=False)[1]

            routed_logits = router_logits[..., : -self.n_shared_experts]
            shared_logits = router_logits[..., -self.n_shared_experts :]
            topk_logits = torch.cat([routed_logits.gather(-1, topk_indices), shared_logits], dim=-1)
            topk_log_probs = F.logsigmoid(topk_logits)
            topk_weights = torch.exp(topk_log_probs - torch.logsumexp(topk_log_probs, dim=-1, keepdim=True))

            topk_weights = topk_weights * self.route_scale * self.global_scale.float()

        topk_weights = topk_weights.to(hidden_states.dtype)
        shared_gammas = topk_weights[..., -self.n_shared_experts :].contiguous()
        topk_weights = topk_weights[..., : self.top_k].contiguous()

        return routed_logits, topk_weights, topk_indices, shared_gammas

