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
# Counts of a stack's last blocks, which differ from the others (Gemma 3n's and Gemma 4's last
# `num_kv_shared_layers` reuse the keys and values of an earlier block of their kind).
_TRAILING_COUNTS = frozenset({"num_kv_shared_layers"})
DEFAULT_IMAGE_SIZE = 224


def read_config(config_path: str, *, layers: int | None = None, per_kind: int = 1) -> Any:
    """The transformers config a JSON file describes; `layers`: keep that many blocks of every stack
    (and `per_kind` of each kind of block a hybrid stack has)."""
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
        config = _derived_counts(config, model_type, data, layers)
        shrink(config, layers, per_kind=per_kind)
    return config


def _derived_counts(config: Any, model_type: str, data: dict[str, Any], layers: int) -> Any:
    """The config built again with `layers` blocks where its constructor derives its block count
    from the count it is given (HRM's `num_hidden_layers` counts the attention calls, the blocks per
    stack times its cycles, so that the cache has a slot for each): shrinking the derived count
    alone leaves the stacks whole and the cache short. Else `config`."""
    import transformers

    for key in sorted(_LAYER_COUNTS):
        value = getattr(config, key, None)
        if key in data or type(value) is not int or value <= layers:
            continue
        try:
            probe = transformers.AutoConfig.for_model(model_type, **{**data, key: layers})
        except Exception:
            continue
        if getattr(probe, key) != layers:  # the constructor rewrote it: what it derived stands
            probe.amplint_derived = key
            return probe
    return config


def shrink(config: Any, layers: int, *, per_kind: int = 1) -> None:
    """Keep about `layers` blocks in every stack of `config` and its sub-configs (in place). A
    hybrid stack keeps one block (`per_kind`) of each kind it has (attention, linear attention,
    MoE, ...), so the trace still meets every kind."""
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
        derived = fields.get("amplint_derived")
        counts = {
            k: v
            for k, v in fields.items()
            if k in _LAYER_COUNTS
            and type(v) is int
            and v > layers
            and not (staged and k == "num_layers")
            and k != derived
        }
        for total in set(counts.values()):
            keep = _kept_blocks(fields, total, layers, per_kind)
            for key, value in counts.items():
                if value == total:
                    setattr(node, key, len(keep))
            _split(node, fields, total, len(keep))
            _renumber(node, fields, total, keep)
        depths = fields.get("depths")
        if isinstance(depths, (list, tuple)):  # stages of a vision backbone
            node.depths = type(depths)(min(d, layers) if isinstance(d, int) else d for d in depths)

    visit(config)


_SECTION = re.compile(r"(n|num)_\w+_layers")


def _split(node: Any, fields: dict[str, Any], total: int, kept: int) -> None:
    """Sections that split a stack of `total` blocks (Dory's input, recurrent and output layers)
    split the `kept` ones: each keeps a block where it had any, in order, the first taking the rest."""
    sections = {
        k: v
        for k, v in fields.items()
        if _SECTION.fullmatch(k) and k not in _LAYER_COUNTS and type(v) is int and v >= 0
    }
    if len(sections) < 2 or sum(sections.values()) != total or sum(v > 0 for v in sections.values()) > kept:
        return
    sizes = {k: min(v, 1) for k, v in sections.items()}
    first = next(k for k, v in sections.items() if v > 0)
    sizes[first] += kept - sum(sizes.values())
    for key, size in sizes.items():
        setattr(node, key, size)


def _kept_blocks(fields: dict[str, Any], total: int, layers: int, per_kind: int = 1) -> list[int]:
    """Which of `total` blocks to keep: the first `layers` (at least one per feature map a backbone
    hands out: a neck reads as many as the full backbone gives), and the first of each kind a
    per-block list (`layer_types`) names (the first `per_kind` of each)."""
    keep = set(range(max(layers, sum(1 for stage in _out_stages(fields, total) if stage))))
    for key in _PER_LAYER:
        kinds = fields.get(key)
        if isinstance(kinds, (list, tuple)) and len(kinds) == total:
            firsts: dict[object, list[int]] = {}
            for index, kind in enumerate(kinds):
                found = firsts.setdefault(kind if not isinstance(kind, list) else tuple(kind), [])
                if len(found) < per_kind:
                    found.append(index)
            keep |= {index for found in firsts.values() for index in found}
    for key in _TRAILING_COUNTS:  # and the first of the last blocks a count sets apart
        count = fields.get(key)
        if type(count) is int and 0 < count <= total:
            keep.add(total - count)
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
    for key in _TRAILING_COUNTS:  # the kept blocks among the last ones counted
        count = fields.get(key)
        if type(count) is int and 0 < count <= total:
            setattr(node, key, sum(1 for i in keep if i >= total - count))
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


def runnable_part(config: Any, task: str | None) -> tuple[Any, str | None]:
    """`config`, else, where its model type's class only generates (Qwen2.5-Omni's joins a thinker,
    a talker and a vocoder in `generate`), the first of its sub-configs whose model has a forward,
    with its key: the first part is the one that reads the prompt (the thinker)."""
    try:
        model_class(config, task)
        return config, None
    except TargetError as exc:
        if "only generates" not in str(exc):
            raise
        for key in getattr(config, "sub_configs", None) or ():
            sub = getattr(config, key, None)
            if sub is None or isinstance(sub, (dict, str)):
                continue
            try:
                model_class(sub, task)
            except TargetError:
                continue
            return sub, key
        raise


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

    config, part = runnable_part(read_config(config_path, layers=layers), task)
    found, cls = model_class(config, task)
    config = _for_head(config, found, cls)
    filled: list[str] = []
    first: Exception | None = None
    while True:
        try:
            with torch.device("meta"):
                model = cls._from_config(config, attn_implementation=attn_implementation)  # type: ignore[attr-defined]
            break
        except Exception as exc:  # whatever the model's constructor raises, said with its line
            if _fill_base_default(config, exc, filled):
                continue
            if layers is not None and first is None:
                # Blocks of one kind that share their weights (Zamba's shared attention, tied by a
                # pattern that needs a second such block) do not build from one: two of each kind,
                # once; where that fails too, the first error is the one to say.
                first = exc
                paired = runnable_part(read_config(config_path, layers=layers, per_kind=2), task)[0]
                config, filled = _for_head(paired, found, cls), []
                continue
            exc = first or exc
            raise TargetError(
                f"{config_path}: transformers cannot build {cls.__name__} from it{_at(exc)}: {_reason(exc)}"
            ) from None
    model.config.amplint_filled = filled  # said in the trace's notes
    model.config.amplint_part = part  # said in the trace's notes
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


def _for_head(config: Any, found: str, cls: type) -> Any:
    """The (sub-)config that the head `cls`, found for `found`, is built from."""
    # Read without the class's attribute hooks: a class whose backend is missing raises on any other.
    wanted = inspect.getattr_static(cls, "config_class", None)
    if isinstance(wanted, type) and not isinstance(config, wanted):
        # A head of one part of a composite type reads that part's config: Qwen3.5's causal LM its
        # text config, MusicGen's its decoder's.
        config = next((sub for sub in _configs(config) if isinstance(sub, wanted)), config)
    if found == "causal-lm" and getattr(config, "is_decoder", None) is False:
        config.is_decoder = True  # an encoder's config (BERT, Reformer) built as the causal LM it has
    return config


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
    windows, patch = getattr(vision, "num_windows", None), getattr(vision, "patch_size", None)
    if image_size is None and type(windows) is int and type(patch) is int and windows > 1:
        # A windowed ViT (RF-DETR's) splits the patch grid into windows x windows: its processor
        # resizes to a side they tile (518 -> 560 for a 14-pixel patch and 4 windows).
        tile = windows * patch
        height, width = (-(-side // tile) * tile for side in (height, width))
    frames = getattr(vision, "num_frames", None) or getattr(config, "num_frames", None)
    if video or (frames and not still):
        return torch.randn(batch_size, frames or 8, channels, height, width)
    return torch.randn(batch_size, channels, height, width)


def _patches(model: Any, parameters: Any) -> dict[str, Any]:
    """Inputs of a vision tower that takes flattened patches and their grid (Qwen2-VL style):
    one image of 8 x 8 patches, each patch channels x temporal x size x size values (as many as
    the linear layer that embeds them reads, where one does: the config may name its temporal
    patch otherwise, as MuseSpark's `patch_temporal`)."""
    import torch

    vision = _sub(model.config, "vision_config")
    size = getattr(vision, "patch_size", None) or 14
    temporal = getattr(vision, "temporal_patch_size", None) or 1
    channels = next(
        (getattr(vision, k) for k in ("in_channels", "in_chans", "num_channels") if getattr(vision, k, None)),
        3,
    )
    values = "hidden_states" if "hidden_states" in parameters else "pixel_values"
    grid = "grid_thw" if "grid_thw" in parameters else "image_grid_thw"
    embeds = next(
        (m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d, torch.nn.Conv3d))),
        None,
    )
    width = embeds.in_features if isinstance(embeds, torch.nn.Linear) else channels * temporal * size * size
    shape = _documented_shape(model, values, vision)[1:] or (width,)
    said = _documented(model.forward).get(values, ("", None, True))[1]
    if isinstance(embeds, torch.nn.Conv2d) and temporal == 1 and (said is None or said.count(",") != 1):
        # A patch embedding that convolves each patch as it comes (Kimi-K2.5's) takes them
        # unflattened, unless the forward says it takes rows (HunYuan-VL's unflattens them itself).
        shape = (channels, size, size)
    made = {values: torch.randn(64, *shape), grid: torch.tensor([[1, 8, 8]])}
    # A tower told each image's merge block beside its grid (VideoLLaMA3's `merge_sizes`): the
    # config's spatial merge size, else 1 (what its image processor gives a still image).
    merges = next((n for n in ("merge_sizes", "image_merge_sizes") if n in parameters), None)
    if merges is not None:
        made[merges] = torch.tensor([getattr(vision, "spatial_merge_size", None) or 1])
    return made


def _documented_shape(model: Any, name: str, config: Any) -> tuple[int, ...]:
    """The shape the forward's docstring gives `name`, where it has more than two dimensions and
    each after the first is a product of the config's integers (Inkling2's patches: `(num_image_tokens,
    patch_size * spatial_merge_size, patch_size * spatial_merge_size, num_channels)`); else ()."""
    shape = _documented(model.forward).get(name, ("", None, True))[1]
    dims = [d.strip() for d in shape.split(",")] if shape else []
    found: list[int] = [0]
    for dim in dims[1:] if len(dims) > 2 else ():
        values = [int(f) if f.strip().isdigit() else getattr(config, f.strip(), None) for f in dim.split("*")]
        sizes = [v for v in values if type(v) is int and v > 0]
        if len(sizes) < len(values):
            return ()
        found.append(math.prod(sizes))
    return tuple(found) if len(found) > 1 else ()


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


def _positioned_patches(config: Any, batch_size: int, seq_len: int) -> dict[str, Any]:
    """Inputs of a vision tower that takes flattened patches and each patch's (x, y) place in its
    image (Gemma 4's): a square grid of about `seq_len` patches, its side a multiple of the
    tower's pooling kernel, whose pooling groups that many patches a side."""
    import torch

    vision = _sub(config, "vision_config")
    size = getattr(vision, "patch_size", None) or 16
    channels = getattr(vision, "num_channels", None) or 3
    kernel = getattr(vision, "pooling_kernel_size", None) or 1
    side = max(1, math.isqrt(seq_len) // kernel) * kernel
    ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    places = torch.stack([xs.flatten(), ys.flatten()], dim=-1)
    return {
        "pixel_values": torch.rand(batch_size, side * side, channels * size * size),
        "pixel_position_ids": places.expand(batch_size, -1, -1).clone(),
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


def _input_layer(model: Any) -> Any:
    """The first convolution or linear layer of the model: the one that reads its input."""
    import torch

    weighted = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Linear)
    return next((m for m in model.modules() if isinstance(m, weighted)), None)


def _features(model: Any, batch_size: int, seq_len: int) -> tuple[Any, tuple[int, int]]:
    """Audio features and the (batch, frames) of their mask."""
    import torch

    config = model.config
    audio = _sub(config, "audio_config", "encoder_config", "encoder")
    mel = _find(audio, "num_mel_bins")
    first = _input_layer(model)
    bins = mel if mel is not None else _find(audio, "feature_size")  # CLVP's decoder names its mel bins so
    if bins is not None and isinstance(first, torch.nn.Conv1d) and first.in_channels == bins:
        # The input layer convolves over mel bins (Whisper, CLVP): (batch, mel bins, frames), exactly 2
        # frames per position where the positions are learned.
        positions = getattr(audio, "max_source_positions", None)
        frames = 2 * positions if positions else seq_len
        return torch.randn(batch_size, bins, frames), (batch_size, frames)
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


# `name (`type` of shape `(a, b)`, *optional*):` in a forward's docstring (transformers' Args).
_DOC_ARG = re.compile(r"^\s*(\w+) \((.*)\):\s*$")
_DOC_SHAPE = re.compile(r"of shape `[(\[](.*)[)\]]`")


def _documented(forward: Any) -> dict[str, tuple[str, str | None, bool]]:
    """The forward's documented arguments: name -> (type, shape or None, optional)."""
    found: dict[str, tuple[str, str | None, bool]] = {}
    for line in (inspect.getdoc(forward) or "").splitlines():
        match = _DOC_ARG.match(line)
        if match is None or match[1] in found:
            continue
        inside = match[2]
        kind = re.match(r"[`'](.*?)[`']", inside)
        shape = _DOC_SHAPE.search(inside)
        found[match[1]] = (kind[1] if kind else "", shape[1] if shape else None, "optional" in inside)
    return found


# Dimensions a docstring names that are not config keys: the batch, the model's width, a sequence.
_BATCH_DIMS = frozenset({"batch", "batch_size"})
_WIDTH_DIMS = frozenset({"dim", "hidden_dim", "hidden_size", "embed_dim", "d_model"})
_SEQUENCE_DIM = re.compile(r"length|tokens|^num_|^number_|^max_|seq|steps|frames|patches")


class _Inputs:
    """Tensors for forward parameters, made by name and shaped by the config, with the
    (batch, positions) of each sequence made, for a mask over it."""

    def __init__(self, model: Any, *, seq_len: int, batch_size: int, image_size: int | None) -> None:
        import torch

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
        # A decoder of audio codes with one embedding table per codebook (MusicGen) reads a row of
        # ids per codebook: (batch * codebooks, length), its mask still (batch, length).
        try:
            tables = model.get_input_embeddings()
        except (AttributeError, NotImplementedError):
            tables = None
        many = isinstance(tables, torch.nn.ModuleList) and len(tables) == getattr(
            config, "num_codebooks", None
        )
        self.codebooks = len(tables) if many else 1
        self.documented = _documented(model.forward)
        self.from_docstring: set[str] = set()  # inputs only the forward's docstring shapes
        self.annotations = {
            name: str(p.annotation) for name, p in inspect.signature(model.forward).parameters.items()
        }

    def dimension(self, text: str) -> int | None:
        """One dimension of a documented shape: a product or sum of integers, config keys (also
        `config.key` and `len(config.key)`), the batch, the model's width and sequence lengths."""
        total = 0
        for addend in text.split("+"):
            product = 1
            for factor in addend.split("*"):
                factor = factor.strip()
                counted = re.fullmatch(r"len\((.*)\)", factor)
                key = (
                    (counted[1] if counted else factor).strip().removeprefix("self.").removeprefix("config.")
                )
                key = key.split(".")[-1]
                value = _find(self.config, key) if re.fullmatch(r"\w+", key) else None
                if counted:
                    value = len(value) if isinstance(value, (list, tuple)) else None
                elif factor.isdigit():
                    value = int(factor)
                elif key in _BATCH_DIMS:
                    value = self.batch_size
                elif key in _WIDTH_DIMS and value is None:
                    value = getattr(self.text, "hidden_size", None) or _find(self.config, "hidden_size")
                elif key in ("height", "width") and value is None:
                    side = _find(_sub(self.config, "vision_config"), "image_size")
                    value = _size(side, self.image_size)[0 if key == "height" else 1]
                elif value is None and _SEQUENCE_DIM.search(key):
                    value = self.length
                if type(value) is not int or value <= 0:
                    return None
                product *= value
            total += product
        return total

    def placed(self, name: str) -> Any:
        """A mask over the token ids of where another input's vectors go in the text (Kosmos-2's
        `image_embeds_position_mask`): as many positions, after the first, as the docstring gives
        that input (`image_embeds`: (batch, latent_query_num, hidden)) vectors per sample."""
        import torch

        _, shape, _ = self.documented.get(name.removesuffix("_position_mask"), ("", None, True))
        dims = shape.split(",") if shape else []
        count = self.dimension(dims[1]) if len(dims) == 3 else None
        if count is None or "input_ids" not in self.positions or count > self.positions["input_ids"][1]:
            return None
        mask = torch.zeros(self.positions["input_ids"], dtype=torch.long)
        start = int(count < mask.shape[1])  # after the first token where the text has room
        mask[:, start : start + count] = 1
        return mask

    def from_doc(self, name: str) -> Any:
        """A tensor of the shape the forward's docstring gives `name`, None where it gives none or
        names a dimension this cannot size: indices (zeros, valid in any table) for integer types,
        all-true for a boolean one, else random values."""
        import torch

        kind, shape, _ = self.documented.get(name, ("", None, True))
        if shape is None:
            return None
        sized = [self.dimension(d) for d in shape.split(",") if d.strip()]
        dims = [d for d in sized if d is not None]
        if not dims or len(dims) < len(sized):
            return None
        kind += " " + self.annotations.get(name, "")
        if name.endswith("_mask"):
            return torch.ones(dims, dtype=torch.bool if "BoolTensor" in kind else torch.long)
        if "LongTensor" in kind or "IntTensor" in kind:
            return torch.zeros(dims, dtype=torch.long)
        if "BoolTensor" in kind:
            return torch.ones(dims, dtype=torch.bool)
        return torch.randn(dims)

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
            # A model whose text has video placeholders only (InstructBLIP-Video) reads clips.
            clips = name == "pixel_values_videos" or (
                _placeholders(config, "video") and not _placeholders(config, "image")
            )
            value = _pixels(config, batch, self.image_size, video=clips, still=still)
            if config.model_type in auto.MODEL_FOR_KEYPOINT_MATCHING_MAPPING_NAMES:
                value = torch.stack((value, torch.randn_like(value)), dim=1)
        elif name == "input_ids":
            value = token_ids(self.vocab, (batch * self.codebooks, self.length))
            positions = (batch, self.length)
            streams, codes = (
                getattr(config, "num_codebooks", None),
                getattr(config, "codebook_vocab_size", None),
            )
            if isinstance(streams, int) and isinstance(codes, int):
                embeddings = self.model.get_input_embeddings()
                table = getattr(getattr(embeddings, "embed_tokens", None), "num_embeddings", 0)
            if (
                isinstance(streams, int)
                and isinstance(codes, int)
                and table == self.vocab + streams * codes + 1
            ):
                # One embedding table for the text and each codebook's stream, summed per position
                # (Kyutai STT): a text token, then one code per codebook, at every position.
                audio = token_ids(codes, (batch, self.length, streams), seed=3)
                value = torch.cat([value.unsqueeze(-1), audio], dim=-1)
        elif type(prompt) is int:
            value = token_ids(self.vocab, (batch, prompt))
        elif name == "input_features":
            # A model that adds its audio to the text token by token counts the frames per token
            # (Voxtral Realtime's `audio_length_per_tok`): that many frames for each token.
            per_token = _find(config, "audio_length_per_tok")
            frames = (
                self.length * per_token if type(per_token) is int and "input_ids" in self.kwargs else length
            )
            value, positions = _features(self.model, batch, frames)
        elif name == "input_values":
            value = _waveform(config, batch, length)
        elif name in ("past_values", "future_values"):
            # A time series: (batch, steps), then channels where it has several (`input_size` of a
            # lagged forecaster, univariate at 1). The past is the context and the furthest lag the
            # model reads back (`lags_sequence`); the future is the horizon it forecasts.
            if name == "past_values":
                lags = getattr(config, "lags_sequence", None) or (0,)
                steps = (getattr(config, "context_length", None) or length) + max(lags)
            else:
                steps = getattr(config, "prediction_length", None) or length
            size = getattr(config, "input_size", None)
            channels = getattr(config, "num_input_channels", None) or (
                size if type(size) is int and size > 1 else None
            )
            value = torch.randn(batch, steps) if channels is None else torch.randn(batch, steps, channels)
            positions = (batch, steps)
        elif name.endswith("_time_features") and name.replace("_time_features", "_values") in self.positions:
            # Features of each step of a time series (its date: month, age): the config counts them.
            steps = self.positions[name.replace("_time_features", "_values")]
            width = (getattr(config, "num_time_features", None) or 0) + (
                getattr(config, "num_dynamic_real_features", None) or 0
            )
            value = torch.randn(*steps, width)
        elif name.endswith("_observed_mask") and name.replace("_observed_mask", "_values") in self.kwargs:
            # Which values of a time series were observed, one flag per value: all of them.
            value = torch.ones_like(self.kwargs[name.replace("_observed_mask", "_values")])
        elif name.startswith("static_") and name.endswith("_features"):
            # Per-series features the config counts (`num_static_real_features`); a categorical
            # one is an index below its `cardinality`.
            count = getattr(config, "num_" + name, None)
            if not (type(count) is int and count > 0):
                return False
            if "categorical" in name:
                generator = torch.Generator().manual_seed(3)
                kinds = list(getattr(config, "cardinality", None) or [1] * count)[:count]
                value = torch.stack([torch.randint(k, (batch,), generator=generator) for k in kinds], dim=-1)
            else:
                value = torch.randn(batch, count)
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
        elif name == "hidden_states" and isinstance(layer := _input_layer(self.model), torch.nn.Conv1d):
            # A convolutional stack's own input, shaped by the layer that reads it: a codec's
            # encoder reads a waveform of the channels that layer takes (VibeVoice's encoder),
            # its decoder latents, (batch, channels, frames).
            value = _waveform(config, batch, length)
            if value.dim() != 3 or value.shape[1] != layer.in_channels:
                value = torch.randn(batch, layer.in_channels, length)
        elif name == "flattened_patches":
            value = _flattened_patches(config, batch, length)
        elif name == "lang_ids" and getattr(config, "languages", None):
            # X-MOD's language adapter per sample: the first language the config lists
            value = torch.zeros(batch, dtype=torch.long)
        elif name == "freq":  # TimesFM's frequency class: 0 (high), what its forecaster uses when not told
            value = torch.zeros(batch, 1, dtype=torch.long)
        elif name == getattr(self.model, "main_input_name", None) and _modalities(self.model) == {"audio"}:
            # An audio encoder's main input under a name of its own (Gemma 3n's `audio_mel`): features.
            value, positions = _features(self.model, batch, length)
        elif name.endswith("_position_mask") and (places := self.placed(name)) is not None:
            value = places
        elif name.endswith(("_mask", "_padding")) and (
            over := next(
                (
                    k
                    for k in self.positions
                    if (
                        stem := name.removesuffix("_mask").removesuffix("_padding").removesuffix("_attention")
                    )
                    and (k == stem or k.startswith(stem + "_"))
                ),
                None,
            )
        ):
            # A mask over a sequence made, every position valid: ones; a padding indicator: zeros.
            dtype = torch.bool if "BoolTensor" in self.annotations.get(name, "") else torch.long
            value = (torch.zeros if name.endswith("_padding") else torch.ones)(
                self.positions[over], dtype=dtype
            )
        elif (value := self.from_doc(name)) is not None:  # a tensor the docstring shapes
            self.from_docstring.add(name)
        elif type(width := _width(config, name)) is int:
            # features of a width the config names (LXMERT's `visual_feats` and `visual_pos`: its
            # `visual_feat_dim` and `visual_pos_dim`), one per region, as many as the text has tokens
            value, positions = torch.randn(batch, self.length, width), (batch, self.length)
        else:
            return False
        self.kwargs[name] = value
        if positions is not None:
            self.positions[name] = positions
        return True


def _width(config: Any, name: str) -> Any:
    """The width the config gives the input `name` (`<name>_dim`, a plural's stem first), else None."""
    for stem in (name.removesuffix("s"), name):
        value = getattr(config, f"{stem}_dim", None)
        if value is not None:
            return value
    return None


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


def _modalities(model: Any) -> set[str]:
    """The kinds of input a transformers model class says it reads (`input_modalities`)."""
    kinds = getattr(model, "input_modalities", None) or ()
    return {kinds} if isinstance(kinds, str) else set(kinds)


def _needed(parameters: Any, documented: dict[str, tuple[str, str | None, bool]]) -> list[str]:
    """The forward's required parameters, and those its docstring lists as tensors without
    calling them optional (Decision Transformer's `states`, `actions`, ..., which default to None)."""
    names = _required(parameters)
    return names + [
        name
        for name, (kind, _, optional) in documented.items()
        if name in parameters
        and name not in names
        and not optional
        and "Tensor" in kind
        # a mask or positions the model makes itself when not given
        and not name.endswith(("_mask", "position_ids"))
    ]


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
    declared = getattr(model, "main_input_name", None)
    if patch_grid and (main[0] != "input_ids" or "input_ids" not in parameters):  # a vision tower
        made.kwargs.update(_patches(model, parameters))
    elif "pixel_position_ids" in parameters and main[0] == "pixel_values":
        made.kwargs.update(_positioned_patches(config, batch_size, seq_len))
        made.positions["pixel_values"] = tuple(made.kwargs["pixel_values"].shape[:2])
    elif "spatial_shapes" in parameters and main[0] == "pixel_values":
        made.kwargs.update(_spatial_patches(config, batch_size))
        made.positions["pixel_values"] = tuple(made.kwargs["pixel_values"].shape[:2])
    else:
        known = [name for name in main if made.add(name)]
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
    if (
        main == ["input_ids"]
        and "input_features" in parameters
        and not _placeholders(config, "audio")
        and (type(_find(config, "audio_length_per_tok")) is int or _needed_by_a_part(model, "input_features"))
    ):
        # Audio added to the text position by position, or read beside it by a part of the model
        # that cannot run without it (CLVP's conditioning encoder); not spliced in at placeholders.
        made.add("input_features")
    text = _sub(config, "text_config") is not config and not _placeholders(config, "image", "video")
    queries = getattr(config, "num_query_tokens", None)
    if main[0].startswith("pixel_values") and "input_ids" in parameters and text:
        made.add("input_ids")
    elif main[0].startswith("pixel_values") and "input_ids" in parameters and type(queries) is int:
        # A Q-Former model that splices its `num_query_tokens` queries into a prompt at placeholder
        # tokens (InstructBLIP) reads the prompt too: the placeholders first (per frame of a clip).
        made.add("input_ids")
        token = next(
            (
                getattr(config, k)
                for k in ("image_token_id", "video_token_id")
                if type(getattr(config, k, None)) is int
            ),
            None,
        )
        clip = made.kwargs.get(main[0])
        spliced = queries * (clip.shape[1] if clip is not None and clip.dim() == 5 else 1)
        if token is not None and spliced < made.kwargs["input_ids"].shape[1]:
            made.kwargs["input_ids"][:, :spliced] = token
    pixels: Any = made.kwargs.get("pixel_values")
    # (FLAVA's mask of that name is over image patches, (batch, patches), as its docstring says.)
    over_patches = (made.documented.get("image_attention_mask", ("", None, True))[1] or "").count(",") == 1
    if (
        "image_attention_mask" in parameters
        and "input_ids" in made.kwargs
        and pixels is not None
        and not over_patches
    ):
        # Cross-attention from each token to each image of its sample (IDEFICS): images come per
        # sample (batch, images, channels, height, width), one here, attended by every token.
        if pixels.dim() == 4:
            made.kwargs["pixel_values"] = pixels.unsqueeze(1)
        made.kwargs["image_attention_mask"] = torch.ones(*made.kwargs["input_ids"].shape, 1, dtype=torch.long)
    # A model whose main input only its docstring shapes (Decision Transformer's `states`) reads the
    # other tensors that docstring lists without calling them optional, though they default to None.
    documented_main = main[0] == declared and main[0] in made.from_docstring
    for name in _needed(parameters, made.documented) if documented_main else _required(parameters):
        if name not in made.kwargs:
            made.add(name)
    for name in parameters:
        # Optional inputs the forward reads all the same: features whose width the config names
        # (LXMERT raises without its regions), and X-MOD's language when the config sets no default.
        wanted = type(_width(config, name)) is int or (
            name == "lang_ids" and getattr(config, "default_language", "") is None
        )
        if wanted and name not in made.kwargs:
            made.add(name)
    pixels = made.kwargs.get("pixel_values")
    for name in parameters:
        if name.endswith("_position_mask") and pixels is not None and name not in made.kwargs:
            made.add(name)  # where the image's vectors go in the text (Kosmos-2)
    if "target_sizes" in parameters and getattr(pixels, "ndim", 0) == 4:
        # A NaViT-style tower (MiniCPM-V's) sizes its position embeddings by each image's patch grid.
        size = _find(_sub(config, "vision_config"), "patch_size") or 14
        height, width = _size(size, None)
        patches = [pixels.shape[-2] // height, pixels.shape[-1] // width]
        made.kwargs["target_sizes"] = torch.tensor([patches] * pixels.shape[0], dtype=torch.int32)
    if "input_features" in made.kwargs and "input_features_mask" in parameters:
        made.add("input_features_mask")  # audio encoders count frames from it, optional or not
    for name in parameters:  # a forecaster's per-series features, where its config counts some
        if name.startswith("static_") and name.endswith("_features") and name not in made.kwargs:
            made.add(name)
    forecaster = "future_values" in parameters and "past_values" in made.kwargs
    if getattr(config, "is_encoder_decoder", False) and forecaster:
        # An encoder-decoder forecaster's decoder reads the horizon it forecasts (as a seq2seq LM's
        # reads `decoder_input_ids`), with the features of its steps; without them it runs no decoder.
        made.add("future_values")
        if "future_time_features" in parameters:
            made.add("future_time_features")
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in parameters:
        made.kwargs["decoder_input_ids"] = token_ids(made.vocab, (batch_size, seq_len), seed=1)
    attended = getattr(config, "encoder_hidden_size", None)
    if attended and "encoder_hidden_states" in parameters and "encoder_hidden_states" not in made.kwargs:
        # A cross-attending stack whose config names the width of what it attends to (BLIP-2's
        # Q-Former over the vision tower's output) cannot run its cross-attention layers without it.
        made.kwargs["encoder_hidden_states"] = torch.randn(batch_size, seq_len, attended)
    if "bbox" in parameters and "bbox" not in made.kwargs:
        grid = getattr(config, "max_2d_position_embeddings", None)
        # A layout model reads a box per token: Bros, whose config embeds no coordinates, in
        # [0, 1]; where the config embeds integer coordinates, on the grid their docstrings give,
        # [0, max_2d_position_embeddings - 1] (UDOP, which needs boxes, clips them to [0, 1]).
        boxes = _boxes(batch_size, made.length if "input_ids" in made.kwargs else seq_len)
        made.kwargs["bbox"] = (boxes * (grid - 1)).long() if type(grid) is int and grid > 1 else boxes
    return made.kwargs


def _needed_by_a_part(model: Any, name: str) -> bool:
    """Whether a module of `model` has a forward that requires the input `name`."""
    for module in model.modules():
        try:
            parameter = inspect.signature(module.forward).parameters.get(name)
        except (TypeError, ValueError):
            continue
        if parameter is not None and parameter.default is parameter.empty:
            return True
    return False


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
