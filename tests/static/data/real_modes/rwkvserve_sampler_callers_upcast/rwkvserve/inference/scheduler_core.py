import torch
import collections
import os
import time
from typing import List, Tuple, Optional, Dict, Any, TYPE_CHECKING, Union, Iterator


class SchedulerCore:
    """Continuous batching scheduler."""

    def __init__(
        self,
        model,
        tokenizer,
        max_batch_size: int = 64,
        max_batch_tokens: int = 8192,
        prefill_chunk_size: int = 512,
        state_cache: Optional["StateCache"] = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device

        from rwkvserve.inference.core import TokenSampler
        self.sampler = TokenSampler

    def _execute_decode(self, decode_batch: List[SequenceState]) -> List[Tuple[int, int]]:
        """
        Execute decode step.

        Returns:
            new_tokens: [(seq_id, token_id), ...]
        """
        if not decode_batch:
            return []

        if DEBUG_MEMORY:
            log_memory(f"Before decode batch (batch={len(decode_batch)})")

        indices = [s.slot_id for s in decode_batch]
        att_x, att_kv, ffn_x = self._gather_states(indices)

        input_tensor = torch.tensor(
            [[s.last_token_id] for s in decode_batch],
            dtype=torch.long, device=self.device
        )

        final_x, new_states = self._model_forward_with_state(
            input_tensor, att_x, att_kv, ffn_x
        )
        self._scatter_states(indices, new_states)

        if DEBUG_MEMORY:
            log_memory(f"After decode forward (batch={len(decode_batch)})")

        logits = self.model.head(final_x[:, -1, :]).to(torch.float32)
        new_tokens = []

        for i, seq in enumerate(decode_batch):
            token_id, _ = self.sampler.sample(
                logits[i],
                temperature=seq.temperature,
                top_p=seq.top_p,
                top_k=seq.top_k,
                logit_bias=seq.logit_bias
            )

            seq.last_token_id = token_id
            seq.generated_tokens.append(token_id)
            new_tokens.append((seq.seq_id, token_id))

            if seq.is_finished:
                self._finish_sequence(seq)

        return new_tokens


    def step_sync(self) -> List[Tuple[int, int]]:
        """
        Execute one synchronous step.

        Returns:
            new_tokens: [(seq_id, token_id), ...]
        """
        max_attempts = 10

        for attempt in range(max_attempts):
            try:
                with torch.no_grad():
                    decode_batch, prefill_batch = self._schedule()

                    if not decode_batch and not prefill_batch:
                        if not self.has_pending_work():
                            return []
                        if attempt < 5:
                            time.sleep(0.01)
                            continue
                        else:
                            return []

                    new_tokens = []

                    if decode_batch:
                        decode_result = self._execute_decode(decode_batch)
                        new_tokens.extend(decode_result)

                    if prefill_batch:
                        new_tokens.extend(self._execute_prefill(prefill_batch))

                    if hasattr(self, '_step_counter'):
                        self._step_counter += 1
                    else:
                        self._step_counter = 1

                    if self._step_counter % 10 == 0:
                        import gc
                        gc.collect()
                        torch.cuda.empty_cache()

                    return new_tokens

            except RuntimeError as e:
                if "CUDA" in str(e) or "out of memory" in str(e):
                    print(f"[ERROR] step_sync attempt {attempt} failed with CUDA error: {e}")
                    import gc
                    gc.collect()
                    torch.cuda.empty_cache()
                    if attempt == max_attempts - 1:
                        raise
                    time.sleep(0.5)
                else:
                    raise

        return []

    def run_to_completion_sync(self) -> Iterator[List[Tuple[int, int]]]:
        """
        Run synchronously until all sequences complete.

        Yields:
            New tokens per step: [(seq_id, token_id), ...]
        """
        start_time = time.time()
        step_count = 0
        last_progress_step = 0
        total_generated_tokens = 0

        while self.has_pending_work():
            step_start = time.time()
            new_tokens = self.step_sync()
            yield new_tokens


def create_scheduler_core(
    model,
    tokenizer,
    max_batch_size: int = 64,
    max_batch_tokens: int = 8192,
    prefill_chunk_size: int = 512,
    state_cache: Optional["StateCache"] = None,
) -> SchedulerCore:
    """
    Create a SchedulerCore instance.

    Args:
        model: RWKV model
        tokenizer: Tokenizer
        max_batch_size: Maximum concurrent sequences
        max_batch_tokens: Maximum tokens per forward pass
        prefill_chunk_size: Chunked prefill chunk size
        state_cache: Optional State Cache instance
    """
    return SchedulerCore(
        model=model,
        tokenizer=tokenizer,
        max_batch_size=max_batch_size,
        max_batch_tokens=max_batch_tokens,
        prefill_chunk_size=prefill_chunk_size,
        state_cache=state_cache,
    )
