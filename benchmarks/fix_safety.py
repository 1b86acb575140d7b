"""Does `amplint check --fix` leave real code working? Applied to an installed package (transformers'
`models/`, diffusers, flash-linear-attention's `fla`), then every changed module is imported and,
for transformers, every changed model runs a forward pass.

    python benchmarks/fix_safety.py [--package transformers|diffusers|fla] [--unsafe-fixes]
                                    [--all-rules] [--output FILE]

The installed package is copied to a temporary directory twice (as it is, and to be fixed);
`amplint check --fix` (with `--unsafe-fixes`, and every opt-in rule with `--all-rules`) runs on the
copy (transformers: its `models/`). Then, each in a fresh process with the copy first on `sys.path`:

- every changed module is imported (one that does not import unfixed either, for want of an
  optional dependency, is left out);
- every changed `modeling_*.py` whose model type the auto classes know is built from a tiny config
  (2 layers, hidden size 64, 4 heads, vocabulary 256, 32-pixel images) with random weights, as its
  causal LM (`AutoModelForCausalLM`) or else its base model (`AutoModel`), and runs a forward pass
  on token ids or pixels, on CPU in bfloat16 and in float16 (no autocast), in the original copy and
  in the fixed one; a model counts as broken when the original runs and the fixed one raises, or
  when the fixed output (logits, else the first output) has another dtype or shape, or is not
  finite where the original's is. A model that runs in neither dtype from the tiny config is built
  as `amplint trace --hf-config` builds it instead: its default config with 2 layers per stack,
  the class its `architectures` or model type names, inputs shaped by its main input, no cache.

The table goes to stdout, and with `--output` into a Markdown file with the command that made it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from importlib.util import find_spec
from pathlib import Path

OPT_IN = "AMP001,AMP002,AMP003,AMP004,AMP005,AMP006,AMP013,AMP014"
CHECKED = {"transformers": "models"}  # the folder of the package amplint fixes (default: all of it)
TIMEOUT = 300

# Run in a child process: build a tiny model of one model type and report its first output per dtype.
_FORWARD = r"""
import json, sys, torch, transformers
model_type = sys.argv[1]
out = {}
try:
    config = transformers.AutoConfig.for_model(model_type)
    tiny = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "intermediate_size": 128, "vocab_size": 256, "head_dim": 16, "max_position_embeddings": 128,
            "pad_token_id": 0, "is_decoder": True, "image_size": 32, "patch_size": 8,
            "num_encoder_layers": 2, "num_decoder_layers": 2, "encoder_layers": 2, "decoder_layers": 2,
            "d_model": 64, "encoder_attention_heads": 4, "decoder_attention_heads": 4}
    for key, value in tiny.items():
        if hasattr(config, key):
            setattr(config, key, value)
    torch.manual_seed(0)
    causal = model_type in transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    auto = transformers.AutoModelForCausalLM if causal else transformers.AutoModel
    model = auto.from_config(config).eval()
    name = model.main_input_name
    if name == "input_ids":
        inputs = {"input_ids": torch.randint(0, 256, (1, 16))}
        if getattr(config, "is_encoder_decoder", False):
            inputs["decoder_input_ids"] = torch.randint(0, 256, (1, 8))
    elif name == "pixel_values":
        size = getattr(config, "image_size", 32)
        size = size[0] if isinstance(size, (list, tuple)) else size
        inputs = {"pixel_values": torch.randn(1, getattr(config, "num_channels", 3), size, size)}
    elif name == "input_values":  # raw audio: (batch, channels, samples) for codecs, else (batch, samples)
        channels = getattr(config, "audio_channels", None)
        inputs = {"input_values": torch.randn(1, channels, 4800) if channels else torch.randn(1, 4800)}
    elif name == "input_features":  # log-mel frames: (batch, mels, frames) or (batch, frames, mels)
        mels = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", 80)
        shape = (1, 64, mels) if getattr(config, "model_type", "").startswith(("parakeet", "nemotron")) else (1, mels, 64)
        inputs = {"input_features": torch.randn(*shape)}
    else:
        raise TypeError(f"main input {name!r} not built here")
except Exception as exc:
    model = inputs = None
    out["tiny"] = f"{type(exc).__name__}: {str(exc)[:200]}"


def run(model, inputs):
    runs = {}
    for dtype in ("bfloat16", "float16"):
        try:
            cast = {k: v.to(getattr(torch, dtype)) if v.is_floating_point() else v for k, v in inputs.items()}
            with torch.no_grad():
                result = model.to(getattr(torch, dtype))(**cast)
            first = result.logits if getattr(result, "logits", None) is not None else result[0]
            runs[dtype] = {"dtype": str(first.dtype), "shape": list(first.shape),
                           "finite": bool(torch.isfinite(first).all())}
        except Exception as exc:
            runs[dtype] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return runs


if model is not None:
    out.update(run(model, inputs))
if model is None or all("error" in out[dtype] for dtype in ("bfloat16", "float16")):
    # What `amplint trace --hf-config` builds: the default config with 2 layers per stack, the class
    # its architectures or model type name, inputs shaped by the model's main input, no cache.
    from amplint.runtime import hf
    try:
        config = transformers.AutoConfig.for_model(model_type)
        hf.shrink(config, 2)
        config.use_cache = False
        found, cls = hf.model_class(config)
        if found == "causal-lm" and getattr(config, "is_decoder", None) is False:
            config.is_decoder = True
        torch.manual_seed(0)
        model = cls._from_config(config).eval()
        inputs = hf.inputs(model, seq_len=16, batch_size=1)
    except Exception as exc:
        print(json.dumps({"build": f"{type(exc).__name__}: {str(exc)[:200]}"}))
        sys.exit(0)
    out = {"default": True, **run(model, inputs)}
print(json.dumps(out))
"""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _child(code: str, *args: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(path), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"},
    )


def _forward(model_type: str, root: Path) -> dict[str, object]:
    try:
        proc = _child(_FORWARD, model_type, path=root)
    except subprocess.TimeoutExpired:
        return {"build": "timed out"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode < 0:  # the kernel's out-of-memory killer, most often
        return {"build": f"the process was killed by signal {-proc.returncode}"}
    if proc.returncode != 0 or not lines:
        return {"build": (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    return json.loads(lines[-1])


def _broken(before: dict[str, object], after: dict[str, object]) -> str | None:
    """Why the fixed model is worse than the original, or None."""
    if "build" in before:
        return None  # the original does not build from a tiny config: nothing to compare
    if "build" in after:
        return f"does not build: {after['build']}"
    for name in ("bfloat16", "float16"):
        old, new = before[name], after[name]
        assert isinstance(old, dict) and isinstance(new, dict)
        if "error" in old:
            continue
        if "error" in new:
            return f"{name}: {new['error']}"
        if (new["dtype"], new["shape"]) != (old["dtype"], old["shape"]):
            return f"{name}: logits {new['dtype']} {new['shape']}, were {old['dtype']} {old['shape']}"
        if old["finite"] and not new["finite"]:
            return f"{name}: logits not finite"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--package", default="transformers", help="the installed package to fix (default transformers)"
    )
    parser.add_argument("--unsafe-fixes", action="store_true", help="apply the unsafe fixes too")
    parser.add_argument("--all-rules", action="store_true", help="turn the opt-in rules on too")
    parser.add_argument("--output", type=Path, help="write the table into this Markdown file")
    args = parser.parse_args(argv)
    package = args.package
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        print(f"{package} is not installed", file=sys.stderr)
        return 2
    from importlib.metadata import packages_distributions, version

    distribution = (packages_distributions().get(package) or [package])[0]
    known: set[str] = set()  # model types with a class the auto classes build from a config
    if package == "transformers":
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
            MODEL_MAPPING_NAMES,
        )

        known = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) | set(MODEL_MAPPING_NAMES)

    installed = Path(next(iter(spec.submodule_search_locations)))
    command = ["python", "benchmarks/fix_safety.py"] + ["--package", package] * (package != "transformers")
    flags = ["--fix"] + (["--unsafe-fixes"] if args.unsafe_fixes else [])
    flags += ["--extend-select", OPT_IN] if args.all_rules else []
    command += ["--unsafe-fixes"] * args.unsafe_fixes + ["--all-rules"] * args.all_rules
    with tempfile.TemporaryDirectory() as temporary:
        original, fixed = Path(temporary, "original"), Path(temporary, "fixed")
        for root in (original, fixed):
            shutil.copytree(installed, root / package, ignore=shutil.ignore_patterns("__pycache__"))
        models = fixed / package / CHECKED.get(package, "")
        before = {path: _digest(path) for path in models.rglob("*.py")}
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "amplint",
                "check",
                *flags,
                "--exit-zero",
                "--no-cache",
                "--show-fixes",
                "--format",
                "json",
                "-q",
                str(models),
            ],
            capture_output=True,
            text=True,
        )
        applied = Counter(
            line.split()[3] for line in run.stderr.splitlines() if line.startswith("amplint: fixed ")
        )
        changed = sorted(path for path, digest in before.items() if _digest(path) != digest)
        failed_imports: list[str] = []
        for path in changed:
            module = ".".join(path.relative_to(fixed).with_suffix("").parts)
            if _child(f"import {module}", path=original).returncode != 0:
                continue  # does not import before the fix either (a missing optional dependency)
            proc = _child(f"import {module}", path=fixed)
            if proc.returncode != 0:
                failed_imports.append(f"{module}: {(proc.stderr.strip().splitlines() or ['?'])[-1][:160]}")
        types = sorted({p.parent.name for p in changed if p.name.startswith("modeling_")} & known)
        ran, broken, unbuilt = 0, [], []
        for model_type in types:
            old, new = _forward(model_type, original), _forward(model_type, fixed)
            runs = "build" not in old and any("error" not in old[dtype] for dtype in ("bfloat16", "float16"))
            ran += runs
            if not runs:  # builds from no config, or its forward raises before any fix
                why = old.get("build") or old["bfloat16"].get("error")
                unbuilt.append(f"{model_type}: {why}")
            why = _broken(old, new)
            if why is not None:
                broken.append(f"{model_type}: {why}")
    where = f"`{CHECKED[package]}/`" if package in CHECKED else "the package"
    lines = [
        f"`{shlex.join(command)}` ({distribution} {version(distribution)}, `amplint check "
        f"{' '.join(flags)}` on {where})",
        "",
        "| Files changed | Fixes applied | Modules that no longer import | Models run (changed) | "
        "Models that no longer run |",
        "| ---: | --- | ---: | ---: | ---: |",
        f"| {len(changed)} | {', '.join(f'{code}: {n}' for code, n in sorted(applied.items())) or '-'} | "
        f"{len(failed_imports)} | {ran} of {len(types)} | {len(broken)} |",
    ]
    notes = [f"- import: {item}" for item in failed_imports] + [f"- run: {item}" for item in broken]
    notes += [
        f"- not run from a tiny config nor from its default one, so not compared: {item}" for item in unbuilt
    ]
    lines += [""] * bool(notes) + notes
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
