"""A transformers model built from a config JSON alone (no weights, no hub access), with the inputs
its head takes.

The class is the config's `architectures` entry when it names one transformers has, else the first
head the model type has among: causal LM, seq2seq LM, speech seq2seq, image classification, audio
classification, the base model (an encoder-decoder config tries seq2seq first). `task` overrides.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeGuard
from unittest import mock

from amplint.runtime.hf_config import _at, _configs, _reason, default_config, read_config
from amplint.runtime.hf_inputs import inputs
from amplint.runtime.target import TargetError

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
    config_source: str | type,
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
    """The model on the meta device, and inputs its forward takes. `config_source`: the path of a
    config JSON (the config's head is built), or a model class (built from its config class's
    defaults). `input_ids`: a file of token ids to use instead of drawn ones (see `read_token_ids`);
    `text`: a text to tokenize with the tokenizer saved beside the config."""
    import torch

    given = config_source if isinstance(config_source, type) else None
    config_path = given.__name__ if given is not None else str(config_source)

    def configured(per_kind: int = 1) -> tuple[Any, str | None]:
        if given is not None:
            return default_config(given.config_class, layers=layers, per_kind=per_kind), None  # type: ignore[attr-defined]
        return runnable_part(read_config(config_path, layers=layers, per_kind=per_kind), task)

    config, part = configured()
    found, cls = ("class", given) if given is not None else model_class(config, task)
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
                config, filled = _for_head(configured(per_kind=2)[0], found, cls), []
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

    from amplint.runtime import compat

    register = torch.nn.Module.register_parameter

    def on_meta(module: Any, name: str, parameter: Any) -> None:
        register(module, name, parameter)
        if parameter is not None and not parameter.is_meta:
            kind = type(parameter)
            extra = {k: v for k, v in vars(parameter).items() if k != "requires_grad"}
            compat.parameters_table(module)[name] = kind(
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


def materialize_buffers(model: Any) -> None:
    """Give the buffers a config computes (rotary `inv_freq`, not in a checkpoint) real values on
    the CPU, for a model built on the meta device whose weights were loaded: each module holding
    such a buffer is built again from the model's config (one that cannot be stays on meta, and the
    values replay says that the model has no weights)."""
    import torch

    from amplint.runtime import compat

    for module in model.modules():
        if not any(buffer.is_meta for buffer in module.buffers(recurse=False)):
            continue
        try:
            with torch.device("cpu"):
                fresh = type(module)(config=model.config)
        except TypeError:  # not built from the config alone
            continue
        for key, buffer in fresh.named_buffers(recurse=False):
            module.register_buffer(key, buffer, persistent=key not in compat.non_persistent_buffers(module))
        for key, value in vars(fresh).items():  # scalars computed with the buffers (attention_scaling)
            if not key.startswith("_") and not isinstance(value, torch.Tensor):
                setattr(module, key, value)
