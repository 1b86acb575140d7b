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
from pathlib import Path
from typing import Any, TypeGuard

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
    """Which of `total` blocks to keep: the first `layers`, and the first of each kind a per-block
    list (`layer_types`) names."""
    keep = set(range(layers))
    for key in _PER_LAYER:
        kinds = fields.get(key)
        if isinstance(kinds, (list, tuple)) and len(kinds) == total:
            firsts: dict[object, int] = {}
            for index, kind in enumerate(kinds):
                firsts.setdefault(kind if not isinstance(kind, list) else tuple(kind), index)
            keep |= set(firsts.values())
    return sorted(keep)


def _renumber(node: Any, fields: dict[str, Any], total: int, keep: list[int]) -> None:
    """Per-block lists keep the kept blocks' entries; lists of block indices are renumbered; a
    period (`attn_layer_period`) longer than the stack shrinks to it, where no per-block list
    names the kinds."""
    position = {old: new for new, old in enumerate(keep)}
    for key, value in list(fields.items()):
        if not isinstance(value, (list, tuple)) or isinstance(value, str):
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
    import torch
    import transformers
    from transformers.models.auto import modeling_auto

    model_type = config.model_type
    idle: set[str] = set()  # classes without a forward (Bark, a VQ-VAE): run by generate() or encode()

    def runs(cls: Any) -> TypeGuard[type]:
        if not isinstance(cls, type):
            return False
        if getattr(cls, "forward", None) is torch.nn.Module.forward:
            idle.add(cls.__name__)
            return False
        return True

    if task is None:
        for name in getattr(config, "architectures", None) or ():
            cls = getattr(transformers, name, None)
            if runs(cls):
                return "architectures", cls
    order = (task,) if task else (_ENCODER_DECODER_ORDER if config.is_encoder_decoder else _ORDER)
    mappings = [(candidate, TASKS[candidate]) for candidate in order]
    if task is None:  # a model type with another head only (retrieval, detection, depth, ...)
        others = sorted(
            n for n in dir(modeling_auto) if n.startswith("MODEL_FOR_") and n.endswith("_MAPPING_NAMES")
        )
        mappings += [(n.removeprefix("MODEL_FOR_").removesuffix("_MAPPING_NAMES").lower(), n) for n in others]
    for candidate, mapping in mappings:
        name = getattr(modeling_auto, mapping).get(model_type)
        if isinstance(name, (list, tuple)):
            name = name[0]
        cls = getattr(transformers, name, None) if name else None
        if runs(cls):
            return candidate, cls
    wanted = f"no {task} head" if task else "no model class"
    note = f" ({', '.join(sorted(idle))}: no forward())" if idle else ""
    raise TargetError(f"transformers has {wanted} for model type {model_type!r}{note}")


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
    if found == "causal-lm" and getattr(config, "is_decoder", None) is False:
        config.is_decoder = True  # an encoder's config (BERT, Reformer) built as the causal LM it has
    try:
        with torch.device("meta"):
            model = cls._from_config(config, attn_implementation=attn_implementation)  # type: ignore[attr-defined]
    except Exception as exc:  # whatever the model's constructor raises, said with its line
        raise TargetError(
            f"{config_path}: transformers cannot build {cls.__name__} from it{_at(exc)}: {_reason(exc)}"
        ) from None
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


def _pixels(config: Any, batch_size: int, image_size: int | None, video: bool = False) -> Any:
    """Images (batch, channels, height, width); a video model's clips have frames after the batch."""
    import torch

    vision = _sub(config, "vision_config", "backbone_config", "encoder")
    channels = getattr(vision, "num_channels", None) or 3
    height, width = _size(getattr(vision, "image_size", None), image_size)
    frames = getattr(vision, "num_frames", None)
    if video or frames:
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


def token_ids(vocab: int, shape: tuple[int, ...], seed: int = 0) -> Any:
    """Token ids drawn from a Zipf law over the vocabulary (rank r has weight 1/(r+1)), as text
    tokens are: a few ids are frequent, most are rare. Never all one id."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    weights = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    count = math.prod(shape)
    return torch.multinomial(weights, count, replacement=True, generator=generator).reshape(shape)


def inputs(model: Any, *, seq_len: int, batch_size: int, image_size: int | None = None) -> dict[str, Any]:
    """Keyword inputs for `model.forward`, shaped by its main input and its config."""
    import torch

    config = model.config
    text = _sub(config, "text_config", "decoder")
    vocab = getattr(text, "vocab_size", None) or getattr(config, "vocab_size", None) or 32
    parameters = inspect.signature(model.forward).parameters
    required = [
        name
        for name, parameter in parameters.items()
        if parameter.default is parameter.empty
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    ]
    main = getattr(model, "main_input_name", "input_ids")
    if main not in parameters and required:  # a tower left at the default `input_ids` (Idefics3's)
        main = required[0]
    width = getattr(config, "hidden_size", None)
    kwargs: dict[str, Any] = {}
    patch_grid = "grid_thw" in parameters or "image_grid_thw" in parameters
    if patch_grid and (main != "input_ids" or "input_ids" not in parameters):  # a vision tower
        kwargs.update(_patches(config, parameters))
    elif main in ("pixel_values", "pixel_values_videos"):
        kwargs[main] = _pixels(config, batch_size, image_size, video=main == "pixel_values_videos")
    elif main == "past_values":  # a time-series model: (batch, context, channels)
        context = getattr(config, "context_length", None) or seq_len
        channels = getattr(config, "num_input_channels", None) or 1
        kwargs[main] = torch.randn(batch_size, context, channels)
    elif main == "input_features":
        audio = _sub(config, "audio_config", "encoder_config", "encoder")
        mel = getattr(audio, "num_mel_bins", None)
        positions = getattr(audio, "max_source_positions", None)
        if mel is not None and positions:  # Whisper: (batch, mel bins, exactly 2 frames per position)
            frames = 2 * positions
            kwargs[main] = torch.randn(batch_size, mel, frames)
        else:  # conformer encoders and Speech2Text: (batch, frames, features)
            frames = seq_len
            # `input_size`: the features of a frame where the config stacks mel frames (FunASR).
            features = (
                getattr(audio, "input_size", None)
                or mel
                or (getattr(audio, "input_feat_per_channel", None) or 80)
                * (getattr(audio, "input_channels", None) or 1)
            )
            kwargs[main] = torch.randn(batch_size, frames, features)
        if "input_features_mask" in parameters:  # every frame is audio, none is padding (1: valid)
            kwargs["input_features_mask"] = torch.ones(batch_size, frames, dtype=torch.long)
    elif main == "input_values":
        audio = _sub(config, "audio_config", "encoder_config")
        mel, frames = getattr(audio, "num_mel_bins", None), getattr(audio, "max_length", None)
        if mel and frames:  # a spectrogram transformer: (batch, frames, mel bins)
            kwargs[main] = torch.randn(batch_size, frames, mel)
        else:  # a waveform, one sample per stride of the feature encoder; codecs take channels
            stride = getattr(audio, "hop_length", None) or math.prod(
                getattr(audio, "conv_stride", None) or (320,)
            )
            channels = getattr(audio, "audio_channels", None)
            shape = (
                (batch_size, seq_len * stride)
                if channels is None
                else (batch_size, channels, seq_len * stride)
            )
            kwargs[main] = torch.randn(*shape)
    elif main == "latents" and width:  # a codec's decoder: (batch, channels, frames), as convolutions read
        kwargs[main] = torch.randn(batch_size, width, seq_len)
    elif main.endswith("_embeds") and width:  # vectors of the model's width (a Q-Former's queries)
        kwargs[main] = torch.randn(batch_size, seq_len, width)
    else:
        kwargs["input_ids"] = token_ids(vocab, (batch_size, seq_len))
        dual = getattr(config, "vision_config", None) is not None and not any(
            hasattr(config, key) for key in ("image_token_id", "image_token_index")
        )
        if dual and "pixel_values" in parameters:  # a dual encoder (CLIP-like) reads both
            kwargs["pixel_values"] = _pixels(config, batch_size, image_size)
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in parameters:
        kwargs["decoder_input_ids"] = token_ids(vocab, (batch_size, seq_len), seed=1)
    for name in required:  # what the forward cannot run without besides its main input
        if name in kwargs:
            continue
        if name == "input_ids":  # the prompt of a vision-language model (BLIP-2, Grounding DINO)
            kwargs[name] = token_ids(vocab, (batch_size, seq_len))
        elif name.endswith("_input_ids"):  # ids of a sub-model's own vocabulary (InstructBLIP's Q-Former)
            sub = getattr(config, name.removesuffix("input_ids") + "config", None)
            if sub_vocab := getattr(sub, "vocab_size", None):
                kwargs[name] = token_ids(sub_vocab, (batch_size, seq_len))
    attended = getattr(config, "encoder_hidden_size", None)
    if attended and "encoder_hidden_states" in parameters and "encoder_hidden_states" not in kwargs:
        # A cross-attending stack whose config names the width of what it attends to (BLIP-2's
        # Q-Former over the vision tower's output) cannot run its cross-attention layers without it.
        kwargs["encoder_hidden_states"] = torch.randn(batch_size, seq_len, attended)
    if "bbox" in parameters and not hasattr(config, "max_2d_position_embeddings"):
        # A layout model reads a box per token. Where the config embeds integer coordinates
        # (`max_2d_position_embeddings`) families read different scales (LayoutLM a 0..1000 grid,
        # UDOP [0, 1]), so their own default stands; Bros has none and reads [0, 1].
        kwargs["bbox"] = _boxes(batch_size, seq_len)
    return kwargs


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
