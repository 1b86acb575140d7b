"""The CUDA emulation against a real GPU: dtypes per line and the attention kernel chosen.

`run` needs a CUDA GPU. For each model type of a sample across families it builds the default
config (every stack shrunk to 2 layers) on the GPU, runs it under real `torch.autocast("cuda")` in
bf16 and fp16 with eager and SDPA attention, traces the same model as a CPU-only build does (fake
`cuda:0` tensors, emulating this GPU), and compares the dtype of every op line by line
(`amplint.runtime.parity`). Then it compares the SDPA kernel the emulation picks with the one
`torch._fused_sdp_choice` picks over a grid of head sizes, dtypes, masks and shapes.

    python benchmarks/cuda_parity.py run --out cuda_parity.json      # on a machine with a GPU
    python benchmarks/cuda_parity.py report cuda_parity.json > docs/cuda-parity.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any
from unittest import mock

RESULTS = Path(__file__).resolve().parent / "cuda_parity.json"
TYPES = [
    "llama", "qwen2", "qwen3", "mistral", "mixtral", "qwen3_moe", "deepseek_v3", "gemma", "gemma2",
    "gemma3_text", "phi3", "olmo2", "granite", "cohere", "starcoder2", "gpt2", "gpt_neox", "opt",
    "falcon", "bloom", "bert", "roberta", "t5", "bart", "whisper", "vit", "clip", "mamba",
]  # fmt: skip
DTYPES = ["bfloat16", "float16"]
ATTENTION = ["eager", "sdpa"]
# Library paths shown relative to their package root, so the table names no machine's folders.
_SITE = re.compile(r"^.*?/(site-packages|dist-packages)/")


def _where(line: tuple[str, int]) -> str:
    return f"{_SITE.sub('', line[0])}:{line[1]}"


def _this_gpu() -> str:
    import torch

    from amplint.runtime.gpu import GPUS

    capability = torch.cuda.get_device_capability()
    return next((key for key, gpu in GPUS.items() if gpu.capability == capability), "a100")


def _model_rows(types: list[str], scratch: Path, device: str) -> list[dict[str, Any]]:
    import torch
    import transformers

    from amplint.runtime import trace
    from amplint.runtime.hf import model_class
    from amplint.runtime.hf_config import read_config
    from amplint.runtime.hf_inputs import inputs
    from amplint.runtime.parity import compare, real_run

    transformers.logging.set_verbosity_error()
    gpu = _this_gpu() if device == "cuda" else "a100"
    rows = []
    for model_type, attention in itertools.product(types, ATTENTION):
        path = scratch / f"{model_type}.json"
        path.write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
        try:
            config = read_config(str(path), layers=2)
            _, cls = model_class(config)
            torch.manual_seed(0)
            with torch.device(device):
                model = cls._from_config(config, attn_implementation=attention).eval()
            kwargs = inputs(model, seq_len=64, batch_size=1)
        except Exception as exc:  # a type this transformers cannot build is a row, not a stop
            rows.append(
                {"type": model_type, "attention": attention, "result": "not built", "reason": str(exc)[:200]}
            )
            continue
        kwargs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        if "use_cache" in kwargs or hasattr(config, "use_cache"):
            kwargs["use_cache"] = False
        for dtype_name in DTYPES:
            dtype = getattr(torch, dtype_name)
            row: dict[str, Any] = {
                "type": model_type,
                "head": cls.__name__,
                "attention": attention,
                "dtype": dtype_name,
            }
            start = time.perf_counter()
            try:
                real = real_run(model, (), kwargs, dtype, device)
                with mock.patch.object(torch.cuda, "is_available", lambda: False):  # as a CPU-only build
                    graph = trace(model, (), kwargs, device=device, dtype=dtype, gpu=gpu)
                parity = compare(graph, real)
                row.update(
                    result="differs" if parity.mismatched else "one-sided" if parity.one_sided else "same",
                    lines=parity.lines,
                    ops=parity.ops,
                    mismatched={_where(k): v for k, v in list(parity.mismatched.items())[:5]},
                    mismatched_lines=len(parity.mismatched),
                    one_sided={_where(k): v for k, v in list(parity.one_sided.items())[:5]},
                    one_sided_lines=len(parity.one_sided),
                )
            except Exception as exc:
                row.update(result="error", reason=_SITE.sub("", f"{type(exc).__name__}: {exc}")[:300])
                row["where"] = _SITE.sub("", traceback.format_exc()[-600:])
            row["seconds"] = round(time.perf_counter() - start, 2)
            rows.append(row)
            print(
                json.dumps({k: row.get(k) for k in ("type", "attention", "dtype", "result")}), file=sys.stderr
            )
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def _attention_rows() -> list[dict[str, Any]]:
    import torch
    from torch.nn.attention import SDPBackend

    from amplint.runtime.cuda_attention import KERNEL_NAMES, sdpa_backend
    from amplint.runtime.gpu import GPUS

    gpu = GPUS[_this_gpu()]
    rows = []
    shapes = [(64, 64, 8, 8), (1, 64, 8, 8), (128, 128, 8, 2)]  # (query len, key len, q heads, kv heads)
    for head, dtype_name, causal, mask_kind, (lq, lk, hq, hk) in itertools.product(
        [32, 64, 80, 96, 128, 160, 192, 256, 320], ["bfloat16", "float16", "float32"],
        [False, True], ["none", "bool", "float"], shapes,
    ):  # fmt: skip
        if causal and mask_kind != "none":
            continue  # torch refuses a mask together with is_causal
        dtype = getattr(torch, dtype_name)
        gqa = hq != hk
        q = torch.randn(2, hq, lq, head, device="cuda", dtype=dtype)
        k = torch.randn(2, hk, lk, head, device="cuda", dtype=dtype)
        mask = None
        if mask_kind == "bool":
            mask = torch.ones(lq, lk, device="cuda", dtype=torch.bool)
        elif mask_kind == "float":
            mask = torch.zeros(lq, lk, device="cuda", dtype=dtype)
        real = SDPBackend(torch._fused_sdp_choice(q, k, k, mask, 0.0, causal, enable_gqa=gqa))
        ours = sdpa_backend(q, k, k, mask, is_causal=causal, enable_gqa=gqa, gpu=gpu)
        rows.append(
            {
                "head": head, "dtype": dtype_name, "causal": causal, "mask": mask_kind,
                "shape": f"q{lq} k{lk} h{hq}/{hk}", "real": KERNEL_NAMES.get(real, str(real)),
                "emulated": KERNEL_NAMES.get(ours, str(ours)),
            }
        )  # fmt: skip
    return rows


def run(types: list[str], out: Path, device: str) -> None:
    """`device` cpu compares CPU autocast with its trace instead (a dry run of this script
    anywhere); the SDPA grid needs the GPU."""
    import torch
    import transformers

    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("cuda_parity.py run needs a CUDA GPU (or --device cpu)")
    cuda = device == "cuda"
    result = {
        "device": torch.cuda.get_device_name() if cuda else "CPU",
        "capability": list(torch.cuda.get_device_capability()) if cuda else [0, 0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "attention": _attention_rows() if cuda else [],
        "models": [],
    }
    with tempfile.TemporaryDirectory(prefix="cuda-parity-") as scratch:
        for model_type in types:  # written after each type: a run stopped early keeps what it measured
            result["models"] += _model_rows([model_type], Path(scratch), device)
            out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


def _same_dtypes(row: dict[str, Any]) -> bool:
    """Whether every line that differs runs other ops in the same dtypes (a matmul decomposed
    into `mm` by one side and `bmm` by the other): all of them must be in the row to tell."""
    if row["mismatched_lines"] != len(row["mismatched"]):
        return False
    return all({d for _, d in traced} == {d for _, d in real} for traced, real in row["mismatched"].values())


def _one_sided_note(models: list[dict[str, Any]]) -> list[str]:
    """Why rows are `one-sided`, where the data shows the known cause: every such row is an SDPA
    run whose one-sided lines are all in transformers' SDPA integration (keys and values expanded
    with `repeat_kv` on the traced side, the mask kept)."""
    one_sided = [row for row in models if row["result"] == "one-sided"]
    in_sdpa = [
        row
        for row in one_sided
        if row["attention"] == "sdpa"
        and row["one_sided_lines"] == len(row["one_sided"])
        and all(line.startswith("transformers/integrations/sdpa_attention.py:") for line in row["one_sided"])
    ]
    if not one_sided or len(in_sdpa) != len(one_sided):
        return []
    return [
        f"All {len(one_sided)} `one-sided` rows are SDPA runs whose one-sided lines are all in "
        "`transformers/integrations/sdpa_attention.py`: the real run sees no padding, so transformers "
        "drops the mask and lets the kernel group the heads (`enable_gqa`); the trace cannot see that "
        "the mask is all ones, keeps it, and expands keys and values with `repeat_kv` first.",
        "",
    ]


def report(path: Path) -> str:
    data = json.loads(path.read_text(encoding="utf-8"))
    models = [row for row in data["models"] if "dtype" in row]
    for row in models:
        if row["result"] == "differs" and _same_dtypes(row):
            row["result"] = "other ops, same dtypes"
    same = sum(row["result"] == "same" for row in models)
    one_sided = sum(row["result"] == "one-sided" for row in models)
    compared = [row for row in models if row["result"] != "error"]
    lines = sum(row["lines"] for row in compared)
    off = sum(row["mismatched_lines"] for row in compared if row["result"] == "differs")
    other_ops = sum(row["result"] == "other ops, same dtypes" for row in models)
    attention = data["attention"]
    agree = sum(row["real"] == row["emulated"] for row in attention)
    out = [
        "# The CUDA emulation against a real GPU",
        "",
        f"Measured on one {data['device']} (compute capability {data['capability'][0]}.{data['capability'][1]}), "
        f"torch {data['torch']}, transformers {data['transformers']}: the versions of that run, not the "
        "ones CI pins (`.ci/run`); the rows below were not measured again on those. The attention "
        "kernel choice is replayed on CPU with the installed torch by `tests/runtime/test_cuda_parity.py`, "
        "which checks that the emulation still picks what the GPU picked for each recorded SDPA call. "
        "Each model is built from its default "
        'config with every stack shrunk to 2 layers, run under real `torch.autocast("cuda")` and traced '
        "as a CPU-only build traces it (fake `cuda:0` tensors, this GPU emulated); the dtype of every op "
        "is compared per line of source. Produced by:",
        "",
        "```",
        "python benchmarks/cuda_parity.py run --out benchmarks/cuda_parity.json   # needs a GPU",
        "python benchmarks/cuda_parity.py report benchmarks/cuda_parity.json > docs/cuda-parity.md",
        "```",
        "",
        f"**{same} of {len(models)} model runs give every op the dtype the GPU gives it**; "
        f"{off} of {lines} source lines give an op another dtype over all runs. In {one_sided} more, every "
        "line both ran agrees, and some floating-point ops ran on one side only (`one-sided`): a path "
        "the model chooses on tensor values, which the trace cannot see. In "
        f"{other_ops} the two sides decompose an op differently (`other ops, same dtypes`).",
        f"**The emulated attention kernel is the GPU's in {agree} of {len(attention)} SDPA calls.**",
        "",
        *_one_sided_note(models),
        "| model type | head | attention | dtype | result | lines | ops | lines that differ or ran on one side | first (traced, real; or the one side's ops) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in data["models"]:
        if "dtype" not in row:
            out.append(
                f"| {row['type']} |  | {row['attention']} |  | {row['result']} |  |  |  | {row['reason'][:120]} |"
            )
            continue
        if row["result"] == "error":
            out.append(
                f"| {row['type']} | {row['head']} | {row['attention']} | {row['dtype']} | error |  |  |  | {row['reason'][:160]} |"
            )
            continue
        first = next(iter({**row["mismatched"], **row["one_sided"]}.items()), None)
        shown = f"`{first[0]}`: {json.dumps(first[1])[:160]}" if first else ""
        out.append(
            f"| {row['type']} | {row['head']} | {row['attention']} | {row['dtype']} | {row['result']} | "
            f"{row['lines']} | {row['ops']} | {row['mismatched_lines'] + row['one_sided_lines']} | {shown} |"
        )
    differing = [row for row in attention if row["real"] != row["emulated"]]
    out += ["", "## SDPA calls where the emulated kernel differs", ""]
    if not differing:
        out.append("None.")
    else:
        out += [
            "| head size | dtype | causal | mask | shape | real | emulated |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in differing:
            out.append(
                f"| {row['head']} | {row['dtype']} | {row['causal']} | {row['mask']} | {row['shape']} | "
                f"{row['real']} | {row['emulated']} |"
            )
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run")
    run_parser.add_argument("--out", type=Path, default=RESULTS)
    run_parser.add_argument("--types", default=",".join(TYPES))
    run_parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    report_parser = sub.add_parser("report")
    report_parser.add_argument("path", type=Path, nargs="?", default=RESULTS)
    args = parser.parse_args()
    if args.command == "run":
        run(args.types.split(","), args.out, args.device)
    else:
        sys.stdout.write(report(args.path))


if __name__ == "__main__":
    main()
