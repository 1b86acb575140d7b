"""`amplint trace --hf-config` over transformers model families and heads, the emulated GPU, and
what a failed trace says.

Every model here is a real transformers class built from its config (no weights, no hub); every
emulation gap closed has a model that hit it (see docs/hf-coverage.md for all model types).
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from support import amplint_call  # noqa: E402

from amplint.runtime.child import run_traced  # noqa: E402
from amplint.runtime.hf import build, model_class  # noqa: E402
from amplint.runtime.hf_config import read_config  # noqa: E402
from amplint.runtime.hf_inputs import token_ids  # noqa: E402
from amplint.runtime.target import TargetError  # noqa: E402

QWEN2_7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "torch_dtype": "bfloat16",
}


def _config(tmp_path: Path, data: dict) -> str:
    path = tmp_path / f"{data['model_type']}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def _spec(config: str, **extra: object) -> dict:
    spec = {
        "hf_config": config,
        "layers": 2,
        "seq_len": 64,
        "batch_size": 1,
        "attn_implementation": "eager",
        "device": "cuda",
        "dtype": "bfloat16",
        "autocast": True,
        "param_dtype": None,
    }
    return {**spec, **extra}


def _trace_factory(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    """`amplint trace m.py:factory` on a module with that source."""
    (tmp_path / "m.py").write_text(source, encoding="utf-8")
    return amplint_call(tmp_path, "trace", "m.py:factory")


def _inputs(tmp_path: Path, model_type: str) -> dict:
    config = _config(tmp_path, {"model_type": model_type})
    return build(config, layers=2, seq_len=64, batch_size=1, attn_implementation="eager")[2]


# --- heads and inputs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_type", "head", "main_op"),
    [
        ("t5", "T5ForConditionalGeneration", "embedding"),  # seq2seq: encoder and decoder token ids
        ("bart", "BartForConditionalGeneration", "embedding"),  # an encoder-decoder with a causal head
        ("whisper", "WhisperForConditionalGeneration", "convolution"),  # log-mel input features
        ("vit", "ViTForImageClassification", "convolution"),  # pixel values
        ("clip", "CLIPForImageClassification", "convolution"),
        ("bert", "BertLMHeadModel", "embedding"),
        ("wav2vec2", "Wav2Vec2ForSequenceClassification", "convolution"),  # a raw waveform
        ("speech-encoder-decoder", "SpeechEncoderDecoderModel", "convolution"),  # its encoder's waveform
    ],
)
def test_every_head_gets_the_inputs_it_takes(
    tmp_path: Path, model_type: str, head: str, main_op: str
) -> None:
    config = _config(tmp_path, {"model_type": model_type})
    assert model_class(read_config(config))[1].__name__ == head
    graph = run_traced(_spec(config))
    ops = Counter(node.op for node in graph.nodes)
    assert ops[main_op] > 0 and ops["mm"] + ops["bmm"] + ops["addmm"] > 0
    # The products run in bfloat16 under autocast, whatever the head.
    assert {n.dtype for n in graph.nodes if n.op == "mm"} <= {"bfloat16"}


def test_an_encoder_config_built_as_its_causal_lm_decodes(tmp_path: Path) -> None:
    """Reformer's default config says `is_decoder=False`, which its causal LM head refuses."""
    model, _, kwargs = build(
        _config(tmp_path, {"model_type": "reformer"}), seq_len=64, batch_size=1, attn_implementation="eager"
    )
    assert type(model).__name__ == "ReformerModelWithLMHead" and model.config.is_decoder
    assert set(kwargs) == {"input_ids"}


def test_a_vision_tower_gets_patches_and_their_grid(tmp_path: Path) -> None:
    """A Qwen2-VL-style tower whose main input is left at `input_ids` reads flattened patches."""
    _, _, kwargs = build(
        _config(tmp_path, {"model_type": "glm4v_vision"}),
        seq_len=64,
        batch_size=1,
        attn_implementation="eager",
    )
    assert set(kwargs) == {"hidden_states", "grid_thw"}
    assert kwargs["grid_thw"].tolist() == [[1, 8, 8]] and kwargs["hidden_states"].shape[0] == 64


@pytest.mark.parametrize(
    ("model_type", "shapes"),
    [
        # a codec's waveform has channels; its semantic encoder (w2v-BERT) reads stacked mel frames
        (
            "neucodec",
            {
                "input_values": (1, 1, 64 * 480),
                "input_features": (1, 64, 160),
                "input_features_mask": (1, 64),
            },
        ),
        # a padding indicator (zeros) over the series, and the frequency class
        ("timesfm", {"past_values": (1, 512), "past_values_padding": (1, 512), "freq": (1, 1)}),
        # NaFlex patches, the grid they came from, and a mask over them (ones)
        (
            "siglip2_vision_model",
            {"pixel_values": (1, 256, 768), "spatial_shapes": (1, 2), "pixel_attention_mask": (1, 256)},
        ),
        # text and image in one stream; the text no longer than its 40 positions
        ("vilt", {"input_ids": (1, 40), "pixel_values": (1, 3, 384, 384)}),
        # SAM3 segments what a text prompt names
        ("sam3", {"pixel_values": (1, 3, 1008, 1008), "input_ids": (1, 32)}),
        # the encoder's input of an encoder-decoder that takes `inputs`
        ("speech-encoder-decoder", {"input_values": (1, 64 * 320), "decoder_input_ids": (1, 64)}),
        ("pix2struct", {"flattened_patches": (1, 64, 2 + 768), "decoder_input_ids": (1, 64)}),
        ("pocket_tts_audio_tokenizer_decoder", {"latents": (1, 512, 64)}),  # (batch, hidden, frames)
        ("smolvlm_vision", {"pixel_values": (1, 3, 224, 224)}),  # a tower left at `input_ids`
    ],
)
def test_inputs_the_forward_requires_or_reads_are_made(
    tmp_path: Path, model_type: str, shapes: dict[str, tuple[int, ...]]
) -> None:
    kwargs = _inputs(tmp_path, model_type)
    assert {name: tuple(value.shape) for name, value in kwargs.items()} == shapes
    if model_type == "timesfm":  # nothing padded, the high-frequency class
        assert not kwargs["past_values_padding"].any() and not kwargs["freq"].any()
    if model_type == "siglip2_vision_model":  # one 16 x 16 image, every patch valid
        assert kwargs["spatial_shapes"].tolist() == [[16, 16]] and kwargs["pixel_attention_mask"].all()
    if model_type == "pix2struct":  # each patch's row and column, from 1, then its values
        assert kwargs["flattened_patches"][0, :, :2].tolist() == [
            [r, c] for r in range(1, 9) for c in range(1, 9)
        ]


def test_a_model_class_without_a_forward_is_said_so() -> None:
    """Qwen2.5-Omni's only class joins its thinker, talker and vocoder in `generate`."""
    config = transformers.AutoConfig.for_model("qwen2_5_omni")
    with pytest.raises(
        TargetError,
        match=r"Qwen2_5OmniForConditionalGeneration at \S+modeling_qwen2_5_omni\.py:\d+ only generates",
    ):
        model_class(config)


def test_what_a_forward_cannot_run_without_is_given(tmp_path: Path) -> None:
    # A tower left at the default `input_ids` gets its first required input.
    assert set(_inputs(tmp_path, "idefics3_vision")) == {"pixel_values"}
    # A Q-Former's queries, and the vision states its cross-attention layers read.
    qformer = _inputs(tmp_path, "blip_2_qformer")
    assert qformer["query_embeds"].shape == (1, 64, 768)
    assert qformer["encoder_hidden_states"].shape == (1, 64, 1408)
    # A required prompt; ids of the Q-Former's own vocabulary.
    assert set(_inputs(tmp_path, "grounding-dino")) == {"pixel_values", "input_ids"}
    blip = _inputs(tmp_path, "instructblip")
    assert set(blip) == {"pixel_values", "qformer_input_ids", "input_ids"}
    assert int(blip["qformer_input_ids"].max()) < 30522  # BERT's vocabulary, not OPT's
    # The prompt holds a placeholder for each of the Q-Former's 32 queries, first.
    given = _config(tmp_path, {"model_type": "instructblip", "image_token_index": 32001})
    prompt = build(given, layers=2, seq_len=64, batch_size=1, attn_implementation="eager")[2]["input_ids"]
    assert (prompt[0, :32] == 32001).all() and not (prompt[0, 32:] == 32001).any()
    # Stacked mel frames (80 bins x 7), every frame valid.
    audio = _inputs(tmp_path, "fun_asr_nano_encoder")
    assert audio["input_features"].shape == (1, 64, 560)
    assert audio["input_features_mask"].tolist() == [[1] * 64]
    # A normalised box per token, top-left before bottom-right.
    boxes = _inputs(tmp_path, "bros")["bbox"]
    assert boxes.shape == (1, 64, 4) and boxes.min() >= 0 and boxes.max() <= 1
    assert (boxes[..., 2] >= boxes[..., 0]).all() and (boxes[..., 3] >= boxes[..., 1]).all()


def test_a_class_without_a_forward_is_refused(tmp_path: Path) -> None:
    config = read_config(_config(tmp_path, {"model_type": "bark"}))
    with pytest.raises(
        TargetError,
        match=r"no model class that has a forward \(BarkModel at \S+modeling_bark\.py:\d+ only generates\)",
    ):
        model_class(config)


@pytest.mark.parametrize(
    ("model_type", "main", "shape"),
    [
        ("dac", "input_values", (1, 1, 64 * 512)),  # a codec's extractor gives the channel axis
        ("muse_spark_audio", "input_values", (1, 21120)),  # padded by its extractor, to a multiple of 96
        ("glmasr_encoder", "input_features", (1, 128, 64)),  # its input layer convolves over mel bins
        ("gemma4_audio", "input_features", (1, 64, 128)),  # mel bins its extractor names, not its config
        ("wav2vec2-bert", "input_features", (1, 64, 160)),  # two frames stacked per feature vector
        ("owlvit", "input_ids", (1, 16)),  # as many tokens as the text tower has positions
        ("efficientloftr", "pixel_values", (1, 2, 3, 224, 224)),  # a keypoint matcher's image pair
        ("perceiver", "pixel_values", (1, 3, 56, 56)),  # images, though its config counts frames
        ("sam2", "pixel_values", (1, 3, 1024, 1024)),  # the size its vision backbone names
        ("timesfm2_5", "past_values", (1, 16384)),  # a univariate series has no channel axis
        ("sam3_lite_text_text_model", "input_ids", (1, 64)),  # a text tower under an image base class
    ],
)
def test_inputs_are_laid_out_as_the_model_takes_them(
    tmp_path: Path, model_type: str, main: str, shape: tuple[int, ...]
) -> None:
    kwargs = _inputs(tmp_path, model_type)
    assert tuple(kwargs[main].shape) == shape


def test_a_shrunk_backbone_hands_out_as_many_feature_maps(tmp_path: Path) -> None:
    """ZoeDepth's neck reads blocks 6, 12, 18 and 24 of 24: 2 layers keep 4, one per feature map."""
    backbone = read_config(_config(tmp_path, {"model_type": "zoedepth"}), layers=2).backbone_config
    assert backbone.num_hidden_layers == 4 and backbone.out_indices == [1, 2, 3, 4]
    assert backbone.out_features == backbone.stage_names[1:]
    dinov2 = read_config(_config(tmp_path, {"model_type": "dinov2"}), layers=2)
    assert dinov2.num_hidden_layers == 2 and dinov2.out_features == ["stage2"]


def test_architectures_in_the_config_pick_the_class_and_task_overrides(tmp_path: Path) -> None:
    config = _config(tmp_path, {"model_type": "bert", "architectures": ["BertForSequenceClassification"]})
    assert model_class(read_config(config))[1] is transformers.BertForSequenceClassification
    assert model_class(read_config(config), "masked-lm")[1] is transformers.BertForMaskedLM
    done = amplint_call(None, "trace", "--hf-config", config, "--task", "seq2seq-lm")
    assert done.returncode == 2 and "no seq2seq-lm head for model type 'bert'" in done.stderr


def test_layers_shrink_every_stack(tmp_path: Path) -> None:
    config = read_config(_config(tmp_path, {"model_type": "t5", "num_layers": 6}), layers=2)
    assert config.num_layers == 2 and config.num_decoder_layers == 2
    whisper = read_config(_config(tmp_path, {"model_type": "whisper"}), layers=1)
    assert whisper.encoder_layers == 1 and whisper.decoder_layers == 1


def test_token_ids_follow_a_zipf_law() -> None:
    ids = token_ids(1000, (1, 4096))
    counts = Counter(ids.flatten().tolist())
    assert len(counts) > 100  # never one id repeated
    ranked = [count for _, count in counts.most_common()]
    # Rank 1 is about twice as frequent as rank 2 and ten times rank 10 under 1/(r+1) weights.
    assert ranked[0] > 1.5 * ranked[1] and ranked[0] > 5 * ranked[9]
    assert int(ids.max()) < 1000


# --- emulation gaps, each on the model class that hit it ---------------------------------------


@pytest.mark.parametrize(
    ("model_type", "op"),
    [
        ("mamba", "convolution"),  # a depthwise conv1d over a transposed (non-contiguous) input
        ("deepseek_v3", "copy_"),  # multi-head latent attention copies into a slice of a new tensor
        ("nemotron_h", "bitwise_not"),  # `~mask`
        ("gpt_oss", "bmm"),  # a MoE router that asks for the compute capability
        ("cwm", "mm"),  # a cache that moves a scalar it made on the CPU to the GPU
        ("llava", "mm"),  # a cache made with torch.tensor([], device=...)
        ("sew-d", "addmm"),  # `torch.tensor(k).type_as(x)`: a CPU constant given a fake CUDA tensor's type
        ("rt_detr", "grid_sampler_2d"),  # indexing inside torch's own decomposition of grid_sample
        ("slanet", "_thnn_fused_gru_cell"),  # nn.GRUCell, whose CUDA kernel has no meta function
    ],
)
def test_models_that_hit_an_emulation_gap_trace(tmp_path: Path, model_type: str, op: str) -> None:
    # SLANet decodes up to `max_text_length` (500) table tokens, a GRU step each: a few show the op.
    shorter = {"max_text_length": 3} if model_type == "slanet" else {}
    graph = run_traced(_spec(_config(tmp_path, {"model_type": model_type, **shorter})))
    assert any(node.op == op for node in graph.nodes)


@pytest.mark.parametrize(
    ("model_type", "asked"),
    [
        ("flaubert", "item"),  # `assert lengths.max().item() <= slen`
        ("jetmoe", "item"),  # a MoE router splits the tokens by `expert_size.tolist()`, item by item
        ("superpoint", "nonzero"),  # keypoints where the scores pass a threshold
        ("vilt", "nonzero"),  # `x_mask.nonzero(as_tuple=False)`, then `unique` rows
        ("higgs_audio_v2", "index"),  # `hidden_states[audio_token_mask]`: a boolean mask
        ("encodec", "bool"),  # padding from a convolution's `padding_total`, a buffer its config computes
    ],
)
def test_control_flow_on_values_is_answered_by_a_cpu_run(tmp_path: Path, model_type: str, asked: str) -> None:
    graph = run_traced(_spec(_config(tmp_path, {"model_type": model_type})))
    note = next(note for note in graph.notes if "came from a run on the CPU" in note)
    assert f"({asked} " in note or f", {asked} " in note
    assert len(graph.nodes) > 50


def test_a_text_head_of_a_multimodal_type_is_built_from_its_text_config(tmp_path: Path) -> None:
    model, _, _ = build(
        _config(tmp_path, {"model_type": "qwen3_5"}),
        layers=2,
        seq_len=64,
        batch_size=1,
        attn_implementation="eager",
    )
    assert type(model).__name__ == "Qwen3_5ForCausalLM"
    assert type(model.config).__name__ == "Qwen3_5TextConfig"


def test_a_base_attribute_the_default_config_lacks_is_set_and_said(tmp_path: Path) -> None:
    graph = run_traced(_spec(_config(tmp_path, {"model_type": "t5gemma2_encoder"})))
    assert any("T5Gemma2TextConfig.dropout_rate = 0.0" in note for note in graph.notes), graph.notes


def test_the_emulated_gpu_answers_device_questions(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "import torch\n\n\n"
        "def f(x):\n"
        "    major, _ = torch.cuda.get_device_capability()\n"
        "    name = torch.cuda.get_device_properties(0).name\n"
        "    return x * major if 'V100' in name else x.exp()\n\n\n"
        "def factory():\n    return f, (torch.ones(3),)\n",
        encoding="utf-8",
    )
    on_v100 = run_traced(
        {"target": f"{tmp_path / 'm.py'}:factory", **_spec("", gpu="v100"), "hf_config": None}
    )
    on_a100 = run_traced(
        {"target": f"{tmp_path / 'm.py'}:factory", **_spec("", gpu="a100"), "hf_config": None}
    )
    assert [n.op for n in on_v100.nodes if n.policy != "input"] == ["mul"]
    assert [n.op for n in on_a100.nodes if n.policy != "input"] == ["exp"]
    assert on_v100.gpu == "v100" and on_a100.gpu == "a100"


# --- attention as the GPU runs it ---------------------------------------------------------------


def _attention(graph) -> set[str]:  # type: ignore[no-untyped-def]
    return {node.attention for node in graph.nodes if node.attention is not None}


# Qwen2-7B groups 28 query heads over 4 key/value heads; with no padding mask transformers passes
# `enable_gqa`, which memory-efficient attention does not take (docs/cuda-parity.md): a T4, which
# has no flash attention, runs the math path.
@pytest.mark.parametrize(("gpu", "kernel"), [("a100", "flash"), ("h100", "cudnn"), ("t4", "math")])
def test_causal_sdpa_without_padding_mask_per_gpu(tmp_path: Path, gpu: str, kernel: str) -> None:
    config = _config(tmp_path, {**QWEN2_7B, "num_hidden_layers": 1})  # head size 3584 / 28 = 128
    graph = run_traced(_spec(config, attn_implementation="sdpa", gpu=gpu))
    assert _attention(graph) == {kernel}
    fused = [n for n in graph.nodes if n.op.startswith("_scaled_dot_product")]
    assert {n.dtype for n in fused} == (set() if kernel == "math" else {"bfloat16"})


def test_v100_runs_the_bf16_model_in_float16_and_reports_its_overflow(tmp_path: Path) -> None:
    config = _config(tmp_path, QWEN2_7B)
    done = amplint_call(
        None, "trace", "--hf-config", config, "--gpu", "v100", "--layers", "2", "--seq-len", "64"
    )
    assert done.returncode == 1, done.stderr  # findings
    assert "bfloat16 is not native on a V100 (sm70" in done.stdout
    assert "cuda autocast float16" in done.stdout
    assert "AMP109 attention scores are formed in float16 by `bmm`" in done.stdout
    assert "modeling_qwen2.py" in done.stdout
    # The parameters follow: no bfloat16 op is left in the float16 run.
    data = json.loads(
        amplint_call(
            None,
            "trace",
            "--hf-config",
            config,
            "--gpu",
            "v100",
            "--layers",
            "1",
            "--seq-len",
            "16",
            "--format",
            "json",
        ).stdout
    )
    assert "bfloat16" not in {n["dtype"] for n in data["nodes"]}
    assert data["gpu"] == "v100" and data["notes"]


ASKS_BF16 = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x):
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        h = self.a(x)
        with torch.autocast("cuda", dtype=dtype):
            return self.b(h) + h


def factory():
    return Net(), (torch.randn(2, 16),)
"""


def test_v100_follows_what_torch_answers_the_code_that_asks_for_bf16(tmp_path: Path) -> None:
    """torch answers `is_bf16_supported()` True on a V100 (bf16 is emulated): the code that asks runs
    in bfloat16 there, so the trace does not swap it to float16 (which mixed the two dtypes, AMP104)."""
    (tmp_path / "m.py").write_text(ASKS_BF16, encoding="utf-8")
    graph = run_traced({"target": f"{tmp_path / 'm.py'}:factory", **_spec("", gpu="v100"), "hf_config": None})
    assert {n.dtype for n in graph.nodes if n.op == "addmm"} == {"bfloat16"}
    assert any(f"is_bf16_supported() at {tmp_path / 'm.py'}:12" in note for note in graph.notes), graph.notes
    assert not any(note.startswith("bfloat16 is not native") for note in graph.notes)


# --- errors name the user's code -----------------------------------------------------------------


def test_a_failed_trace_names_the_op_the_line_and_the_module(tmp_path: Path) -> None:
    done = _trace_factory(
        tmp_path,
        "import torch\nfrom torch import nn\n\n\n"
        "class Gate(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x[torch.nonzero(x > 0, as_tuple=True)] if x.is_cuda else x\n\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.gate = Gate()\n\n"
        "    def forward(self, x):\n"
        "        return self.gate(x)\n\n\n"
        "def factory():\n    return Model(), (torch.ones(3),)\n",
    )
    assert done.returncode == 2
    first = done.stderr.splitlines()[0]
    assert "cannot trace torch.nonzero called at" in first and "m.py:7" in first
    assert "(module gate)" in first and "in forward()" in first
    # A CPU run takes the other branch, so it cannot tell the trace which values the GPU path reads.
    assert "x[torch.nonzero(x > 0, as_tuple=True)] if x.is_cuda else x" in done.stderr
    assert "a run on the CPU answered the trace's other questions about values, not this one" in done.stderr


def test_a_cpu_run_that_raises_is_named_beside_the_question(tmp_path: Path) -> None:
    done = _trace_factory(
        tmp_path,
        "import torch\n\n\ndef f(x):\n    n = int(x.sum())\n    return x.view(n + 1, -1)\n\n\n"
        "def factory():\n    return f, (torch.ones(4),)\n",
    )
    assert done.returncode == 2
    assert "m.py:5" in done.stderr.splitlines()[0]  # the question
    assert "a run on the CPU to read those values raised: RuntimeError at " in done.stderr
    assert "m.py:6: shape '[5, -1]' is invalid" in done.stderr  # where and why the CPU run failed


@pytest.mark.parametrize(
    "args",
    [
        ("--seq-len", "-5"),
        ("--seq-len", "x"),
        ("--gpu", "k80"),
        ("--layers", "0"),
        ("--task", "nope"),
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    config = _config(tmp_path, {"model_type": "qwen2"})
    done = amplint_call(None, "trace", "--hf-config", config, *args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len([line for line in done.stderr.splitlines() if "error" in line]) == 1


# --- honest labels -------------------------------------------------------------------------------


def test_only_float_to_float_casts_are_autocasts() -> None:
    from amplint.runtime import trace

    aten = torch.ops.aten

    def f(ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        # Casts torch's own code makes (not a user's `.to`): an index cast, a mask cast, a float cast.
        scale = aten._to_copy.default(ids, dtype=torch.float32)
        keep = aten._to_copy.default(x > 0, dtype=torch.float32)
        return aten._to_copy.default(x * scale * keep, dtype=torch.bfloat16)

    graph = trace(f, (torch.ones(4, dtype=torch.long), torch.randn(4)))
    casts = {(n.input_dtypes[0], n.dtype): n.policy for n in graph.nodes if n.op == "_to_copy"}
    assert casts == {
        ("int64", "float32"): "inherited",
        ("bool", "float32"): "inherited",
        ("float32", "bfloat16"): "autocast_cast",
    }


# --- values: token ids, tied weights, nothing skipped silently ----------------------------------

TINY = {
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "tie_word_embeddings": True,
}


def test_values_with_tied_weights_saved_once(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(
        transformers.Qwen2Config(**{k: v for k, v in TINY.items() if k != "model_type"})
    )
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(tmp_path / "w.safetensors"))  # as transformers saves a tied head: once
    config = _config(tmp_path, TINY)
    (tmp_path / "ids.json").write_text(json.dumps([[1, 5, 9, 3, 7, 2, 8, 4]]), encoding="utf-8")
    args = ["trace", "--hf-config", config, "--values", "--weights", str(tmp_path / "w.safetensors")]
    done = amplint_call(None, *args, "--input-ids", str(tmp_path / "ids.json"), "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    data = json.loads(done.stdout)
    assert data["values"] is not None and data["values_note"] is None
    ids = [n for n in data["nodes"] if n["policy"] == "input" and n["shape"] == [1, 8]]
    assert ids, "the token ids from the file set the sequence length"


def test_values_without_weights_exit_2_and_say_why(tmp_path: Path) -> None:
    done = amplint_call(None, "trace", "--hf-config", _config(tmp_path, TINY), "--values", "--seq-len", "8")
    assert done.returncode == 2
    assert "nothing was replayed" in done.stderr and "--weights" in done.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[[1, 2], [3]]", "different lengths"),
        ("[1, 999]", "outside the vocabulary"),
        ("hello", "not a JSON list"),
    ],
)
def test_bad_input_ids_files_are_named(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "ids.txt").write_text(content, encoding="utf-8")
    done = amplint_call(
        None, "trace", "--hf-config", _config(tmp_path, TINY), "--input-ids", str(tmp_path / "ids.txt")
    )
    assert done.returncode == 2 and message in done.stderr


def test_text_is_tokenized_by_the_tokenizer_beside_the_config(tmp_path: Path) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    words = ["[UNK]", "the", "scores", "overflow", "in", "float16"]
    backend = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]").save_pretrained(
        tmp_path
    )
    config = _config(tmp_path, TINY)
    done = amplint_call(
        None, "trace", "--hf-config", config, "--text", "the scores overflow in float16", "--format", "json"
    )
    assert done.returncode in (0, 1), done.stderr
    assert any(n["policy"] == "input" and n["shape"] == [1, 5] for n in json.loads(done.stdout)["nodes"])
    elsewhere = tmp_path / "bare"
    elsewhere.mkdir()
    done = amplint_call(None, "trace", "--hf-config", _config(elsewhere, TINY), "--text", "hello")
    assert (
        done.returncode == 2 and "--text needs the model's tokenizer saved beside the config" in done.stderr
    )


def test_a_number_read_from_a_fake_cuda_tensor_comes_from_a_cpu_run(tmp_path: Path) -> None:
    done = _trace_factory(
        tmp_path,
        "import torch\n\n\ndef f(x):\n    return x * int(x.sum())\n\n\n"
        "def factory():\n    return f, (torch.ones(3),)\n",
    )
    assert done.returncode == 0, done.stderr
    assert "1 value the model's control flow reads (int 1x) came from a run on the CPU\n" in done.stdout
    assert "not linked" not in done.stderr


@pytest.mark.parametrize("flag", [("--layers", "2"), ("--text", "hello"), ("--task", "base")])
def test_transformers_options_with_a_factory_target_are_refused(
    tmp_path: Path, flag: tuple[str, str]
) -> None:
    (tmp_path / "m.py").write_text("def factory():\n    return None\n", encoding="utf-8")
    done = amplint_call(tmp_path, "trace", "m.py:factory", *flag)
    assert done.returncode == 2 and f"{flag[0]}: only for --hf-config" in done.stderr


def test_a_check_on_input_values_is_skipped_and_noted(tmp_path: Path) -> None:
    """SigLIP2 checks its patch grid with `torch_compilable_check` on a tensor: fake tensors hold no
    values, the check cannot change a dtype, so it is skipped and the note names the model's line."""
    graph = run_traced(_spec(_config(tmp_path, {"model_type": "siglip2_vision_model"})))
    assert (
        Counter(node.op for node in graph.nodes)["bmm"] + Counter(node.op for node in graph.nodes)["mm"] > 0
    )
    (note,) = [n for n in graph.notes if n.startswith("checks on input values skipped")]
    assert "modeling_siglip2.py:" in note


@pytest.mark.parametrize(
    ("model_type", "keys", "shapes"),
    [
        # Shapes only the forward's docstring gives: Decision Transformer's `states`
        # (batch, episode_length, state_dim) and the tensors it lists beside them, though they
        # default to None; the config's state_dim is 17 and act_dim 4.
        (
            "decision_transformer",
            {},
            {
                "states": (1, 64, 17),
                "actions": (1, 64, 4),
                "rewards": (1, 64, 1),
                "returns_to_go": (1, 64, 1),
                "timesteps": (1, 64),
            },
        ),
        # A forecaster's past reaches back its context (24) and its furthest lag (7), the future
        # is its horizon; the time features count the config's, observed flags every value.
        (
            "time_series_transformer",
            {"prediction_length": 24, "context_length": 24, "num_time_features": 1},
            {
                "past_values": (1, 31),
                "past_time_features": (1, 31, 1),
                "past_observed_mask": (1, 31),
                "future_values": (1, 24),
                "future_time_features": (1, 24, 1),
            },
        ),
        # MusicGen's decoder reads one row of ids per codebook (4): (batch * codebooks, length).
        ("musicgen", {}, {"input_ids": (4, 64)}),
        # Kyutai STT sums a text token and one code per codebook (32) at every position.
        ("kyutai_speech_to_text", {}, {"input_ids": (1, 64, 33)}),
        # Granite Speech 5 reads mel frames (80 bins) delta-expanded and stacked in pairs: 4 x 80;
        # Nemotron 3 stacks its frames itself and is given mel frames (128 bins).
        ("granite_speech5_encoder", {}, {"input_features": (1, 64, 320)}),
        ("nemotron3_diarization_audio", {}, {"input_features": (1, 64, 128)}),
        # Dia's decoder reads one code per channel (9) at every position.
        ("dia", {}, {"decoder_input_ids": (1, 64, 9)}),
        # CLAP's audio tower normalises over 64 mel bins: (batch, crops, frames, mel bins).
        ("clap", {}, {"input_ids": (1, 64), "input_features": (1, 1, 64, 64)}),
        # SegGPT stitches a prompt and an input image, each of its processor's 448 x 448.
        ("seggpt", {}, {"pixel_values": (1, 3, 448, 448), "prompt_pixel_values": (1, 3, 448, 448)}),
        # DepthPro's smallest scale (0.25) of a 1536 image still covers its 384-pixel patch.
        ("depth_pro", {}, {"pixel_values": (1, 3, 1536, 1536)}),
        # LXMERT's regions: features and boxes of the widths its config names.
        ("lxmert", {}, {"input_ids": (1, 64), "visual_feats": (1, 64, 2048), "visual_pos": (1, 64, 4)}),
    ],
)
def test_inputs_a_forward_needs_come_from_its_docstring_and_config(
    tmp_path: Path, model_type: str, keys: dict, shapes: dict[str, tuple[int, ...]]
) -> None:
    made = build(
        _config(tmp_path, {"model_type": model_type, **keys}),
        layers=2,
        seq_len=64,
        batch_size=1,
        attn_implementation="eager",
    )[2]
    assert {name: tuple(value.shape) for name, value in made.items() if name in shapes} == shapes


def test_where_image_vectors_go_in_the_text_is_marked(tmp_path: Path) -> None:
    # Kosmos-2 splices its 64 latent queries into the text where its position mask says.
    made = _inputs(tmp_path, "kosmos-2")
    assert int(made["image_embeds_position_mask"].sum()) == 64
    # Gemma 4's tower reads patches with their (x, y); the grid's side is a multiple of its pooling.
    vision = _inputs(tmp_path, "gemma4_vision")
    kernel = transformers.AutoConfig.for_model("gemma4_vision").pooling_kernel_size
    side = int(vision["pixel_position_ids"][0, :, 0].max()) + 1
    assert side % kernel == 0 and vision["pixel_values"].shape[1] == side * side


def test_a_type_whose_class_only_generates_traces_its_first_part(tmp_path: Path) -> None:
    graph = run_traced(_spec(_config(tmp_path, {"model_type": "qwen2_5_omni"})))
    assert any("traced its first part with a forward (thinker_config)" in note for note in graph.notes)


def test_stacks_that_need_more_than_one_block_of_a_kind_build(tmp_path: Path) -> None:
    # Zamba ties its shared attention by a pattern that needs a second hybrid block.
    model = build(
        _config(tmp_path, {"model_type": "zamba"}),
        layers=2,
        seq_len=8,
        batch_size=1,
        attn_implementation="eager",
    )[0]
    assert model.config.layers_block_type.count("hybrid") == 2
    # HRM derives its layer count from the blocks per stack and its cycles: the cache fits it.
    config = read_config(_config(tmp_path, {"model_type": "hrm_text"}), layers=2)
    stacks = transformers.AutoConfig.for_model("hrm_text", num_hidden_layers=2)
    assert config.num_hidden_layers == stacks.num_hidden_layers
    # Gemma 3n's last blocks reuse keys and values: a shrunk stack keeps one of them.
    text = read_config(_config(tmp_path, {"model_type": "gemma3n_text"}), layers=2)
    assert 0 < text.num_kv_shared_layers < text.num_hidden_layers


def test_a_module_converted_inside_the_forward_traces(tmp_path: Path) -> None:
    # Switch Transformers' router casts its classifier to float32 on every call, and names its
    # experts f"expert_{index}" with a 0-d tensor.
    graph = run_traced(_spec(_config(tmp_path, {"model_type": "switch_transformers"})))
    router = [n for n in graph.nodes if (n.module or "").endswith("router.classifier")]
    # Autocast casts the float32 classifier's weight back to bfloat16 for its matmul.
    assert [n.dtype for n in router if n.op == "mm"] == ["bfloat16"] * 2
    assert any(n.op == "_to_copy" and n.input_dtypes == ["float32"] for n in router)


def test_a_large_expert_stack_stands_in_with_real_matrices() -> None:
    from amplint.runtime.oracle import stand_in_weights

    stood = stand_in_weights({"experts": torch.empty(4, 2048, 4096, device="meta")})["experts"]
    # one real matrix broadcast over the stack, which ops that check a matrix's strides accept
    assert stood.shape == (4, 2048, 4096) and stood.stride()[0] == 0 and stood[0].abs().sum() > 0


def test_a_kernel_that_raises_on_fake_tensors_is_said_once(tmp_path: Path) -> None:
    # torch logs the whole traceback of a meta kernel that raises; the message says it once.
    done = _trace_factory(
        tmp_path,
        "import torch\nfrom torch import nn\n\n\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.split([1, 2], dim=-1)\n\n\n"
        "def factory():\n    return Model(), (torch.ones(2, 4),)\n",
    )
    assert done.returncode == 2
    assert "split_with_sizes expects split_sizes to sum exactly to 4" in done.stderr
    assert "m.py:7" in done.stderr.splitlines()[0] and "fake_tensor.py" not in done.stderr


def test_a_drafter_gets_the_keys_and_values_its_target_computed(tmp_path: Path) -> None:
    # Gemma 4's assistant raises without embeddings and the target's keys and values per kind of
    # attention layer; it drafts one position against the target's 64.
    made = _inputs(tmp_path, "gemma4_unified_assistant")
    shared = made["shared_kv_states"]
    assert made["inputs_embeds"].shape[1] == 1 and shared
    assert all(key.shape[2] == 64 and key.shape == value.shape for key, value in shared.values())


def test_a_video_tracker_gets_an_inference_session_made_inside_the_trace(tmp_path: Path) -> None:
    # SAM 2's video model reads an inference session (a frame and a point prompt) the forward's
    # annotation names; made before the trace, its tensors would be real CPU ones.
    graph = run_traced(_spec(_config(tmp_path, {"model_type": "sam2_video"})))
    assert any(node.op == "convolution" and node.dtype == "bfloat16" for node in graph.nodes)


@pytest.mark.parametrize(
    "config_class",
    ["Mamba2Config", "BambaConfig", "FalconH1Config", "GraniteMoeHybridConfig", "NemotronHConfig"],
)
def test_configs_transformers_writes_with_its_float_tags_are_read(tmp_path: Path, config_class: str) -> None:
    """`save_pretrained` writes an infinite `time_step_limit` as `{"__float__": "Infinity"}`."""
    import math

    import transformers

    getattr(transformers, config_class)().save_pretrained(tmp_path)
    assert '"__float__"' in (tmp_path / "config.json").read_text(encoding="utf-8")
    config = read_config(str(tmp_path / "config.json"), layers=2)
    assert math.inf in tuple(config.time_step_limit)
