import torch
from typing import List, Optional, Dict, Any
from dataclasses import dataclass

from rwkvserve.inference.scheduler_core import (
    SequenceState, 
    SeqStatus,
    create_scheduler_core,
)


class BatchGenerator:
    """Batch inference engine - synchronous wrapper around SchedulerCore."""

    def generate(
        self,
        prompts: Optional[List[str]] = None,
        generation_config: GenerationConfig = None,
        input_ids: Optional[List[List[int]]] = None,
    ) -> Dict[str, Any]:
        if self._scheduler is None or \
           self._scheduler.max_batch_size < total or \
           self._scheduler.max_batch_tokens != generation_config.max_batch_tokens or \
           self._scheduler.prefill_chunk_size != generation_config.chunk_size:
            self._scheduler = create_scheduler_core(
                model=self.model,
                tokenizer=self.tokenizer,
                max_batch_size=max_batch_size,
                max_batch_tokens=generation_config.max_batch_tokens,
                prefill_chunk_size=generation_config.chunk_size,
                state_cache=self.state_cache,
            )
        else:
            self._scheduler.reset()
        
        scheduler = self._scheduler
        for updates in scheduler.run_to_completion_sync():
            for seq_id, token_id in updates:
                all_tokens[seq_id].append(token_id)
