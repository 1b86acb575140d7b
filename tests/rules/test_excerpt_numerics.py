"""The real-code excerpts run too: every excerpt of `tests/static/data/real/` that amplint fixes (every
rule on, unsafe fixes included, as `check --select ALL --show-conditional --fix --unsafe-fixes` does)
is executed before and after its fix in every mode of `amplint.runtime.modes`, against a float64 run
of the unfixed excerpt, and judged as the rule examples are (`test_example_numerics.py`): the fixed
code runs where the unfixed code runs, is finite wherever float64 is, and its error is no larger.

An excerpt is a slice of a real file: its elided lines (a base class from the project, a helper)
are supplied by the row's `prelude`, from the real packages where they are installed (transformers'
own RG-LRU layer); its imports are not run, only the definitions the row names. The `run` snippet
follows the rule examples' conventions (`tensor`, `mask`, `cast`, `DTYPE`, `out = f(...)`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from test_example_numerics import FLOAT64, execute  # noqa: E402

from amplint.config import Settings  # noqa: E402
from amplint.diagnostics import SAFE  # noqa: E402
from amplint.fixing.edits import fix_source  # noqa: E402
from amplint.pipeline.check import rules_for  # noqa: E402
from amplint.rules import all_rules  # noqa: E402
from amplint.runtime.modes import MODES, Run, judge  # noqa: E402
from amplint.source import decode_source  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "static" / "data" / "real"
EVERY_RULE = Settings(extend_select=tuple(sorted(r.code for r in all_rules() if not r.runtime_only)))


@dataclass(frozen=True)
class Excerpt:
    names: tuple[str, ...]  # the definitions of the excerpt that run (its imports do not)
    run: str
    prelude: str = ""
    after: str = ""  # code that uses the definitions (a real class taking the excerpt's method)


EXCERPTS = {
    "litgpt_top_p_cumsum_half.py": Excerpt(
        ("sample_top_p",),
        # The probabilities top-p keeps, over a vocabulary whose tail the half cumsum rounds away.
        "def kept(logits):\n"
        "    return torch.softmax(sample_top_p(logits, 0.9), dim=-1)\n"
        "out = kept(tensor(4096, scale=2.0))",
    ),
    "x_transformers_logsigmoid_forget_gates.py": Excerpt(
        ("PerRowDataDependentAlibi",),
        "alibi = cast(PerRowDataDependentAlibi(dim=32, heads=2))\nout = alibi(tensor(2, 48, 32))",
        prelude="from torch import nn, einsum\nimport torch.nn.functional as F\n"
        "from einops.layers.torch import Rearrange\nModule = nn.Module\n",
    ),
    "x_transformers_data_dependent_alibi.py": Excerpt(
        ("DataDependentAlibi",),
        # The bias meets half logits and values where x-transformers' `Attend` adds it and takes the
        # product of the attention with `v`: a float32 bias there raises.
        "def attend(alibi, x, q, k, v):\n"
        "    sim = torch.einsum('b h i d, b h j d -> b h i j', q, k) + alibi(x)\n"
        "    return torch.einsum('b h i j, b h j d -> b h i d', sim.softmax(dim=-1), v)\n"
        "alibi = cast(DataDependentAlibi(dim=32, heads=2))\n"
        "out = attend(alibi, tensor(2, 64, 32), tensor(2, 2, 64, 8), tensor(2, 2, 64, 8), tensor(2, 2, 64, 8))",
        # einx is not a test dependency: its `subtract` for the one pattern the causal bias uses.
        prelude="import types\nfrom torch import nn\nfrom einops.layers.torch import Rearrange\n"
        "Module = nn.Module\n"
        "def subtract(pattern, a, b):\n"
        "    assert pattern == 'b h i, b h j -> b h i j'\n"
        "    return a[..., :, None] - b[..., None, :]\n"
        "einx = types.SimpleNamespace(subtract=subtract)\n",
    ),
    "diffusers_ltx2_audio_pixel_norm.py": Excerpt(
        ("LTX2AudioPixelNorm",),
        # As the VAE's blocks use it: on a convolution's output, which CUDA autocast gives in half.
        "class Block(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)\n"
        "        self.norm = LTX2AudioPixelNorm(dim=1, eps=1e-6)\n"
        "    def forward(self, x):\n"
        "        return self.norm(self.conv(x))\n"
        "block = cast(Block())\n"
        "out = block(tensor(2, 4, 8, 8, scale=3.0))",
        prelude="import torch.nn as nn\n",
    ),
    "transformers_recurrent_gemma_rglru.py": Excerpt(
        ("RecurrentGemmaRglru",),
        # The excerpt's forward on transformers' own layer (its __init__, scan and helpers).
        "config = RecurrentGemmaConfig(hidden_size=64, lru_width=64, num_attention_heads=4)\n"
        "layer = Layer(config)\n"
        "for weight in layer.parameters():  # transformers leaves them to its _init_weights\n"
        "    torch.nn.init.normal_(weight, std=0.2)\n"
        "layer = cast(layer)\n"
        "layer.recurrent_states = None\n"
        "position_ids = torch.arange(24).unsqueeze(0).repeat(2, 1)\n"
        "out = layer(tensor(2, 24, 64), position_ids)",
        prelude="from torch import nn\n"
        "from transformers import RecurrentGemmaConfig\n"
        "from transformers.models.recurrent_gemma import modeling_recurrent_gemma as real\n"
        "from transformers.models.recurrent_gemma.modeling_recurrent_gemma import SqrtBoundDerivative\n"
        "def is_torchdynamo_compiling():\n"
        "    return False\n",
        # The excerpt's forward on the real layer: the subclass takes the excerpt's method only.
        after="\nclass Layer(real.RecurrentGemmaRglru):\n    forward = RecurrentGemmaRglru.forward\n",
    ),
    "nemo_forward_sum_masked_fill.py": Excerpt(
        ("ForwardSumLoss",),
        # The masked log-probabilities the CTC loss reads: the -1e15 fill is -inf in float16.
        "class Keep(torch.nn.Module):\n"
        "    def forward(self, logprob, *args, **kwargs):\n"
        "        return logprob\n"
        "class Masked(ForwardSumLoss):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.ctc_loss = Keep()\n"
        "loss = Masked()\n"
        "out = loss(tensor(2, 1, 6, 5), torch.tensor([5, 3]), torch.tensor([6, 4]))",
        prelude="import torch.nn.functional as F\nLoss = torch.nn.Module\n",
    ),
    "opennmt_global_attention_length_mask.py": Excerpt(
        ("masked_attention",),
        # Padded target rows masked whole: NaN rows in every dtype unless the fill is finite.
        "out = masked_attention(None, tensor(2, 4, 8), tensor(2, 6, 8), mask(2, 6, p=0.3), mask(2, 4, p=0.3))",
        prelude="import torch.nn.functional as F\n",
    ),
    "parlai_treesearch_half_scores.py": Excerpt(
        ("TorchGeneratorAgent",),
        "out = TorchGeneratorAgent._generation_activation(None, tensor(4, 512, scale=4.0))",
        prelude="import torch.nn.functional as F\nOpt = dict\n",
    ),
    "vllm_mla_prefill_causal_triu.py": Excerpt(
        ("causal_padded_scores",),
        "out = causal_padded_scores(tensor(2, 5, 7, scale=3.0), 5, 7, mask(7, p=0.4))",
    ),
    "openfold_global_attention_int_scale.py": Excerpt(
        ("softmax_no_cast",),
        "out = softmax_no_cast(tensor(2, 4, 16, scale=4.0))",
        prelude="deepspeed_is_installed = False\n",
    ),
    "nemo_bce_autocast_off_by_default.py": Excerpt(
        ("BCELoss",),
        "loss = BCELoss()\n"
        "out = loss(torch.sigmoid(tensor(2, 8, 3)), mask(2, 8, 3).to(DTYPE), torch.tensor([8, 5]))",
        prelude="Loss = torch.nn.Module\nTyping = object\nNeuralType = LabelsType = LengthsType = None\n"
        "LossType = ProbsType = None\n"
        "def typecheck():\n"
        "    return lambda forward: forward\n",
    ),
}


def _definitions(text: str, names: tuple[str, ...]) -> str:
    """The named top-level definitions of `text`, in their order."""
    tree = ast.parse(text)
    found = [node for node in tree.body if getattr(node, "name", None) in names]
    assert [n.name for n in found] == list(names), f"{names} not all defined"  # type: ignore[attr-defined]
    lines = text.splitlines()
    return "\n".join(
        "\n".join(
            lines[
                (node.decorator_list[0].lineno if node.decorator_list else node.lineno) - 1 : node.end_lineno
            ]
        )
        for node in found
    )


def _fixed(path: Path) -> tuple[str, str, bool]:
    """The excerpt's text, its text with every fix applied, and whether all of them were safe."""
    source = decode_source(path.read_bytes(), path)
    outcome = fix_source(source, rules_for(EVERY_RULE, path), path.name, unsafe=True, conditional=True)
    safe = all(d.fix is not None and d.fix.applicability == SAFE for d in outcome.applied)
    return source.text, outcome.new_text, safe


FIXED = sorted(p.name for p in DATA.glob("*.py") if len(set(_fixed(p)[:2])) == 2)


def test_every_fixed_excerpt_runs_here() -> None:
    """An excerpt amplint rewrites has a row: its fix is code written into someone's model."""
    assert sorted(EXCERPTS) == FIXED


@pytest.mark.parametrize("name", sorted(EXCERPTS))
def test_the_fix_of_a_real_excerpt_is_right_in_every_mode(name: str) -> None:
    row = EXCERPTS[name]
    path = DATA / name
    text, fixed, safe = _fixed(path)
    before_code = "import torch\n" + row.prelude + _definitions(text, row.names) + row.after
    after_code = "import torch\n" + row.prelude + _definitions(fixed, row.names) + row.after
    assert before_code != after_code, "the fix changes no line of the definitions that run"
    unfixed = Run.of(lambda: execute(before_code, row.run, FLOAT64))
    assert unfixed.out is not None, f"the unfixed excerpt does not run in float64: {unfixed.raised}"
    failures = []
    for mode in MODES:
        before = Run.of(lambda mode=mode: execute(before_code, row.run, mode))
        after = Run.of(lambda mode=mode: execute(after_code, row.run, mode))
        if (before.raised or "").startswith("NotTraced"):
            continue
        why = judge(mode, before, after, unfixed.out, safe)
        if why is not None:
            failures.append(f"{mode.name}: {why}")
    assert failures == []
