import os
import torch
import numpy as np
from typing import List, Optional, Dict, Any, Union


class InferencePipeline:
    """RWKV7 inference pipeline"""
    
    def __init__(
        self,
        model_path: Optional[str] = None,
        model_config: Optional[str] = None,
        device: str = "cuda",
        precision: str = "bf16",
        vocab_path: Optional[str] = None,
        debug_output: bool = False,
    ):
        self.model = RWKV7Model(config)
        self.model.load_state_dict(checkpoint, strict=False)
        self.model.to(self.device)
        
        if device == "cuda":
            if precision == "fp16":
                self.model.half()
            elif precision == "bf16":
                self.model.to(torch.bfloat16)
            else:
                self.model.float()
        else:
            self.model.float()
        
        self.model.eval()
        print(f"Model loaded: {n_layer} layers, {n_embd} dims, {vocab_size} vocab size")
        
        from rwkvserve.inference.batch_generator import BatchGenerator
        self.batch_generator = BatchGenerator(
            model=self.model,
            tokenizer=self.tokenizer,
            config=None,
            use_state_cache=True,
            batch_strategy="auto"
        )

    def generate(
        self,
        prompt: Union[str, List[str]],
        max_tokens: int = 100,
        temperature: float = 1.0,
        top_p: float = 0.9,
        top_k: int = 0,
        num_generations: int = 1,
        stream: bool = False,
    ) -> Union[str, List[str]]:
        results = self.batch_generator.generate(
            prompts=prompts,
            generation_config=gen_config
        )
        return results
