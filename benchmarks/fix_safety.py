"""Does `amplint check --fix` leave real code working? Applied to an installed package (transformers'
`models/`, or any other package with model code: diffusers, flash-linear-attention's `fla`, ...),
then every changed module is imported and what the fix changed runs before and after (a model, or
a function where no model runs on CPU).

    python benchmarks/fix_safety.py run [--package NAME] [--unsafe-fixes] [--all-rules]
                                        [--only FOLDER,...] [--results FILE]
    python benchmarks/fix_safety.py report [FILE] > docs/fix_safety.md

It needs the package installed (flash-linear-attention with fla-core and triton, which fla imports
even where its kernels cannot run); none of them is a dependency of amplint. The installed package
is copied to a temporary directory twice (as it is, and to be fixed); `amplint check --fix` (with
`--unsafe-fixes`; with `--all-rules`, every opt-in rule and the findings `--show-conditional`
shows) runs on the copy (transformers: its `models/`). Then, each in a fresh process with the copy
first on `sys.path`:

- every changed module is imported (one that does not import unfixed either, for want of an
  optional dependency, is left out);
- transformers: every changed `modeling_*.py` whose model type the auto classes know is built from
  a tiny config (2 layers, hidden size 64, 4 heads, vocabulary 256, 32-pixel images, no cache) with random
  weights, as its causal LM (`AutoModelForCausalLM`) or else its base model (`AutoModel`), and runs
  a forward pass on token ids or pixels. A model that runs in neither dtype from the tiny config is
  built as `amplint trace --hf-config` builds it instead: its default config with 2 layers per
  stack, the class its `architectures` or model type names, inputs shaped by its main input, no
  cache;
- other packages: each changed module's entry points to the fixed lines (its top-level classes and
  functions that hold a changed line or use one that does, and that no other of them uses: the
  model class, not its blocks) run from a tiny instance (`benchmarks/fix_safety_calls.py`: the
  class's `__init__` defaults shrunk and inputs made from its forward signature, or a tiny config,
  inputs and method from that file's table, sized after the package's own tests; fla's layers run
  on CPU with each triton kernel they call replaced by fla's own PyTorch reference of the op, from
  that file's `KERNELS`). A run counts only if it went through a changed line. When an entry point does not run, the definitions that hold
  the changed lines are called by themselves instead, if the table has them.

Each runs in every mode of `amplint.runtime.modes` (float64; float32, bfloat16 and float16 casts;
CPU autocast in bfloat16; the emulated CUDA autocast in bfloat16 and float16), with the same weights
and inputs, in the original copy and in the fixed one; the output (transformers: the logits, else
the first output; otherwise the first floating tensor of the output) of each run is saved, and the
pair is judged per mode by `amplint.runtime.modes.judge`, the rule-example tests' judge, against the
original's float64 output: the fixed run raises where the original ran, or its error grew by more
than rounding (one unit in the last place of the mode's lowest precision at the largest magnitude;
2**-40 of it in float64, where the original is the reference; for an integer output such as token
ids, the error is the number of positions that differ from float64's), or, for `--fix` without
`--unsafe-fixes`, its output changed dtype or shape. Each run counts for every rule whose fixes
changed the files it goes through. `--only` limits the fix to some subfolders (model types).

`run` prints its tables and keeps its record in the results file (benchmarks/fix_safety.json, one
record per package and level, replaced when measured again); `report` renders docs/fix_safety.md
from that file.
"""

from __future__ import annotations

import argparse
import ast
import difflib
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
from typing import Any, NamedTuple

OPT_IN = "AMP001,AMP002,AMP003,AMP004,AMP005,AMP006,AMP013,AMP014"
CHECKED = {"transformers": "models"}  # the folder of the package amplint fixes (default: all of it)
TIMEOUT = 300
RESULTS = Path(__file__).with_name("fix_safety.json")
CALLS = Path(__file__).with_name("fix_safety_calls.py")  # a tiny run for the other packages

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
            "d_model": 64, "encoder_attention_heads": 4, "decoder_attention_heads": 4, "use_cache": False}
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
    from amplint.runtime.modes import in_every_mode, save

    def first(**kwargs):
        result = model(**kwargs)
        return result.logits if getattr(result, "logits", None) is not None else result[0]

    return save(in_every_mode(model, first, inputs), sys.argv[2])


def ran(out):
    return any("error" not in value for key, value in out.items() if isinstance(value, dict))


if model is not None:
    out.update(run(model, inputs))
if model is None or not ran(out):
    # What `amplint trace --hf-config` builds: the default config with 2 layers per stack, the class
    # its architectures or model type name, inputs shaped by the model's main input, no cache.
    from amplint.runtime import hf, hf_config, hf_inputs
    try:
        config = transformers.AutoConfig.for_model(model_type)
        hf_config.shrink(config, 2)
        config.use_cache = False
        found, cls = hf.model_class(config)
        if found == "causal-lm" and getattr(config, "is_decoder", None) is False:
            config.is_decoder = True
        torch.manual_seed(0)
        model = cls._from_config(config).eval()
        inputs = hf_inputs.inputs(model, seq_len=16, batch_size=1)
    except Exception as exc:
        print(json.dumps({"build": f"{type(exc).__name__}: {str(exc)[:200]}"}))
        sys.exit(0)
    out = {"default": True, **run(model, inputs)}
print(json.dumps(out))
"""


# The page's fixed text: what the script does and how a run is judged.
PAGE = """
# Fix safety on real code

`--fix` writes code into other people's models, so `benchmarks/fix_safety.py` applies it to an
installed package (transformers' `models/`, or all of any other package with model code), imports
every changed module, and runs what the fix changed before and after the fix, with the same weights
and inputs, in every mode of `amplint.runtime.modes`:

| Mode | Weights and inputs | Autocast |
| --- | --- | --- |
| `float64` | float64 (the reference) | none |
| `float32`, `bfloat16`, `float16` | cast to that dtype | none; half scans keep their running value in half, as CUDA's do |
| `cpu-autocast-bf16` | float32 | `torch.autocast("cpu", dtype=torch.bfloat16)` |
| `cuda-autocast-bf16`, `cuda-autocast-fp16` | float32 | CUDA autocast, emulated without a GPU: the call is traced on fake `cuda:0` tensors, so CUDA autocast's own kernels pick each op's dtype, and the graph is replayed on CPU on the real weights and inputs |

Each run's output (transformers: the logits, else the first output; otherwise the first floating
tensor of the output) is compared with the original's float64 output. A fixed run is worse when it
raises where the original ran, when it is not finite where the reference is, when its largest
error against the reference exceeds the original's by more than rounding (one unit in the last
place of the mode's lowest precision at the reference's largest magnitude; in float64, where the
original is the reference itself, 2**-40 of that magnitude, which lets a rewritten formula round
otherwise and catches any value narrowed to float32), or, for a safe fix, when its output changes
dtype or shape. An integer output (the token ids a beam search returns) is compared by the number
of positions that differ from float64's, and is worse only where more of them differ: the
difference of two token ids says nothing of how far apart the tokens are. The same judge (`amplint.runtime.modes.judge`) runs the rule examples in CI
(`tests/rules/test_example_numerics.py`).

What runs:

- transformers: a forward pass of every changed model that the auto classes build from a tiny
  config (2 layers, hidden size 64, 4 heads, vocabulary 256, 32-pixel images, no cache; its causal
  LM, else its base model). A model that runs in no mode from the tiny config is built as
  `amplint trace --hf-config` builds it instead (its default config with 2 layers per stack).
- other packages: for each changed module, its entry points to the fixed lines, found in its
  source: the top-level classes and functions that hold a changed line or use one that does, and
  that no other of them uses (the model class, not its blocks and norms). Each is built from a tiny
  instance (`benchmarks/fix_safety_calls.py`): the class's `__init__` defaults shrunk (widths that
  16 divides divided by 16, layers and blocks cut to 1, heads to 2; a required width 32) and its
  inputs made from the names of its forward arguments; where that cannot build the class, run it,
  or run it through the fixed lines, a small table gives the config, the inputs and the method to
  call, sized after the package's own tests; functions run only from that table. A line trace tells
  whether the run went through a changed line: one that did not is reported, not counted. When an
  entry point does not run, the definitions that hold the changed lines are called by themselves
  instead.
- flash-linear-attention's layers call triton kernels, which do not run without a GPU. For the CPU
  run, each kernel a fixed layer calls is replaced, in the layer's module and only for the run, by
  fla's own PyTorch reference of the same op (its `naive` recurrences and `_ref` functions, the ones
  its tests check the kernels against), the same in the original copy and in the fixed one; the
  fixed lines run as written. So these runs measure the fixes around the kernels, not the kernels.
  The references compute in float32, as the kernels do, so a float64 run is float32 inside them.
  `KERNELS` in `benchmarks/fix_safety_calls.py` lists each replacement and why; a kernel with no
  reference in the package is not replaced, and its layer is not compared. The notes under fla's
  tables name every replacement.

`--all-rules` turns on every opt-in rule and fixes the findings that `--show-conditional` shows too
(those whose half precision is the caller's choice), so that every fix amplint can write is applied.
A run counts for every rule whose fixes changed the files it goes through. The results are kept in
`benchmarks/fix_safety.json`, one record per package and level, and this page is rendered from them:

    python benchmarks/fix_safety.py run --package NAME --unsafe-fixes --all-rules   # one record
    python benchmarks/fix_safety.py report > docs/fix_safety.md
"""

SUMMARY = """
Each row is one run of the script: the files its fixes changed, the fixes applied, the models and
functions run through a changed line (of those that go through one), and, over the seven modes,
the runs (a model or function in one mode) whose fixed code raises where the original ran and those
otherwise worse: an error against float64 grown by more than rounding, or, for a safe fix, a changed
output dtype or shape. A model or function that runs in no mode before the fix is not compared; the
notes under each table name it and say why. The per-rule tables count a run under every rule whose
fixes changed its files.
"""

# The trees the page reports on, each at both levels (`--all-rules`; unsafe with `--unsafe-fixes`).
TREES = (
    "transformers",
    "diffusers",
    "fla",
    "x_transformers",
    "vector_quantize_pytorch",
    "peft",
    "mambapy",
    "minGRU_pytorch",
)

# What a table alone does not say, by the record's key ("package level", then its `--only`).
NOTES: dict[str, str] = {
    "x_transformers unsafe": """
No run raises now. The earlier record (amplint 1e253c5) had two: `TransformerWrapper` in bfloat16 and
float16, `expected m1 and m2 to have the same dtype`, one bug in AMP007's unsafe fix of
`DataDependentAlibi.forward` (the forgetting-transformer bias). It accumulated
`forget_gates.cumsum(dim = -1, dtype=torch.promote_types(forget_gates.dtype, torch.float32))` and
returned the float32 bias; the caller adds it to the half attention logits in another module, and
`einsum('b h i j, b h j d -> b h i d', attn, v)` in `attend.py` met float32 attention weights and
half values. An upcast value that leaves its function is now cast back where it leaves, or the fix
is not offered (`amplint.rule.dtype_keeping_fix`). `forget_gates` is bound again on the very line,
so its dtype is read at the `cumsum` and the sum is cast back at once, to the dtype `cumsum` gives
there (`.to(forget_gates.new_empty(0).cumsum(0).dtype)`: float32 under CUDA autocast, as before the
fix). `tests/static/data/real/x_transformers_data_dependent_alibi.py` runs that fix into a half
einsum in every mode. AMP003's fixes in `next_latent_wrapper.py` now upcast to
`torch.promote_types(logits1.dtype, torch.float32)`, binding the logits once
(`(logits1 := frozen_to_logits(...))`), not to a plain float32 that lowers float64 code;
`NextLatentWrapper` needs a network to wrap and is not run here.
""",
    "x_transformers safe": """
No run raises or gets worse. The earlier record had two changed dtypes, one bug in AMP014's safe
fix: it rewrote the sigsoftmax logits `logits + logits.sigmoid().log()` (`TransformerWrapper`,
`sigsoftmax_logits=True`) as `logits + F.logsigmoid(logits)`, equal values where no autocast runs,
but CUDA autocast runs `log` in float32 and `logsigmoid` in the half dtype, so under it the logits
came out half instead of float32. A fused rewrite now keeps the dtype the composition gave there
(`F.logsigmoid(x.to(x.new_empty(0).log().dtype))`: float32 under CUDA autocast, `x`'s own dtype
elsewhere, float64 kept), or is not offered where `x`'s dtype cannot be read without computing it
twice. AMP001's and AMP007's one safe fix in this file is `PerRowDataDependentAlibi`'s forget gates,
upcast and cast back where they leave the function.
""",
    "transformers unsafe": """
All of `models/`: the fixes change the files of 16 model types. Three are not compared, each for a
reason before any fix: `glm5_next` and `kimi_linear` do not build from the tiny config, and from
their default configs (2 layers per stack) their forward passes in the seven modes were stopped by
the out-of-memory killer; building `moonshine_streaming` raises an AttributeError (its config has
no `num_key_value_heads`). So the AMP014 fixes, all in those files, have no run here.
""",
    "transformers safe": """
All of `models/`: the safe fixes change the files of 11 model types. The same three as in the unsafe
run are not compared (`glm5_next`, `kimi_linear`: out of memory from their default configs;
`moonshine_streaming`: its config does not build), so AMP014's fixes and AMP003's one safe fix,
in those files, have no run here.
""",
    "diffusers safe": """
No run raises or gets worse. The earlier record had the same two worse runs as the unsafe level
(below): AMP006's safe fix of `LTX2AudioPixelNorm` cast the root back to the convolution's float16
where CUDA autocast had computed it in float32, and `UniDiffuserTextDecoder`'s token ids were
compared by their absolute difference. Both are fixed as the unsafe level's note says.
""",
    "diffusers unsafe": """
No run raises or gets worse. The earlier record had two worse runs; both are explained and fixed.
`AutoencoderKLLTX2Audio` under the emulated CUDA autocast in float16 (error 0.00544 against float64
after AMP006's fix, 0.00331 before) was a bug in the fix: `LTX2AudioPixelNorm.forward` takes
`torch.mean(x**2, ...)`, `rms = torch.sqrt(mean_sq + self.eps)` and `x / rms` of a convolution's half
output; CUDA autocast runs `pow` in float32, so the mean, its root and `x / rms` were float32 there,
and the fix's cast back, `rms.to(x.dtype)`, rounded the root to float16 and made the division half.
The fix now casts the root back to the dtype `pow` gives there, `x.new_empty(0).pow(0).dtype`
(float32 under CUDA autocast, `x`'s dtype elsewhere), and
`tests/static/data/real/diffusers_ltx2_audio_pixel_norm.py` runs it after a convolution in every
mode. `UniDiffuserTextDecoder`'s output is the token ids its beam search returns
(`generate_captions`, from the table), which the earlier record compared by the absolute difference
of the ids: that said only that other tokens came out. Integer outputs are now compared by the number
of positions that differ from float64's (`amplint.runtime.modes.error`). On its beam search's
`logits.softmax(-1).log()` AMP003 offers no fix at this commit; AMP014's rewrite to
`logits.log_softmax(-1)` is the one applied.
""",
    "fla unsafe": """
fla's layers compute their recurrences, norms and fused activations in triton kernels, which do not
run without a GPU. Here they ran on CPU with each kernel they call replaced by fla's own PyTorch
reference of the same op (the notes above name every replacement; `KERNELS` in
`benchmarks/fix_safety_calls.py` gives why), in the original copy and in the fixed one alike, so
these runs check the fixed lines around the kernels, not the kernels: the references cast every
input to float32, so whether a kernel takes the float32 gates that AMP001's fix hands it beside half
queries and keys is not measured here. fla's `swish` and `swiglu` kernels have no reference in the
package: `GatedSlotAttention` and `Raven` are built with relu feature maps (and `Raven` with a relu
gate and torch's RMSNorm) to keep off `swish`, which the fixed gate lines do not use;
`HGRNAttention` (`swiglu` on its fixed line) and `HGRN2Attention` (`swish` on its queries) are not
compared.
""",
    "mambapy unsafe": """
mambapy's `Mamba` does not run in bfloat16 or float16 without autocast before any fix (its parallel
scan meets float32 tensors it makes itself: `expected m1 and m2 to have the same dtype`), so its
cast runs are not compared; the fixed RMSNorm statistics run in the other five modes.
""",
}
NOTES["mambapy safe"] = NOTES["mambapy unsafe"]
NOTES["fla safe"] = NOTES["fla unsafe"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _child(argv: list[str], path: Path) -> subprocess.CompletedProcess[str]:
    """Run Python with `path` first on `sys.path`, ahead of the installed package (the rest of
    PYTHONPATH stays: a package's own dependencies may live there)."""
    pythonpath = os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={
            **os.environ,
            "PYTHONPATH": pythonpath,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_VERBOSITY": "error",
        },
    )


def _forward(argv: list[str], root: Path) -> dict[str, object]:
    """The JSON that the child `argv` prints last, or {"build": why it printed none}."""
    try:
        proc = _child(argv, root)
    except subprocess.TimeoutExpired:
        return {"build": "timed out"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode < 0:  # the kernel's out-of-memory killer, most often
        return {"build": f"the process was killed by signal {-proc.returncode}"}
    if proc.returncode != 0 or not lines:
        return {"build": (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    return json.loads(lines[-1])


def _changed_lines(old: str, new: str) -> tuple[set[int], set[int]]:
    """The 1-based lines a fix replaced in `old` and wrote in `new`."""
    old_lines, new_lines = set(), set()
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            old_lines.update(range(i1 + 1, i2 + 1))
            new_lines.update(range(j1 + 1, j2 + 1))
    return old_lines, new_lines


def _functions(source: str) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions and methods of a module by qualified name."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not isinstance(child, ast.ClassDef):
                    found[prefix + child.name] = child
                walk(child, f"{prefix}{child.name}.")

    walk(ast.parse(source), "")
    return found


def _redecorated(old: str, new: str, new_lines: set[int]) -> tuple[set[int], set[int]]:
    """The body lines, in the old source and in the new one, of the functions whose decorators a fix
    changed (AMP015's `custom_fwd`): a decorator runs at import, so a run goes through that fix when
    it calls the function, which the line trace sees in the body."""
    old_functions, new_functions = _functions(old), _functions(new)
    old_body: set[int] = set()
    new_body: set[int] = set()
    for name, node in new_functions.items():
        if not any(decorator.lineno in new_lines for decorator in node.decorator_list):
            continue
        for body, function in ((new_body, node), (old_body, old_functions.get(name))):
            if function is not None:
                body.update(range(function.body[0].lineno, (function.end_lineno or function.lineno) + 1))
    return old_body, new_body


def _joined(lines: set[int]) -> str:
    return ",".join(map(str, sorted(lines)))


def _reaching(source: str, lines: set[int]) -> tuple[list[str], list[str]]:
    """The module's top-level classes and functions to run to go through `lines`, and those that
    hold one of them. To run: those that hold one of the lines or use (by name, at any depth) a
    top-level definition that does, and that no other such definition of the module uses (a model
    class, not its blocks and helpers)."""
    tree = ast.parse(source)
    spans: dict[str, tuple[int, int]] = {}
    uses: dict[str, set[str]] = {}
    definitions: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            targets = [node.name]
            definitions.add(node.name)
        elif isinstance(node, ast.Assign):  # a table of classes, say
            targets = [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        else:
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        for target in targets:
            spans[target] = (first, node.end_lineno or node.lineno)
            uses[target] = names - {target}
    holders = {name for name, (start, end) in spans.items() if any(start <= line <= end for line in lines)}
    reach = set(holders)
    while more := {name for name, used in uses.items() if used & reach} - reach:
        reach |= more
    entries = sorted(name for name in reach & definitions if not any(name in uses[other] for other in reach))
    return entries, sorted(holders & definitions)


class Tried(NamedTuple):
    """One model or function run before and after the fix: what each printed, where each saved its
    outputs, and the rules whose fixes changed the files it runs."""

    name: str
    old: dict[str, object]
    new: dict[str, object]
    saved: tuple[Path, Path]
    codes: frozenset[str]


def _call(
    module: str,
    name: str,
    lines: tuple[str, str],
    original: Path,
    fixed: Path,
    codes: frozenset[str],
) -> Tried:
    """A tiny run of `module.name` in the original copy and in the fixed one (`lines`: the changed
    lines of each)."""
    saved = _saved(original, f"{module}.{name}")
    old, new = (
        [str(CALLS), module, name, changed, str(path)] for changed, path in zip(lines, saved, strict=True)
    )
    return Tried(f"{module}.{name}", _forward(old, original), _forward(new, fixed), saved, codes)


def _saved(original: Path, name: str) -> tuple[Path, Path]:
    """Where the runs of `name` in the original copy and in the fixed one save their outputs."""
    folder = original.parent / "outputs"
    folder.mkdir(exist_ok=True)
    return folder / f"{name}.original.pt", folder / f"{name}.fixed.pt"


def _ran(result: dict[str, object]) -> bool:
    """Whether it built and ran in at least one mode."""
    return "build" not in result and any(
        isinstance(value, dict) and "error" not in value for value in result.values()
    )


def _judged(tried: Tried, safe: bool) -> dict[str, str | None]:
    """Per mode, why the fixed run is worse than the original (`amplint.runtime.modes.judge`), None
    where it is not; modes where neither ran are left out. The reference is the original's float64
    output, or its float32 one where it does not run in float64."""
    from amplint.runtime.modes import MODES, Run, judge, load

    before = load(str(tried.saved[0]))
    if "build" in tried.new:  # the fixed copy does not build: it raises wherever the original ran
        after = {mode.name: Run(raised=str(tried.new["build"])) for mode in MODES}
    else:
        after = load(str(tried.saved[1]))
    # A model with an op float64 lacks (grouped_mm) is measured against the original's float32 run,
    # which then judges the float32 runs only by whether they raise.
    reference = before["float64"].out or after["float64"].out
    measured_by = "float64" if reference else "float32"
    reference = reference or before["float32"].out or []
    verdicts: dict[str, str | None] = {}
    for mode in MODES:
        old, new = before[mode.name], after[mode.name]
        if old.out is not None or new.out is not None:
            against = [] if mode.name == measured_by else reference
            verdicts[mode.name] = judge(mode, old, new, against, safe)
    return verdicts


def _per_rule(judged: list[tuple[Tried, dict[str, str | None]]]) -> dict[str, list[list[int]]]:
    """Per rule, per mode (in `MODES` order): the runs compared, those that raise after the fix and
    those whose error grew. A run counts for every rule whose fixes changed the files it goes through."""
    from amplint.runtime.modes import MODES

    table: dict[str, list[list[int]]] = {}
    for code in sorted({code for tried, _ in judged for code in tried.codes}):
        table[code] = []
        for mode in MODES:
            verdicts = [v[mode.name] for tried, v in judged if code in tried.codes and mode.name in v]
            raised = sum(1 for why in verdicts if why is not None and why.startswith("raises"))
            worse = sum(1 for why in verdicts if why is not None and not why.startswith("raises"))
            table[code].append([len(verdicts), raised, worse])
    return table


def _revision() -> str:
    """The commit of amplint that measured, with "+" when its working tree differs from it."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "amplint"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "?"
    return (head or "?") + "+" * bool(dirty)


def measure(package: str, unsafe: bool, all_rules: bool, only: str | None) -> dict[str, object] | None:
    """Fix a copy of the installed `package`, run what changed before and after in every mode, and
    return the record that `report` renders (None when the package is not installed)."""
    from amplint.runtime.modes import MODES

    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
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
    command = ["python", "benchmarks/fix_safety.py", "run"] + ["--package", package] * (
        package != "transformers"
    )
    flags = ["--fix"] + (["--unsafe-fixes"] if unsafe else [])
    flags += ["--extend-select", OPT_IN, "--show-conditional"] if all_rules else []
    command += ["--unsafe-fixes"] * unsafe + ["--all-rules"] * all_rules
    command += ["--only", only] if only else []
    with tempfile.TemporaryDirectory() as temporary:
        original, fixed = Path(temporary, "original"), Path(temporary, "fixed")
        for root in (original, fixed):
            shutil.copytree(installed, root / package, ignore=shutil.ignore_patterns("__pycache__"))
        models = fixed / package / CHECKED.get(package, "")
        folders = [models / name for name in only.split(",")] if only else [models]
        before = {path: _digest(path) for folder in folders for path in folder.rglob("*.py")}
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
                *map(str, folders),
            ],
            capture_output=True,
            text=True,
        )
        fixed_lines = [line.split() for line in run.stderr.splitlines() if line.startswith("amplint: fixed ")]
        applied = Counter(words[3] for words in fixed_lines)
        codes_in: dict[Path, set[str]] = {}  # the rules whose fixes changed each file
        for words in fixed_lines:
            codes_in.setdefault(Path(words[2].rsplit(":", 2)[0]).resolve(), set()).add(words[3])
        changed = sorted(path for path, digest in before.items() if _digest(path) != digest)

        def codes(paths: list[Path]) -> frozenset[str]:
            return frozenset(code for path in paths for code in codes_in.get(path.resolve(), ()))

        failed_imports: list[str] = []
        for path in changed:
            module = ".".join(path.relative_to(fixed).with_suffix("").parts)
            if _child(["-c", f"import {module}"], original).returncode != 0:
                continue  # does not import before the fix either (a missing optional dependency)
            proc = _child(["-c", f"import {module}"], fixed)
            if proc.returncode != 0:
                failed_imports.append(f"{module}: {(proc.stderr.strip().splitlines() or ['?'])[-1][:160]}")
        tried: list[Tried] = []
        no_entry: list[str] = []
        if package == "transformers":
            types = sorted({p.parent.name for p in changed if p.name.startswith("modeling_")} & known)
            for model_type in types:
                saved = _saved(original, model_type)
                old, new = (
                    _forward(["-c", _FORWARD, model_type, str(path)], root)
                    for path, root in zip(saved, (original, fixed), strict=True)
                )
                files = [p for p in changed if p.parent.name == model_type]
                tried.append(Tried(model_type, old, new, saved, codes(files)))
        else:  # the classes and functions of each changed module that go through a fixed line
            for path in changed:
                module = ".".join(path.relative_to(fixed).with_suffix("").parts)
                text = path.read_text(encoding="utf-8")
                old_lines, new_lines = _changed_lines(
                    (original / path.relative_to(fixed)).read_text("utf-8"), text
                )
                entries, holders = _reaching(text, new_lines)
                if not entries:
                    no_entry.append(module)
                old_body, new_body = _redecorated(
                    (original / path.relative_to(fixed)).read_text("utf-8"), text, new_lines
                )
                lines = (_joined(old_lines | old_body), _joined(new_lines | new_body))
                results = [_call(module, name, lines, original, fixed, codes([path])) for name in entries]
                if not all(_ran(item.old) for item in results):
                    # an entry point does not run: call what holds the fixed lines by itself instead
                    results += [
                        _call(module, name, lines, original, fixed, codes([path]))
                        for name in holders
                        if name not in entries
                    ]
                tried += results
        compared, unbuilt, unreached = [], [], []
        judged: list[tuple[Tried, dict[str, str | None]]] = []
        for item in tried:
            if not _ran(item.old):  # builds from no config, or its forward raises before any fix
                why = item.old.get("build") or next(
                    (v["error"] for v in item.old.values() if isinstance(v, dict) and "error" in v), "?"
                )
                unbuilt.append(f"{item.name}: {why}")
            elif item.old.get("reached") is False:  # ran, but not through the fixed lines: proves nothing
                unreached.append(item.name)
            else:
                compared.append(item.name)
                judged.append((item, _judged(item, safe=not unsafe)))
        broken = [
            f"{item.name} ({', '.join(sorted(item.codes))}), {mode}: {why}"
            for item, verdicts in judged
            for mode, why in verdicts.items()
            if why is not None
        ]
        worse_runs = sorted({item.name for item, verdicts in judged if any(verdicts.values())})
        replaced = [  # kernels that fix_safety_calls.py replaced by the package's references (fla)
            f"{item.name}: {'; '.join(map(str, item.old['replaced']))}"
            for item in tried
            if isinstance(item.old.get("replaced"), list)
        ]
    where = f"`{CHECKED[package]}/`" if package in CHECKED else "the package"
    where += f" ({', '.join(f'`{name}/`' for name in only.split(','))} only)" if only else ""
    return {
        "package": package,
        "distribution": distribution,
        "version": version(distribution),
        "level": "unsafe" if unsafe else "safe",
        "only": only,
        "command": shlex.join(command),
        "check": f"amplint check {' '.join(flags)}",
        "where": where,
        "amplint": _revision(),
        "changed": len(changed),
        "applied": dict(sorted(applied.items())),
        "failed_imports": failed_imports,
        "tried": len(tried),
        "compared": compared,
        "worse": worse_runs,
        "broken": broken,
        "unbuilt": unbuilt,
        "unreached": unreached,
        "no_entry": no_entry,
        "replaced": replaced,
        "modes": [mode.name for mode in MODES],
        "per_rule": _per_rule(judged),
    }


def _key(record: dict[str, Any]) -> str:
    """A record's key in the results file: its package and level, and its `--only` folders, so that
    a run of some model types alone (one that did not fit with the others) keeps its own record."""
    only = f" --only {record['only']}" if record.get("only") else ""
    return f"{record['package']} {record['level']}{only}"


def _only(record: dict[str, Any]) -> str:
    """The folders a record's `--only` names, in words ("" for a run of all of them)."""
    return f" (`{'/`, `'.join(record['only'].split(','))}/` only)" if record.get("only") else ""


def _section(record: dict[str, Any]) -> list[str]:
    """One measured run of the script: its command, its summary row, its per-rule table and notes."""
    transformers = record["package"] == "transformers"
    unit = "Models" if transformers else "Models and functions"
    applied = ", ".join(f"{code}: {n}" for code, n in record["applied"].items()) or "-"
    lines = [
        f"`{record['command']}` ({record['distribution']} {record['version']}, `{record['check']}` on "
        f"{record['where']}; amplint {record['amplint']})",
        "",
        f"| Files changed | Fixes applied | Modules that no longer import | {unit} run (changed) | "
        f"{unit} that raise or get worse |",
        "| ---: | --- | ---: | ---: | ---: |",
        f"| {record['changed']} | {applied} | {len(record['failed_imports'])} | "
        f"{len(record['compared'])} of {record['tried']} | {len(record['worse'])} |",
    ]
    if record["per_rule"]:
        lines += ["", "Per rule and mode: runs compared / that raise after the fix / whose error grew:", ""]
        lines += [
            "| Rule | " + " | ".join(record["modes"]) + " |",
            "| --- |" + " ---: |" * len(record["modes"]),
        ]
        for code, cells in record["per_rule"].items():
            lines.append(f"| {code} | " + " | ".join(" / ".join(map(str, cell)) for cell in cells) + " |")
    tiny = "a tiny config nor from its default one" if transformers else "a tiny instance"
    notes = [f"- import: {item}" for item in record["failed_imports"]]
    notes += [f"- worse: {item}" for item in record["broken"]]
    notes += [f"- not run from {tiny}, so not compared: {item}" for item in record["unbuilt"]]
    notes += [f"- ran, but not through a fixed line: {item}" for item in record["unreached"]]
    notes += [
        f"- no class or function of the module reaches a fixed line: {item}" for item in record["no_entry"]
    ]
    notes += [f"- triton kernels on CPU: {item}" for item in record.get("replaced", [])]
    if not transformers:  # what ran is the script's choice here: name it
        notes += [f"- compared: {item}" for item in record["compared"]]
    return lines + [""] * bool(notes) + notes


def report(data: dict[str, Any]) -> str:
    """docs/fix_safety.md from the results file: the method, a summary row per tree and level, then
    each run's tables and notes."""
    records = sorted(
        data["runs"].values(),
        # a level's main run first, then the folders run alone
        key=lambda r: (r["package"] != "transformers", r["package"], r["level"], -len(r.get("only") or "")),
    )
    lines = [PAGE.strip(), "", "## Summary", ""]
    lines += [
        "| Tree | Level | Files changed | Fixes applied | Runs compared (of changed) | Runs that raise | "
        "Runs otherwise worse |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for record in records:
        # each (run, mode) once, though its row counts it under every rule of its files
        whys = [line.split(": ", 1)[1] for line in record["broken"]]
        raised = sum(1 for why in whys if why.startswith("raises"))
        grew = len(whys) - raised
        lines.append(
            f"| {record['distribution']} {record['version']} | {record['level']}{_only(record)} | {record['changed']} | "
            f"{sum(record['applied'].values())} | {len(record['compared'])} of {record['tried']} | "
            f"{raised} | {grew} |"
        )
    lines += ["", SUMMARY.strip()]
    measured = {f"{record['package']} {record['level']}" for record in records}
    missing = [
        f"{tree} {level}"
        for tree in TREES
        for level in ("unsafe", "safe")
        if f"{tree} {level}" not in measured
    ]
    if missing:
        lines += ["", "Not measured yet (no record in the results file): " + ", ".join(missing) + "."]
    for record in records:
        lines += [
            "",
            f"## {record['distribution']} {record['version']}, {record['level']} fixes{_only(record)}",
            "",
        ]
        lines += _section(record)
        if note := NOTES.get(_key(record)):
            lines += ["", note.strip()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="measure one package at one level, into the results file")
    run_parser.add_argument(
        "--package", default="transformers", help="the installed package to fix (default transformers)"
    )
    run_parser.add_argument("--unsafe-fixes", action="store_true", help="apply the unsafe fixes too")
    run_parser.add_argument(
        "--all-rules",
        action="store_true",
        help="turn the opt-in rules on too, and fix the findings shown only with --show-conditional",
    )
    run_parser.add_argument(
        "--only",
        help="the subfolders of the checked folder to fix, comma-separated (transformers: model types)",
    )
    run_parser.add_argument("--results", type=Path, default=RESULTS, help="the results file to update")
    report_parser = sub.add_parser("report", help="render docs/fix_safety.md from the results file")
    report_parser.add_argument("results", type=Path, nargs="?", default=RESULTS)
    args = parser.parse_args(argv)
    if args.command == "report":
        print(report(json.loads(args.results.read_text(encoding="utf-8"))), end="")
        return 0
    record = measure(args.package, args.unsafe_fixes, args.all_rules, args.only)
    if record is None:
        print(f"{args.package} is not installed", file=sys.stderr)
        return 2
    data = json.loads(args.results.read_text(encoding="utf-8")) if args.results.exists() else {"runs": {}}
    data["runs"][_key(record)] = record
    data["runs"] = dict(sorted(data["runs"].items()))
    args.results.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print("\n".join(_section(record)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
