# Source: tabpfn 9.2.0 (PyPI sdist), src/tabpfn/finetuning/_torch_compat.py, lines 12-26 (verbatim).
from functools import partial

import torch

# Handle torch.amp deprecation (torch.cuda.amp deprecated in PyTorch 2.4+).
try:
    from torch.amp import (
        GradScaler as _amp_GradScaler,
        autocast as _amp_autocast,
    )

    autocast = partial(_amp_autocast, device_type="cuda")
    GradScaler = partial(_amp_GradScaler, "cuda")
except ImportError:
    from torch.cuda.amp import GradScaler, autocast
