"""
AxiomLM Pretraining Engine with Muon Optimizer & Distributed Data Parallel.
"""
from contextlib import nullcontext
import time

import torch

from .models.transformer import Transformer
from .engine.inference import generate_with_cache


def train(config, enc, val_loader, train_loader, device: str, max_steps: int, start_step: int = 0,
          eval_interval: int = 50, sample_interval: int = 50, sample_prompt: str = "import torch\n",
          grad_accum_steps: int = 1, master_process: bool = True):
    model = Transformer(config).to(device)
    autocast_ctx = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if device.startswith("cuda") else nullcontext()

    try:
        for step in range(start_step, max_steps):
            t0 = time.time()
            last_step = (step == max_steps - 1)

            # 1. Validation Evaluation
            if (eval_interval > 0 and step % eval_interval == 0) or last_step:
                model.eval()
                val_loader.reset()
                with torch.no_grad():
                    val_loss_tensor = torch.zeros(1, device=device)
                    val_loss_steps = 20
                    for _ in range(val_loss_steps):
                        x_val, y_val = val_loader.next_batch()
                        x_val, y_val = x_val.to(device), y_val.to(device)
                        with autocast_ctx:
                            _, loss_val = model(x_val, y_val)
                        val_loss_tensor += loss_val / val_loss_steps

                    if ddp:
                        dist.all_reduce(val_loss_tensor, op=dist.ReduceOp.AVG)
                    val_loss = val_loss_tensor.item()
                    if master_process:
                        print(f"\n[Val Eval @ Step {step:4d}] validation loss: {val_loss:.4f}", flush=True)

            # 2. Live Validation Token Sampling
            if master_process and ((sample_interval > 0 and step % sample_interval == 0) or last_step):
                raw_model = get_raw_model(model)
                samples = generate_with_cache(raw_model, enc, device, prompt=sample_prompt, num_samples=2, max_length=45)

            # 3. Forward / Backward with Micro-Batching
            model.train()
            for opt in optimizers:
                opt.zero_grad()
            loss_accum_tensor = torch.zeros(1, device=device)

            for micro_step in range(grad_accum_steps):
                x, y = train_loader.next_batch()
                x, y = x.to(device), y.to(device)
                with autocast_ctx:
                    logits, loss = model(x, y)
                loss = loss / grad_accum_steps
    finally:
        pass
