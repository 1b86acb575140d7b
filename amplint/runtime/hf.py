"""A transformers model built from a config JSON alone (no weights, no hub access), with the inputs
its head takes.

The class is the config's `architectures` entry when it names one transformers has, else the first
head the model type has among: causal LM, seq2seq LM, speech seq2seq, image classification, audio
classification, the base model (an encoder-decoder config tries seq2seq first). `task` overrides.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeGuard
from unittest import mock

from amplint.runtime.target import TargetError, user_frame

# task -> the auto mapping of transformers.models.auto.modeling_auto that names its classes.
TASKS: dict[str, str] = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "seq2seq-lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "speech-seq2seq": "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "audio-classification": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "base": "MODEL_MAPPING_NAMES",
}
_ORDER = ("causal-lm", "seq2seq-lm", "speech-seq2seq", "image-classification", "audio-classification", "base")
_ENCODER_DECODER_ORDER = ("seq2seq-lm", "speech-seq2seq", *_ORDER)
# Config keys that count the blocks of a stack, and per-block lists that must shrink with them.
_LAYER_COUNTS = frozenset(
    {
        "num_hidden_layers",
        "num_layers",
        "n_layer",
        "n_layers",
        "num_encoder_layers",
        "num_decoder_layers",
        "encoder_layers",
        "decoder_layers",
        "num_blocks",
    }
)
_PER_LAYER = ("layer_types", "layers_block_type", "block_types")
_INDEX_LISTS = frozenset({"mlp_only_layers", "attn_layer_indices", "full_attn_idxs", "hybrid_layer_ids"})
DEFAULT_IMAGE_SIZE = 224


def read_config(config_path: str, *, layers: int | None = None) -> Any:
    """The transformers config a JSON file describes; `layers`: keep that many blocks of every stack."""
    try:
        import transformers
    except ImportError:
        raise TargetError("--hf-config needs transformers: pip install 'amplint[hf]'") from None
    try:
        data = json.loads(Path(config_path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise TargetError(f"cannot read {config_path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise TargetError(f"{config_path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise TargetError(f'{config_path}: a transformers config needs a "model_type" key')
    model_type = data.pop("model_type")
    try:
        config = transformers.AutoConfig.for_model(model_type, **data)
    except Exception as exc:  # a config class that rejects the values, said with its line
        raise TargetError(f"{config_path}: transformers cannot read it{_at(exc)}: {_reason(exc)}") from None
    if layers is not None:
        shrink(config, layers)
    return config


def shrink(config: Any, layers: int) -> None:
    """Keep about `layers` blocks in every stack of `config` and its sub-configs (in place). A
    hybrid stack keeps one block of each kind it has (attention, linear attention, MoE, ...), so
    the trace still meets every kind."""
    from transformers import PretrainedConfig

    seen: set[int] = set()

    def visit(node: Any) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        fields = vars(node)
        for value in list(fields.values()):
            if isinstance(value, PretrainedConfig):
                visit(value)
        # In a staged vision backbone `num_layers` counts the stages (`depths` holds their blocks).
        staged = isinstance(fields.get("depths"), (list, tuple))
        counts = {
            k: v
            for k, v in fields.items()
            if k in _LAYER_COUNTS and type(v) is int and v > layers and not (staged and k == "num_layers")
        }
        for total in set(counts.values()):
            keep = _kept_blocks(fields, total, layers)
            for key, value in counts.items():
                if value == total:
                    setattr(node, key, len(keep))
            _renumber(node, fields, total, keep)
        depths = fields.get("depths")
        if isinstance(depths, (list, tuple)):  # stages of a vision backbone
            node.depths = type(depths)(min(d, layers) if isinstance(d, int) else d for d in depths)

    visit(config)


def _kept_blocks(fields: dict[str, Any], total: int, layers: int) -> list[int]:
    """Which of `total` blocks to keep: the first `layers` (at least one per feature map a backbone
    hands out: a neck reads as many as the full backbone gives), and the first of each kind a
    per-block list (`layer_types`) names."""
    keep = set(range(max(layers, sum(1 for stage in _out_stages(fields, total) if stage))))
    for key in _PER_LAYER:
        kinds = fields.get(key)
        if isinstance(kinds, (list, tuple)) and len(kinds) == total:
            firsts: dict[object, int] = {}
            for index, kind in enumerate(kinds):
                firsts.setdefault(kind if not isinstance(kind, list) else tuple(kind), index)
            keep |= set(firsts.values())
    return sorted(keep)


def _out_stages(fields: dict[str, Any], total: int) -> list[int]:
    """The stages a backbone of `total` blocks hands out (0: its stem, i: block i - 1's output)."""
    stages, out = fields.get("stage_names"), fields.get("_out_indices")
    if not (isinstance(stages, list) and len(stages) == total + 1 and isinstance(out, list)):
        return []
    return [i % len(stages) for i in out]


def _renumber(node: Any, fields: dict[str, Any], total: int, keep: list[int]) -> None:
    """Per-block lists keep the kept blocks' entries; lists of block indices are renumbered; a
    period (`attn_layer_period`) longer than the stack shrinks to it, where no per-block list
    names the kinds."""
    position = {old: new for new, old in enumerate(keep)}
    out = _out_stages(fields, total)
    if out:  # a backbone's stages: the stem, then one per block; the kept ones keep their names
        node.stage_names = fields["stage_names"][:1] + [fields["stage_names"][i + 1] for i in keep]
        # Its feature maps come from the last kept blocks, in order; the stem stays the stem.
        last = iter(range(len(keep) + 1 - sum(1 for stage in out if stage), len(keep) + 1))
        node.out_indices = [stage and next(last) for stage in out]
    for key, value in list(fields.items()):
        if not isinstance(value, (list, tuple)) or (out and key in ("_out_indices", "_out_features")):
            continue
        if len(value) == total and key not in _INDEX_LISTS:
            setattr(node, key, type(value)(value[i] for i in keep))
        elif (key in _INDEX_LISTS or key.endswith(("_ids", "_idxs", "_indices"))) and all(
            type(i) is int and 0 <= i < total for i in value
        ):
            setattr(node, key, type(value)(position[i] for i in value if i in position))
    if any(isinstance(fields.get(key), (list, tuple)) for key in _PER_LAYER):
        return  # the per-block list says which block is which; a period would contradict it
    for key, value in list(fields.items()):
        if key.endswith("_period") and type(value) is int and value > len(keep):
            setattr(node, key, len(keep))
            offset = key.removesuffix("_period") + "_offset"
            if type(fields.get(offset)) is int:
                setattr(node, offset, fields[offset] % len(keep))


def model_class(config: Any, task: str | None = None) -> tuple[str, type]:
    """The task and transformers class to build for `config`."""
    import transformers
    from transformers.models.auto import modeling_auto

    model_type = config.model_type
    if task is None:
        for name in getattr(config, "architectures", None) or ():
            cls = getattr(transformers, name, None)
            if _runs(cls):
                return "architectures", cls
    order = (task,) if task else (_ENCODER_DECODER_ORDER if config.is_encoder_decoder else _ORDER)
    mappings = [(candidate, TASKS[candidate]) for candidate in order]
    if task is None:  # a model type with another head only (retrieval, detection, depth, ...)
        others = sorted(
            n for n in dir(modeling_auto) if n.startswith("MODEL_FOR_") and n.endswith("_MAPPING_NAMES")
        )
        mappings += [(n.removeprefix("MODEL_FOR_").removesuffix("_MAPPING_NAMES").lower(), n) for n in others]
    only_generate: type | None = None
    for candidate, mapping in mappings:
        name = getattr(modeling_auto, mapping).get(model_type)
        if isinstance(name, (list, tuple)):
            name = name[0]
        cls = getattr(transformers, name, None) if name else None
        if _runs(cls):
            return candidate, cls
        only_generate = cls if isinstance(cls, type) else only_generate
    wanted = f"no {task} head" if task else "no model class"
    if only_generate is not None:
        wanted += f" that has a forward ({_defined(only_generate)} only generates)"
    raise TargetError(f"transformers has {wanted} for model type {model_type!r}")


def _defined(cls: type) -> str:
    """`Name at file:line`, where the class is defined: the line of the model a message points at."""
    try:
        return f"{cls.__name__} at {inspect.getsourcefile(cls)}:{inspect.getsourcelines(cls)[1]}"
    except (OSError, TypeError):
        return cls.__name__


def _runs(cls: Any) -> TypeGuard[type]:
    """Whether `cls` is a model class with a forward: a composite that only generates (Qwen2.5-Omni
    joins its thinker, talker and vocoder in `generate`) keeps nn.Module's, which raises."""
    import torch

    # Read without the class's attribute hooks: a class whose backend is missing raises on any other.
    return (
        isinstance(cls, type) and inspect.getattr_static(cls, "forward", None) is not torch.nn.Module.forward
    )


def build(
    config_path: str,
    *,
    task: str | None = None,
    layers: int | None = None,
    seq_len: int,
    batch_size: int,
    image_size: int | None = None,
    attn_implementation: str,
    input_ids: str | None = None,
    text: str | None = None,
) -> tuple[Any, tuple[()], dict[str, Any]]:
    """The model for the config on the meta device, and inputs its forward takes; `input_ids`: a
    file of token ids to use instead of drawn ones (see `read_token_ids`); `text`: a text to
    tokenize with the tokenizer saved beside the config."""
    import torch

    config = read_config(config_path, layers=layers)
    found, cls = model_class(config, task)
    text_config = getattr(config, "text_config", None)
    # Read without the class's attribute hooks: a class whose backend is missing raises on any other.
    wanted = inspect.getattr_static(cls, "config_class", None)
    if wanted is not None and not isinstance(config, wanted) and isinstance(text_config, wanted):
        config = (
            text_config  # a text-only head of a multimodal type (Qwen3.5's causal LM) reads its text config
        )
    if found == "causal-lm" and getattr(config, "is_decoder", None) is False:
        config.is_decoder = True  # an encoder's config (BERT, Reformer) built as the causal LM it has
    filled: list[str] = []
    while True:
        try:
            with torch.device("meta"):
                model = cls._from_config(config, attn_implementation=attn_implementation)  # type: ignore[attr-defined]
            break
        except Exception as exc:  # whatever the model's constructor raises, said with its line
            if _fill_base_default(config, exc, filled):
                continue
            raise TargetError(
                f"{config_path}: transformers cannot build {cls.__name__} from it{_at(exc)}: {_reason(exc)}"
            ) from None
    model.config.amplint_filled = filled  # said in the trace's notes
    model.eval()
    kwargs = inputs(model, seq_len=seq_len, batch_size=batch_size, image_size=image_size)
    if input_ids is not None or text is not None:
        if "input_ids" not in kwargs:
            raise TargetError(f"{cls.__name__} reads {model.main_input_name}, not token ids")
        vocab = model.get_input_embeddings().num_embeddings
        if input_ids is not None:
            kwargs["input_ids"] = read_token_ids(input_ids, vocab=vocab)
        else:
            kwargs["input_ids"] = tokenize(str(text), Path(config_path).parent, vocab=vocab)
    return model, (), kwargs


# What every transformers 4 config had (its base class set them), which some default configs of
# transformers 5 lack while their models still read them: set, and said, when building stops on one.
_BASE_DEFAULTS: dict[str, Any] = {
    "pad_token_id": None,
    "bos_token_id": None,
    "eos_token_id": None,
    "dropout": 0.0,
    "dropout_rate": 0.0,
    "attention_dropout": 0.0,
}
_MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")


def _fill_base_default(config: Any, exc: Exception, filled: list[str]) -> bool:
    """Set the base-config attribute whose absence `exc` reports, on the (sub-)config that lacks
    it; False when `exc` is about something else or that attribute was set already."""
    missing = _MISSING.search(str(exc)) if isinstance(exc, AttributeError) else None
    owner = next((c for c in _configs(config) if type(c).__name__ == missing[1]), None) if missing else None
    if missing is None or owner is None:
        return False
    name = missing[2]
    said = f"{missing[1]}.{name} = {_BASE_DEFAULTS.get(name)!r}"
    if name not in _BASE_DEFAULTS or said in filled:
        return False
    setattr(owner, name, _BASE_DEFAULTS[name])
    filled.append(said)
    return True


def with_real_buffers(model: Any) -> Any:
    """The model built again from its config with its parameters on the meta device (no memory, no
    initialisation) and everything else real on the CPU: the buffers and tensors a config computes
    when the model is built (rotary frequencies, a convolution's padding) hold their values, for a
    run on the CPU that answers a trace's questions about values (`amplint.runtime.oracle`)."""
    with _parameters_on_meta():
        rebuilt = type(model)._from_config(
            model.config, attn_implementation=model.config._attn_implementation
        )
    return rebuilt.eval()


@contextmanager
def _parameters_on_meta() -> Iterator[None]:
    import torch

    register = torch.nn.Module.register_parameter

    def on_meta(module: Any, name: str, parameter: Any) -> None:
        register(module, name, parameter)
        if parameter is not None and not parameter.is_meta:
            kind = type(parameter)
            extra = {k: v for k, v in vars(parameter).items() if k != "requires_grad"}
            module._parameters[name] = kind(
                parameter.to("meta"), requires_grad=parameter.requires_grad, **extra
            )

    with mock.patch.object(torch.nn.Module, "register_parameter", on_meta):
        yield


def labels(model: Any, kwargs: dict[str, Any]) -> Any:
    """Random next-token labels for a language model's loss (`amplint trace --backward`): one per
    token its logits cover (the decoder's for an encoder-decoder), drawn uniformly from the
    vocabulary of its output embedding; None for a model without one (a classifier, an encoder)."""
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    tokens = kwargs.get("decoder_input_ids", kwargs.get("input_ids"))
    if not isinstance(weight, torch.Tensor) or not isinstance(tokens, torch.Tensor):
        return None
    generator = torch.Generator().manual_seed(2)
    return torch.randint(weight.shape[0], tuple(tokens.shape), generator=generator)


def tokenize(text: str, directory: Path, *, vocab: int) -> Any:
    """`text` as token ids, by the tokenizer saved in `directory` (a model's directory)."""
    import transformers

    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError, TypeError) as exc:
        raise TargetError(
            f"--text needs the model's tokenizer saved beside the config in {directory}: {_reason(exc)}"
        ) from None
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    if ids.numel() == 0:
        raise TargetError("--text: the tokenizer made no tokens of that text")
    if int(ids.max()) >= vocab:
        raise TargetError(
            f"--text: the tokenizer's ids reach {int(ids.max())}, past the model's vocabulary ({vocab})"
        )
    return ids


def read_token_ids(path: str, *, vocab: int) -> Any:
    """Token ids from a file: a JSON list of ids (or of equally long lists, one per sequence), or
    ids separated by white space (one sequence per line)."""
    import torch

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TargetError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = [[int(token) for token in line.split()] for line in text.splitlines() if line.strip()]
        except ValueError:
            raise TargetError(f"{path}: not a JSON list of token ids nor ids separated by spaces") from None
    if isinstance(data, list) and data and all(isinstance(i, int) for i in data):
        data = [data]
    rows = data if isinstance(data, list) else []
    if not rows or not all(
        isinstance(row, list) and row and all(type(i) is int for i in row) for row in rows
    ):
        raise TargetError(f"{path}: expected a non-empty list of token ids, or of lists of them")
    if len({len(row) for row in rows}) != 1:
        raise TargetError(f"{path}: the sequences have different lengths")
    bad = [i for row in rows for i in row if not 0 <= i < vocab]
    if bad:
        raise TargetError(f"{path}: token id {bad[0]} is outside the vocabulary (0..{vocab - 1})")
    return torch.tensor(rows, dtype=torch.long)


def _at(exc: BaseException) -> str:
    frame = user_frame(exc)
    return f" (at {frame.filename}:{frame.lineno} in {frame.name}())" if frame else ""


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:400] or type(exc).__name__


def _sub(config: Any, *names: str) -> Any:
    """The first sub-config named, else the config itself."""
    for name in names:
        sub = getattr(config, name, None)
        if sub is not None and not isinstance(sub, (dict, str, int)):
            return sub
    return config


def _configs(config: Any) -> Iterator[Any]:
    """The config and its sub-configs, depth first."""
    from transformers import PretrainedConfig

    yield config
    for sub in vars(config).values():
        if isinstance(sub, PretrainedConfig):
            yield from _configs(sub)


def _find(config: Any, key: str) -> Any:
    """`key` of the config, else of the first sub-config that sets it (a codec's `hop_length` is
    on its acoustic model's config)."""
    return next((value for sub in _configs(config) if (value := getattr(sub, key, None)) is not None), None)


def _size(value: Any, given: int | None) -> tuple[int, int]:
    if given is not None:
        return given, given
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) >= 2:
        return int(value[-2]), int(value[-1])
    if isinstance(value, dict) and "height" in value:
        return int(value["height"]), int(value["width"])
    return DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE


def _pixels(
    config: Any, batch_size: int, image_size: int | None, video: bool = False, still: bool = False
) -> Any:
    """Images (batch, channels, height, width); a video model's clips have frames after the batch
    (`video`, or frames counted in the config of a model not `still`)."""
    import torch

    vision = _sub(config, "vision_config", "image_config", "backbone_config", "encoder")
    channels = getattr(vision, "num_channels", None) or 3
    # TVP: the side its visual prompt pads to, and its clips' length, are on the model's config;
    # SAM 2 keeps its image size in the vision tower's backbone.
    side = _find(vision, "image_size") or getattr(config, "max_img_size", None)
    height, width = _size(side, image_size)
    frames = getattr(vision, "num_frames", None) or getattr(config, "num_frames", None)
    if video or (frames and not still):
        return torch.randn(batch_size, frames or 8, channels, height, width)
    return torch.randn(batch_size, channels, height, width)


def _patches(config: Any, parameters: Any) -> dict[str, Any]:
    """Inputs of a vision tower that takes flattened patches and their grid (Qwen2-VL style):
    one image of 8 x 8 patches, each patch channels x temporal x size x size values."""
    import torch

    vision = _sub(config, "vision_config")
    size = getattr(vision, "patch_size", None) or 14
    temporal = getattr(vision, "temporal_patch_size", None) or 1
    channels = next(
        (getattr(vision, k) for k in ("in_channels", "in_chans", "num_channels") if getattr(vision, k, None)),
        3,
    )
    values = "hidden_states" if "hidden_states" in parameters else "pixel_values"
    grid = "grid_thw" if "grid_thw" in parameters else "image_grid_thw"
    return {
        values: torch.randn(64, channels * temporal * size * size),
        grid: torch.tensor([[1, 8, 8]]),
    }


def _spatial_patches(config: Any, batch_size: int) -> dict[str, Any]:
    """Inputs of a vision tower that takes a batch of flattened patch sequences and the grid each
    came from (SigLIP2's NaFlex): a square image that fills its `num_patches`."""
    import torch

    vision = _sub(config, "vision_config")
    size = getattr(vision, "patch_size", None) or 16
    channels = getattr(vision, "num_channels", None) or 3
    side = math.isqrt(getattr(vision, "num_patches", None) or 256)
    return {
        "pixel_values": torch.randn(batch_size, side * side, channels * size * size),
        "spatial_shapes": torch.tensor([[side, side]] * batch_size),
    }


def _flattened_patches(config: Any, batch_size: int, seq_len: int) -> Any:
    """Pix2Struct's patches: each row holds its patch's row and column (numbered from 1, as its
    processor does) and then its values; a square grid of about `seq_len` patches."""
    import torch

    vision = _sub(config, "vision_config")
    side = max(1, math.isqrt(seq_len))
    rows, columns = torch.meshgrid(torch.arange(1, side + 1), torch.arange(1, side + 1), indexing="ij")
    places = torch.stack([rows.flatten(), columns.flatten()], dim=-1).float().expand(batch_size, -1, -1)
    values = torch.randn(batch_size, side * side, vision.patch_embed_hidden_size)
    return torch.cat([places, values], dim=-1)


def _features(model: Any, batch_size: int, seq_len: int) -> tuple[Any, tuple[int, int]]:
    """Audio features and the (batch, frames) of their mask."""
    import torch

    config = model.config
    audio = _sub(config, "audio_config", "encoder_config", "encoder")
    mel = _find(audio, "num_mel_bins")
    weighted = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Linear)
    first = next((m for m in model.modules() if isinstance(m, weighted)), None)  # its input layer
    if mel is not None and isinstance(first, torch.nn.Conv1d) and first.in_channels == mel:
        # The input layer convolves over mel bins (Whisper): (batch, mel bins, frames), exactly 2
        # frames per position where the positions are learned.
        positions = getattr(audio, "max_source_positions", None)
        frames = 2 * positions if positions else seq_len
        return torch.randn(batch_size, mel, frames), (batch_size, frames)
    # conformer encoders, Speech2Text, w2v-BERT (two mel frames stacked, also a codec's semantic
    # encoder) and FunASR (`input_size`: seven stacked): (batch, frames, features)
    per_channel = getattr(audio, "input_feat_per_channel", None)  # Speech2Text
    features = (
        getattr(audio, "input_size", None)
        or _find(audio, "feature_projection_input_dim")
        or mel
        or (per_channel and per_channel * (getattr(audio, "input_channels", None) or 1))
        or getattr(_feature_extractor(config), "feature_size", None)  # Gemma 4's names no mel bins
        or 80
    )
    return torch.randn(batch_size, seq_len, features), (batch_size, seq_len)


def _feature_extractor(config: Any) -> Any:
    """The feature extractor of the config's model type with its default settings, else of a model
    type of the same transformers module (`pe_audio_encoder` is `pe_audio`'s); None when there is
    none, or it needs a package that is not installed."""
    from transformers.models.auto import feature_extraction_auto as auto
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    names = auto.FEATURE_EXTRACTOR_MAPPING_NAMES
    module = type(config).__module__.split(".")[-2]
    name = names.get(config.model_type) or next(
        (n for t, n in names.items() if model_type_to_module_name(t) == module), None
    )
    try:
        return auto.feature_extractor_class_from_name(name)() if name else None
    except ImportError:
        return None


def _waveform(config: Any, batch_size: int, seq_len: int) -> Any:
    """Raw audio, one sample per stride of the encoder: (batch, samples) for a feature encoder
    (wav2vec2), (batch, channels, samples) for a codec, whose strided convolutions (its
    `downsampling_ratios`) read channels; a spectrogram transformer's (batch, frames, mel bins)."""
    import torch

    audio = _sub(config, "audio_config", "encoder_config", "encoder")
    mel, frames = getattr(audio, "num_mel_bins", None), getattr(audio, "max_length", None)
    if mel and frames:
        return torch.randn(batch_size, frames, mel)
    ratios = _find(audio, "downsampling_ratios") or _find(audio, "upsampling_ratios")
    stride = _find(audio, "hop_length") or math.prod(ratios or getattr(audio, "conv_stride", None) or (320,))
    channels = getattr(audio, "audio_channels", None) or (
        (getattr(audio, "channels", None) or 1) if ratios else None
    )
    samples = seq_len * stride
    if channels is not None:
        return torch.randn(batch_size, channels, samples)
    # Nothing in the config says whether the waveform has a channel axis, or what length the model
    # needs (a multiple of its frame): the model's own feature extractor lays it out and pads it.
    extractor = _feature_extractor(config)
    if extractor is None or not hasattr(extractor, "sampling_rate"):
        return torch.randn(batch_size, samples)
    waves = [torch.randn(samples).numpy() for _ in range(batch_size)]
    extracted = extractor(waves, sampling_rate=extractor.sampling_rate, return_tensors="pt")
    return extracted["input_values"] if "input_values" in extracted else torch.randn(batch_size, samples)


def token_ids(vocab: int, shape: tuple[int, ...], seed: int = 0) -> Any:
    """Token ids drawn from a Zipf law over the vocabulary (rank r has weight 1/(r+1)), as text
    tokens are: a few ids are frequent, most are rare. Never all one id."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    weights = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    count = math.prod(shape)
    return torch.multinomial(weights, count, replacement=True, generator=generator).reshape(shape)


class _Inputs:
    """Tensors for forward parameters, made by name and shaped by the config, with the
    (batch, positions) of each sequence made, for a mask over it."""

    def __init__(self, model: Any, *, seq_len: int, batch_size: int, image_size: int | None) -> None:
        config = model.config
        self.model, self.config = model, config
        self.seq_len, self.batch_size, self.image_size = seq_len, batch_size, image_size
        self.text = _sub(config, "text_config", "decoder")
        self.vocab = getattr(self.text, "vocab_size", None) or getattr(config, "vocab_size", None) or 32
        # A text no longer than the text model has positions for (ViLT and SAM3 have 40 and 32).
        limit = getattr(self.text, "max_position_embeddings", None)
        self.length = min(seq_len, limit) if type(limit) is int and limit > 0 else seq_len
        self.kwargs: dict[str, Any] = {}
        self.positions: dict[str, tuple[int, ...]] = {}

    def add(self, name: str) -> bool:
        """Make the input `name`; False for a name it does not know."""
        import torch

        config, batch, length = self.config, self.batch_size, self.seq_len
        hidden = getattr(self.text, "hidden_size", None) or getattr(config, "hidden_size", None)
        # a prompt of the length the config gives (OneFormer's task: `task_inputs`, `task_seq_len`)
        prompt = (
            getattr(config, name.removesuffix("inputs") + "seq_len", None)
            if name.endswith("_inputs")
            else None
        )
        positions: tuple[int, ...] | None = None
        if name in ("pixel_values", "pixel_values_videos") or name.endswith("_pixel_values"):
            from transformers.models.auto import modeling_auto as auto

            # An image classifier takes images where its config counts frames for other heads
            # (Perceiver); a keypoint matcher takes a pair of images.
            classifiers = auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES.get(config.model_type, ())
            still = type(self.model).__name__ in (
                (classifiers,) if isinstance(classifiers, str) else classifiers
            )
            value = _pixels(config, batch, self.image_size, video=name == "pixel_values_videos", still=still)
            if config.model_type in auto.MODEL_FOR_KEYPOINT_MATCHING_MAPPING_NAMES:
                value = torch.stack((value, torch.randn_like(value)), dim=1)
        elif name == "input_ids":
            value = token_ids(self.vocab, (batch, self.length))
            positions = (batch, self.length)
        elif type(prompt) is int:
            value = token_ids(self.vocab, (batch, prompt))
        elif name == "input_features":
            value, positions = _features(self.model, batch, length)
        elif name == "input_values":
            value = _waveform(config, batch, length)
        elif name == "past_values":  # a time series: (batch, context), then channels where it has several
            context = getattr(config, "context_length", None) or length
            channels = getattr(config, "num_input_channels", None)
            value = torch.randn(batch, context) if channels is None else torch.randn(batch, context, channels)
            positions = (batch, context)
        elif name.endswith("_embeds") and hidden:  # vectors of the model's width (a Q-Former's queries)
            value, positions = torch.randn(batch, length, hidden), (batch, length)
        elif name.endswith("_input_ids"):  # ids of a sub-model's own vocabulary (InstructBLIP's Q-Former)
            sub_vocab = getattr(
                getattr(config, name.removesuffix("input_ids") + "config", None), "vocab_size", None
            )
            if not sub_vocab:
                return False
            value, positions = token_ids(sub_vocab, (batch, self.length)), (batch, self.length)
        elif name == "latents" and hidden:  # what an audio codec's decoder decodes: (batch, hidden, frames)
            value, positions = torch.randn(batch, hidden, length), (batch, length)
        elif name == "flattened_patches":
            value = _flattened_patches(config, batch, length)
        elif name == "freq":  # TimesFM's frequency class: 0 (high), what its forecaster uses when not told
            value = torch.zeros(batch, 1, dtype=torch.long)
        elif name.endswith(("_mask", "_padding")):
            # A mask over a sequence made, every position valid: ones; a padding indicator: zeros.
            stem = name.removesuffix("_mask").removesuffix("_padding").removesuffix("_attention")
            over = next((k for k in self.positions if k == stem or k.startswith(stem + "_")), None)
            if over is None:
                return False
            value = (torch.zeros if name.endswith("_padding") else torch.ones)(
                self.positions[over], dtype=torch.long
            )
        else:
            return False
        self.kwargs[name] = value
        if positions is not None:
            self.positions[name] = positions
        return True


def _required(parameters: Any) -> list[str]:
    """The forward's parameters that have no default."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [name for name, p in parameters.items() if p.default is p.empty and p.kind in kinds]


def _main_inputs(model: Any, parameters: Any) -> list[str]:
    """The inputs the model names as its main ones. An encoder-decoder that takes `inputs` reads
    its encoder's; a tower whose class keeps its parent model's main input name (a vision tower
    left at `input_ids`) reads the first input its forward requires."""
    main = getattr(model, "main_input_name", "input_ids")
    names = [main] if isinstance(main, str) else list(main)
    encoder: str = getattr(getattr(model, "encoder", None), "main_input_name", "")
    if names == ["inputs"] and encoder in parameters:
        return [encoder]
    if names == ["inputs"] and "pixel_values" in parameters:  # Perceiver's `inputs` of any modality, named
        return ["pixel_values"]
    if names[0] in parameters:
        return names
    # A text tower under an image base class (SAM3's) takes token ids, whatever the class says.
    return _required(parameters)[:1] or (["input_ids"] if "input_ids" in parameters else names)


def _placeholders(config: Any, *kinds: str) -> bool:
    """Whether the config (or a sub-config) names a token that stands for an image (or another
    kind) in the text, where the model splices that input in."""
    keys = [f"{kind}_token_{suffix}" for kind in kinds for suffix in ("id", "index")]
    return any(hasattr(sub, key) for sub in _configs(config) for key in keys)


def inputs(model: Any, *, seq_len: int, batch_size: int, image_size: int | None = None) -> dict[str, Any]:
    """Keyword inputs for `model.forward`: its main input, the other inputs its forward requires,
    and a second modality it reads beside the main one, shaped by its config."""
    import torch

    config = model.config
    parameters = inspect.signature(model.forward).parameters
    main = _main_inputs(model, parameters)
    made = _Inputs(model, seq_len=seq_len, batch_size=batch_size, image_size=image_size)
    patch_grid = "grid_thw" in parameters or "image_grid_thw" in parameters
    if patch_grid and (main[0] != "input_ids" or "input_ids" not in parameters):  # a vision tower
        made.kwargs.update(_patches(config, parameters))
    elif "spatial_shapes" in parameters and main[0] == "pixel_values":
        made.kwargs.update(_spatial_patches(config, batch_size))
        made.positions["pixel_values"] = tuple(made.kwargs["pixel_values"].shape[:2])
    else:
        known = [name for name in main if made.add(name)]
        declared = getattr(model, "main_input_name", None)
        if not known and isinstance(declared, str):  # an input it does not know: the one the class names
            made.add(declared)
        if not made.kwargs:  # else token ids, as most models read
            made.add("input_ids")
    # A model that reads a second modality beside its main one and does not splice it into the
    # text at placeholder tokens (a CLIP-like dual encoder, ViLT, TVP; SAM3's text prompt) reads both.
    towers = ("vision_config", "image_config", "backbone_config")
    images = any(_sub(config, key) is not config for key in towers) or hasattr(config, "image_size")
    if (
        main == ["input_ids"]
        and "pixel_values" in parameters
        and images
        and not _placeholders(config, "image")
    ):
        made.add("pixel_values")
    text = _sub(config, "text_config") is not config and not _placeholders(config, "image", "video")
    if main[0].startswith("pixel_values") and "input_ids" in parameters and text:
        made.add("input_ids")
    for name in _required(parameters):
        if name not in made.kwargs:
            made.add(name)
    if "input_features" in made.kwargs and "input_features_mask" in parameters:
        made.add("input_features_mask")  # audio encoders count frames from it, optional or not
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in parameters:
        made.kwargs["decoder_input_ids"] = token_ids(made.vocab, (batch_size, seq_len), seed=1)
    attended = getattr(config, "encoder_hidden_size", None)
    if attended and "encoder_hidden_states" in parameters and "encoder_hidden_states" not in made.kwargs:
        # A cross-attending stack whose config names the width of what it attends to (BLIP-2's
        # Q-Former over the vision tower's output) cannot run its cross-attention layers without it.
        made.kwargs["encoder_hidden_states"] = torch.randn(batch_size, seq_len, attended)
    if "bbox" in parameters and not hasattr(config, "max_2d_position_embeddings"):
        # A layout model reads a box per token. Where the config embeds integer coordinates
        # (`max_2d_position_embeddings`) families read different scales (LayoutLM a 0..1000 grid,
        # UDOP [0, 1]), so their own default stands; Bros has none and reads [0, 1].
        made.kwargs["bbox"] = _boxes(batch_size, seq_len)
    return made.kwargs


def _boxes(batch_size: int, seq_len: int) -> Any:
    """A box (x0, y0, x1, y1) per token, normalised to [0, 1], top-left before bottom-right."""
    import torch

    generator = torch.Generator().manual_seed(4)
    xs, ys = (torch.rand(batch_size, seq_len, 2, generator=generator).sort(-1).values for _ in range(2))
    return torch.stack([xs[..., 0], ys[..., 0], xs[..., 1], ys[..., 1]], dim=-1)


def materialize_buffers(model: Any) -> None:
    """Give the buffers a config computes (rotary `inv_freq`, not in a checkpoint) real values on
    the CPU, for a model built on the meta device whose weights were loaded: each module holding
    such a buffer is built again from the model's config (one that cannot be stays on meta, and the
    values replay says that the model has no weights)."""
    import torch

    for module in model.modules():
        if not any(buffer.is_meta for buffer in module.buffers(recurse=False)):
            continue
        try:
            with torch.device("cpu"):
                fresh = type(module)(config=model.config)
        except TypeError:  # not built from the config alone
            continue
        for key, buffer in fresh.named_buffers(recurse=False):
            module.register_buffer(key, buffer, persistent=key not in module._non_persistent_buffers_set)
        for key, value in vars(fresh).items():  # scalars computed with the buffers (attention_scaling)
            if not key.startswith("_") and not isinstance(value, torch.Tensor):
                setattr(module, key, value)
