# ruff: noqa
# fmt: off
# Source: github.com/yaseminbicer/AI-Agentic-Content-Generation, shared_llm.py
# @ 93b57bc2087030644fc9ec386333912427eb3c7a, lines 1-11 (the whole file, verbatim).
# Class (i): a bfloat16-trained causal LM (Qwen1.5) loaded with a dtype chosen by CUDA
# availability: every GPU run loads it in float16.
from transformers import AutoTokenizer, AutoModelForCausalLM
import torch

model_name = "Qwen/Qwen1.5-0.5B-Chat"

tokenizer = AutoTokenizer.from_pretrained(model_name, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(
    model_name,
    device_map="auto",
    torch_dtype=torch.float16 if torch.cuda.is_available() else torch.float32,  # expect: AMP010
    trust_remote_code=True
).eval()
