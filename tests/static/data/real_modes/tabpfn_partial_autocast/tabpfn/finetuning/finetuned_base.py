# Source: tabpfn 9.2.0 (PyPI sdist), src/tabpfn/finetuning/finetuned_base.py, lines 40, 987-988 and
# 1185-1192 (the fitting loop cut to its autocast region; the loss call names the criterion).
import torch

from tabpfn.architectures.shared.bar_distribution import BarDistribution
from tabpfn.finetuning._torch_compat import GradScaler, autocast


class FinetunedTabPFNBase:
    def fit(self, batches, borders):
        criterion = BarDistribution(borders)
        use_amp = self.device.startswith("cuda") and torch.cuda.is_available()
        scaler = GradScaler() if use_amp else None  # type: ignore
        for logits, ys in batches:
            use_scaler = use_amp and scaler is not None

            with autocast(enabled=use_scaler):  # type: ignore
                loss = criterion(logits, ys)
            scaler.scale(loss).backward()
