"""A transformers config read from a JSON file and shrunk to a few blocks of every stack, and the
lookups into a config and its sub-configs that building a model and its inputs share."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from amplint.runtime.target import TargetError, user_frame

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
        data = json.loads(Path(config_path).read_text(encoding="utf-8"), object_hook=_special_float)
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


# How transformers writes the floats JSON has no literal for (`save_pretrained` of Mamba2's
# `time_step_limit`, Falcon-H1's, Bamba's...): `{"__float__": "Infinity"}`.
_FLOAT_TAG = "__float__"
_TAGGED = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _special_float(obj: dict[str, Any]) -> Any:
    """A JSON object transformers wrote for a float (`{"__float__": "Infinity"}`) as that float."""
    if obj.keys() == {_FLOAT_TAG} and obj[_FLOAT_TAG] in _TAGGED:
        return _TAGGED[obj[_FLOAT_TAG]]
    return obj


def default_config(config_class: type, *, layers: int | None = None, per_kind: int = 1) -> Any:
    """A config class's defaults (what a model class is built from when no config is given),
    shrunk to `layers` blocks of every stack."""
    try:
        config = config_class()
    except Exception as exc:  # a config class that needs arguments, said with its line
        raise TargetError(
            f"{config_class.__name__}() cannot be built from its defaults{_at(exc)}: {_reason(exc)}"
        ) from None
    if layers is not None:
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

    def visit(node: Any) -> set[tuple[int, tuple[int, ...]]]:
        """Shrink `node`; the (total, kept blocks) of each stack it shrank."""
        if id(node) in seen:
            return set()
        seen.add(id(node))
        fields = vars(node)
        inner = [visit(value) for value in list(fields.values()) if isinstance(value, PretrainedConfig)]
        # In a staged vision backbone `num_layers` (or a count as long as `depths`: CLAP's audio
        # tower's `num_hidden_layers`) counts the stages, which set its width; `depths` holds their blocks.
        depths = fields.get("depths")
        staged = isinstance(depths, (list, tuple))
        derived = fields.get("amplint_derived")
        counts = {
            k: v
            for k, v in fields.items()
            if k in _LAYER_COUNTS
            and type(v) is int
            and v > layers
            and not (staged and (k == "num_layers" or v == len(depths)))
            and k != derived
        }
        if not counts and inner and all(len(found) == 1 and found == inner[0] for found in inner):
            # every sub-model shrank one stack alike: lists of block indices above them index it
            _rehook(node, fields, *next(iter(inner[0])))
        shrunk: set[tuple[int, tuple[int, ...]]] = set()
        for total in set(counts.values()):
            keep = _kept_blocks(fields, total, layers, per_kind)
            shrunk.add((total, tuple(keep)))
            for key, value in counts.items():
                if value == total:
                    setattr(node, key, len(keep))
            _split(node, fields, total, len(keep))
            _renumber(node, fields, total, keep)
        if staged:  # stages of a vision backbone
            node.depths = type(depths)(min(d, layers) if isinstance(d, int) else d for d in depths)
        return shrunk

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


def _rehook(node: Any, fields: dict[str, Any], total: int, keep: tuple[int, ...]) -> None:
    """Lists of block indices of a sub-model's stack of `total` blocks, on the config above it
    (DepthPro's `intermediate_hook_ids`, the blocks of its patch encoder it reads features from),
    read as many kept blocks, in the same order: the last ones kept (the model has a layer per
    index, so none is dropped)."""
    for key, value in list(fields.items()):
        if not (_block_indices(key, value, total) and value and any(i not in keep for i in value)):
            continue
        ranks = sorted(set(value))
        position = {old: max(0, len(keep) - len(ranks) + rank) for rank, old in enumerate(ranks)}
        setattr(node, key, type(value)(position[i] for i in value))


def _block_indices(key: str, value: Any, total: int) -> bool:
    """Whether the config entry `key` is a list of indices of blocks of a stack of `total`."""
    return (
        isinstance(value, (list, tuple))
        and (key in _INDEX_LISTS or key.endswith(("_ids", "_idxs", "_indices")))
        and all(type(i) is int and 0 <= i < total for i in value)
    )


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
        elif _block_indices(key, value, total):
            setattr(node, key, type(value)(position[i] for i in value if i in position))
    if any(isinstance(fields.get(key), (list, tuple)) for key in _PER_LAYER):
        return  # the per-block list says which block is which; a period would contradict it
    for key, value in list(fields.items()):
        if key.endswith("_period") and type(value) is int and value > len(keep):
            setattr(node, key, len(keep))
            offset = key.removesuffix("_period") + "_offset"
            if type(fields.get(offset)) is int:
                setattr(node, offset, fields[offset] % len(keep))


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


def _size(value: Any, given: int | tuple[int, int] | None) -> tuple[int, int]:
    if isinstance(given, tuple):
        return given
    if given is not None:
        return given, given
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) >= 2:
        return int(value[-2]), int(value[-1])
    if isinstance(value, dict) and "height" in value:
        return int(value["height"]), int(value["width"])
    return DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE
