"""How much a half-precision scan loses, and how much accumulating in float32 and rounding the
result back at once recovers: the measurement behind AMP007's unsafe fix (docs/rules/AMP007.md).

CPU kernels keep the running value of `cumsum`, `cumprod` and `logcumsumexp` in float32 for half
inputs, so the two agree there; CUDA's keep it in the half dtype.

    python benchmarks/gpu_scans.py        # CPU, and CUDA where a GPU is present
"""

from __future__ import annotations

import torch

LENGTH = 4096


def main() -> None:
    torch.manual_seed(0)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print("| device | dtype | op | largest error, half scan | float32 scan rounded back |")
    print("|---|---|---|---|---|")
    for device in devices:
        for dtype in (torch.bfloat16, torch.float16):
            # Log-decays (small negative terms) for the sums, gates near 1 for the product.
            decays = (-(torch.rand(4, LENGTH, dtype=torch.float64) * 0.02 + 0.001)).to(dtype).to(device)
            gates = torch.sigmoid(torch.randn(4, LENGTH, dtype=torch.float64) + 6).to(dtype).to(device)
            runs = {
                "cumsum": (decays, lambda x: torch.cumsum(x, -1), lambda x: torch.cumsum(x, -1, dtype=torch.float32)),
                "logcumsumexp": (decays, lambda x: torch.logcumsumexp(x, -1), lambda x: torch.logcumsumexp(x.float(), -1)),
                "cumprod": (gates, lambda x: torch.cumprod(x, -1), lambda x: torch.cumprod(x, -1, dtype=torch.float32)),
            }  # fmt: skip
            for name, (x, half, wide) in runs.items():
                reference = half(x.double())
                lost = (half(x).double() - reference).abs().max().item()
                kept = (wide(x).to(dtype).double() - reference).abs().max().item()
                print(
                    f"| {device} | {str(dtype).removeprefix('torch.')} | {name} | {lost:.3g} | {kept:.3g} |"
                )


if __name__ == "__main__":
    main()
