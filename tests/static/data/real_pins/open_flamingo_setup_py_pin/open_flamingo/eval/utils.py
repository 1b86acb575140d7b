# Source: open-flamingo 2.0.1 (PyPI sdist), open_flamingo/eval/utils.py, lines 2, 5 and 117-124
# (verbatim). setup.py pins torch==2.0.1, where torch.cuda.amp.autocast is not deprecated and no
# supported install warns (issue 29, review 4): AMP008 says nothing.
from contextlib import suppress

import torch


def get_autocast(precision):
    if precision == "amp":
        return torch.cuda.amp.autocast
    elif precision == "amp_bfloat16" or precision == "amp_bf16":
        # amp_bfloat16 is more stable than amp float16 for clip training
        return lambda: torch.cuda.amp.autocast(dtype=torch.bfloat16)
    else:
        return suppress
