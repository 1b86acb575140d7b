# ruff: noqa
# fmt: off
# Source: espnet 202511 (PyPI), espnet2/sds/llm/hugging_face_llm.py, lines 1-19 and 39-55
# (the docstring and the import error message shortened).
# Class (i): the dtype reaches `from_pretrained` through a variable, a parameter whose default is
# the string "float16", while the default checkpoint (Llama 3.2) was trained in bfloat16.
from typing import List

import torch
from typeguard import typechecked

from espnet2.sds.llm.abs_llm import AbsLLM


class HuggingFaceLLM(AbsLLM):
    """Hugging Face LLM"""

    @typechecked
    def __init__(
        self,
        access_token: str,
        tag: str = "meta-llama/Llama-3.2-1B-Instruct",
        device: str = "cuda",
        dtype: str = "float16",
    ):
        """A class for initializing a text response generator using the Transformers library."""
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
        except Exception as e:
            print("`transformers` is not available.")
            raise e
        super().__init__()
        LM_tokenizer = AutoTokenizer.from_pretrained(tag, token=access_token)
        LM_model = AutoModelForCausalLM.from_pretrained(
            tag, torch_dtype=dtype, trust_remote_code=True, token=access_token  # expect: AMP010
        ).to(device)
        self.LM_pipe = pipeline(
            "text-generation", model=LM_model, tokenizer=LM_tokenizer, device=device
        )
