from abc import ABC, abstractmethod
from typing import Dict, List, Any, Tuple, Optional, Protocol, Union

import torch

from p3gpt.handlers.p3_multimodal import Precious3MPTForCausalLM


class BaseHandler(ABC):
    """Abstract base class for P3GPT handlers implementing common functionality"""
    DEFAULT_PATH = "insilicomedicine/precious3-gpt-multi-modal"

    def __init__(self, path: str = "", device: str = 'cuda:0'):
        self.device = device
        self.path = path or self.DEFAULT_PATH

        # Initialize components
        self.model = self._load_model()

    @abstractmethod
    def _load_model(self):
        """Load and return the model implementation"""
        pass


class EndpointHandler(BaseHandler):
    """Standard endpoint handler implementation"""

    def _load_model(self):
        return Precious3MPTForCausalLM.from_pretrained(
            self.path,
            torch_dtype=torch.bfloat16,
            modality4_dim=None
        ).to(self.device)

    def _apply_sampling(self, logits: torch.Tensor, top_p: float, top_k: int) -> torch.Tensor:
        """Apply nucleus (top-p) and top-k sampling to logits."""
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        cumulative_probs = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
        sorted_indices_to_remove = cumulative_probs > top_p

        if top_k > 0:
            sorted_indices_to_remove[..., top_k:] = 1

        inf_tensor = torch.tensor(float("-inf")).type(torch.bfloat16).to(logits.device)
        return logits.where(sorted_indices_to_remove, inf_tensor)


class SMILESHandler(BaseHandler):
    """Handler for SMILES-specific P3GPT processing with enhanced modality support."""
    DEFAULT_PATH = "insilicomedicine/p3gpt-smiles"

    def _load_model(self):
        """Load P3GPT model with SMILES support."""
        return Precious3MPTForCausalLM.from_pretrained(
            self.path or self.DEFAULT_PATH,
            torch_dtype=torch.bfloat16,
            modality4_dim=None  # Updated to support SMILES modality
        ).to(self.device)

    def custom_generate(self, input_ids, outputs, temperature: float = 0.8, top_p: float = 0.2, top_k: int = 3550):
        current_token = input_ids.clone()
        next_token = current_token[0][-1]

        # Forward pass through the model
        logits = self.model.forward(outputs, input_ids=current_token)[0]

        # Apply temperature scaling
        if temperature != 1.0:
            logits = logits / temperature

        # Apply sampling methods
        logits = self._apply_sampling(logits, top_p, top_k)

        # Sample next token
        next_token = torch.multinomial(torch.softmax(logits, dim=-1)[0], num_samples=1)[-1, :].unsqueeze(0)
        current_token = torch.cat((current_token, next_token), dim=-1)
        return current_token

    def _apply_sampling(self, logits: torch.Tensor, top_p: float, top_k: int) -> torch.Tensor:
        """Apply nucleus (top-p) and top-k sampling to logits."""
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        cumulative_probs = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
        sorted_indices_to_remove = cumulative_probs > top_p

        if top_k > 0:
            sorted_indices_to_remove[..., top_k:] = 1

        inf_tensor = torch.tensor(float("-inf")).type(torch.bfloat16).to(logits.device)
        return logits.where(sorted_indices_to_remove, inf_tensor)
