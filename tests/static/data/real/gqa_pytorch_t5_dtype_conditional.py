# ruff: noqa
# fmt: off
# Source: github.com/fkodom/grouped-query-attention-pytorch, scripts/benchmark_t5.py
# @ 65cf358fb8874578ee45505abac903f2fad70775, lines 1-16, 72-85 and 101-113 (trimmed: the
# benchmark texts, tokenisation and plotting are left out; kept lines verbatim).
# Class (i): the dtype comes from a conditional on CUDA availability (float16 on every GPU run),
# reaches `main` as a parameter default, and casts a T5 checkpoint (trained in bfloat16; the
# float16 T5 NaNs) with `.to(device=device, dtype=dtype)`.
import os
from typing import List, Sequence

import plotly.graph_objects as go
import torch
from torch import Tensor
from transformers import T5ForConditionalGeneration, T5Tokenizer

from grouped_query_attention_pytorch.t5 import convert_t5_to_gqa
from grouped_query_attention_pytorch.utils.benchmark import BenchmarkResult, benchmark

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DTYPE = torch.float16 if torch.cuda.is_available() else torch.float32

# Benchmarking parameters
MODEL_NAME = "t5-3b"


def main(
    model_name: str = MODEL_NAME,
    num_groups: Sequence[int] = NUM_GROUPS,
    total_tokens: int = TOTAL_TOKENS,
    model_max_length: int = MODEL_MAX_LENGTH,
    device: torch.device = DEVICE,
    dtype: torch.dtype = DTYPE,
    save_path: str = SAVE_PATH,
):
    print(f"Loading model and tokenizer for {model_name}...")
    t5: T5ForConditionalGeneration = T5ForConditionalGeneration.from_pretrained(  # expect: AMP010
        model_name
    ).to(device=device, dtype=dtype)
    tokenizer = T5Tokenizer.from_pretrained(model_name, legacy=False)

    mha_result = benchmark(forward_fn, t5, input_ids, labels)
    print(f"MHA: {mha_result}")
    del t5
    torch.cuda.empty_cache()

    grouped_times: List[BenchmarkResult] = []
    for g in num_groups:
        print("Reloading model and converting to GQA...")
        t5 = T5ForConditionalGeneration.from_pretrained(model_name).to(  # expect: AMP010
            device=device, dtype=dtype
        )
        gqa = convert_t5_to_gqa(t5, kv_heads=g, inplace=True)
