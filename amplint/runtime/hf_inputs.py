"""Inputs for a transformers model's forward, made by name and shaped by its config, its forward's
signature and docstring, and its modules: token ids, pixels, patches, audio features, waveforms,
time series, masks, and objects the forward reads (a video tracker's inference session).

The code up to `PATCHES` is general: it reads input names many models share, the config, the
forward's signature and docstring, and the layer that reads an input. What one model (or a few)
needs beyond that, keyed on an input or config name only it has, is a row of `PATCHES` at the end,
with the model types that need it, why, and the transformers version whose model needed it."""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from amplint.runtime.hf_config import _configs, _find, _size, _sub


def _pixels(
    config: Any,
    batch_size: int,
    image_size: int | tuple[int, int] | None,
    video: bool = False,
    still: bool = False,
) -> Any:
    """Images (batch, channels, height, width); a video model's clips have frames after the batch
    (`video`, or frames counted in the config of a model not `still`)."""
    import torch

    vision = _sub(config, "vision_config", "image_config", "backbone_config", "encoder")
    channels = getattr(vision, "num_channels", None) or 3
    # (SAM 2 keeps its image size in the vision tower's backbone.)
    height, width = _size(_find(vision, "image_size"), image_size)
    if image_size is None:
        for patch in _patches_for("side", config):
            height, width = patch.apply(config, vision, (height, width))
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
    said = _documented(model.forward).get(values, ("", None, True))[1]
    shape = _documented_shape(said, vision)[1:] or (width,)
    if isinstance(embeds, torch.nn.Conv2d) and temporal == 1 and (said is None or said.count(",") != 1):
        # A patch embedding that convolves each patch as it comes (Kimi-K2.5's) takes them
        # unflattened, unless the forward says it takes rows (HunYuan-VL's unflattens them itself).
        shape = (channels, size, size)
    return {values: torch.randn(64, *shape), grid: torch.tensor([[1, 8, 8]])}


def _documented_shape(shape: str | None, config: Any) -> tuple[int, ...]:
    """A shape a forward's docstring gives, where it has more than two dimensions and each after
    the first is a product of the config's integers (Inkling2's patches: `(num_image_tokens,
    patch_size * spatial_merge_size, patch_size * spatial_merge_size, num_channels)`); else ()."""
    dims = [d.strip() for d in shape.split(",")] if shape else []
    found: list[int] = [0]
    for dim in dims[1:] if len(dims) > 2 else ():
        values = [int(f) if f.strip().isdigit() else getattr(config, f.strip(), None) for f in dim.split("*")]
        sizes = [v for v in values if type(v) is int and v > 0]
        if len(sizes) < len(values):
            return ()
        found.append(math.prod(sizes))
    return tuple(found) if len(found) > 1 else ()


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
    extracted = _extracted_features(config, batch_size, seq_len)
    if extracted is not None and extracted.dim() == 3 and extracted.shape[1] == bins != extracted.shape[2]:
        # Mel bins first all the same, read by another layer (Qwen3-ASR's 2-D convolution over
        # chunks of frames): as the model's own feature extractor lays them out and pads them.
        return extracted, (batch_size, extracted.shape[2])
    if bins is not None and any(
        isinstance(m, torch.nn.BatchNorm2d) and m.num_features == bins for m in model.modules()
    ):
        # A spectrogram read as an image whose mel bins a 2-D batch norm takes as its channels
        # (CLAP's): (batch, crops, frames, mel bins), one crop.
        return torch.randn(batch_size, 1, seq_len, bins), (batch_size, seq_len)
    # conformer encoders, w2v-BERT (two mel frames stacked, also a codec's semantic encoder) and
    # FunASR (`input_size`: seven stacked), Speech2Text (its extractor's `feature_size`): (batch,
    # frames, features)
    features = (
        getattr(audio, "input_size", None)
        or _find(audio, "feature_projection_input_dim")
        or mel
        or getattr(_feature_extractor(config), "feature_size", None)  # Gemma 4's names no mel bins
        or 80
    )
    if (
        features == mel
        and isinstance(first, torch.nn.Linear)
        and first.in_features % mel == 0
        and _reads_its_input(model, first)
    ):
        # A linear input layer applied to the features as they come reads frames its feature
        # extractor stacked (Granite Speech 5's: each mel frame with its delta, two frames a row);
        # one applied to what its module stacked itself (Nemotron 3's) reads mel frames.
        features = first.in_features
    return torch.randn(batch_size, seq_len, features), (batch_size, seq_len)


def _reads_its_input(model: Any, layer: Any) -> bool:
    """Whether the module holding `layer` applies it to its forward's first argument as it comes
    (`self.input_linear(input_features.to(dtype))`), by the forward's source."""
    owner, name = next(
        ((m, n) for m in model.modules() for n, child in m.named_children() if child is layer), (None, "")
    )
    try:
        first = next(iter(inspect.signature(owner.forward).parameters), None) if owner is not None else None
    except (TypeError, ValueError):
        return False
    return first is not None and name in _applied_to(owner, first)


def _applied_to(module: Any, argument: str) -> list[str]:
    """The submodules that the forward of `module` applies to its argument `argument` as it comes
    (`self.pre_projection(inputs_embeds)`; a cast or a move to a device between counts as such),
    by the forward's source: none where it is reshaped or indexed first."""
    try:
        source = inspect.getsource(type(module).forward)
    except (OSError, TypeError):
        return []
    return re.findall(rf"self\.(\w+)\(\s*{argument}\b(?!\s*\[)", source)


def _feature_extractor(config: Any) -> Any:
    """The feature extractor of the config's model type with its default settings, else of a model
    type of the same transformers module (`pe_audio_encoder` is `pe_audio`'s); None when there is
    none, or it needs a package that is not installed."""
    return _extractor_of(config.model_type, type(config).__module__.split(".")[-2])


@cache  # made once per model type: inputs ask it several times, and some compute filter banks
def _extractor_of(model_type: str, module: str) -> Any:
    from transformers.models.auto import feature_extraction_auto as auto
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    names = auto.FEATURE_EXTRACTOR_MAPPING_NAMES
    name = names.get(model_type) or next(
        (n for t, n in names.items() if model_type_to_module_name(t) == module), None
    )
    try:
        return auto.feature_extractor_class_from_name(name)() if name else None
    except ImportError:
        return None


def _extracted_features(config: Any, batch_size: int, frames: int) -> Any:
    """The features the model's own feature extractor makes of `frames` frames of random audio,
    padded only as far as the model needs; None without an extractor that says its frame's hop."""
    import torch

    extractor = _feature_extractor(config)
    hop = getattr(extractor, "hop_length", None)
    if type(hop) is not int or not hasattr(extractor, "sampling_rate"):
        return None
    try:
        features = _extracted(extractor, batch_size, frames * hop, padding="longest").get("input_features")
    except Exception:  # an extractor that pads otherwise, or cannot run here
        return None
    return features.float() if isinstance(features, torch.Tensor) else None


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
    extracted = _extracted(extractor, batch_size, samples)
    return extracted["input_values"] if "input_values" in extracted else torch.randn(batch_size, samples)


def _extracted(extractor: Any, batch_size: int, samples: int, **options: Any) -> Any:
    """What a feature extractor makes of `batch_size` random waveforms of `samples` samples."""
    import torch

    waves = [torch.randn(samples).numpy() for _ in range(batch_size)]
    return extractor(waves, sampling_rate=extractor.sampling_rate, return_tensors="pt", **options)


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


# The annotation of keys and values computed by another model, per kind of attention layer.
_SHARED_KV = "dict[str, tuple[torch.Tensor, torch.Tensor]]"


class _Inputs:
    """Tensors for forward parameters, made by name and shaped by the config, with the
    (batch, positions) of each sequence made, for a mask over it."""

    def __init__(
        self, model: Any, *, seq_len: int, batch_size: int, image_size: int | tuple[int, int] | None
    ) -> None:
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
        self.main: list[str] = []  # the inputs the model names as its main ones
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
        self.parameters = inspect.signature(model.forward).parameters
        self.documented = _documented(model.forward)
        self.from_docstring: set[str] = set()  # inputs only the forward's docstring shapes
        self.annotations = {name: str(p.annotation) for name, p in self.parameters.items()}

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

    def session(self, name: str) -> Any:
        """The inference session a video tracker's forward reads its frames and prompts from
        (`name`, an instance of the class its annotation names, which transformers' processor
        makes), made inside the trace: a clip of one frame as the model sees it, and one object
        prompted by a point at the frame's centre, or a text prompt where the session takes
        those. None where the annotation names no such session."""
        import torch

        from amplint.runtime.target import MadeInTrace

        kind = getattr(self.parameters.get(name), "annotation", None)
        points, texts = (callable(getattr(kind, key, None)) for key in ("add_point_inputs", "add_prompt"))
        if not (isinstance(kind, type) and (points or texts)):
            return None
        # Its state on the traced device, as the processor keeps it (on the device it infers on).
        devices = [key for key in inspect.signature(kind).parameters if key.endswith("_device")]
        ids: list[list[int]] = []
        if texts:
            # Token ids drawn now: drawn inside the trace they would be fake, without values. The text
            # model may be a part's (SAM3 Video's detector's), with fewer positions than the text has.
            text = _find(self.config, "text_config") or self.text
            limit = getattr(text, "max_position_embeddings", None) or self.length
            vocab = getattr(text, "vocab_size", None) or self.vocab
            ids = token_ids(vocab, (1, min(self.length, limit))).tolist()
        config, image_size = self.config, self.image_size

        def make(device: str, dtype: Any) -> Any:
            video = _pixels(config, 1, image_size, still=True)
            height, width = video.shape[-2:]
            session = kind(
                video=video,
                video_height=height,
                video_width=width,
                dtype=dtype,
                **dict.fromkeys(devices, device),
            )
            if texts:
                prompt = session.add_prompt("a prompt")
                session.prompt_input_ids[prompt] = torch.tensor(ids, device=device)
                session.prompt_attention_masks[prompt] = torch.ones(
                    1, len(ids[0]), dtype=torch.long, device=device
                )
                return session
            obj = session.obj_id_to_idx(1)
            point = {
                "point_coords": torch.tensor([[[[width / 2, height / 2]]]]),
                "point_labels": torch.ones(1, 1, 1, dtype=torch.int32),
            }
            session.add_point_inputs(obj, 0, point)
            session.obj_with_new_inputs = [1]
            return session

        return MadeInTrace(make)

    def add(self, name: str) -> bool:
        """Make the input `name`; False for a name it does not know."""
        import torch

        config, batch, length = self.config, self.batch_size, self.seq_len
        hidden = getattr(self.text, "hidden_size", None) or getattr(config, "hidden_size", None)
        positions: tuple[int, ...] | None = None
        patched = next(
            (
                made
                for patch in _patches_for("make", config, self.parameters, name)
                if (made := patch.apply(self))
            ),
            None,
        )
        if patched is not None:
            value, positions = patched
        elif name in ("pixel_values", "pixel_values_videos") or name.endswith("_pixel_values"):
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
        elif name == "input_features":
            value, positions = _features(self.model, batch, length)
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
            # or of the width of the linear layer the forward applies to them (Gemma 4's assistant
            # projects the target model's embeddings and hidden states, concatenated, to its own)
            reads = [getattr(self.model, n, None) for n in _applied_to(self.model, name)]
            width = next((m.in_features for m in reads if isinstance(m, torch.nn.Linear)), hidden)
            # A drafter that attends to keys and values its target computed reads the one position
            # it drafts next (what transformers' candidate generator gives it at each step).
            shared = any(_SHARED_KV in kind for kind in self.annotations.values())
            steps = 1 if shared and _shared_kv_shapes(self.model, batch, length) else length
            value, positions = torch.randn(batch, steps, width), (batch, steps)
        elif _SHARED_KV in self.annotations.get(name, ""):
            # Keys and values another model computed, per kind of attention layer, for the layers
            # that reuse them (Gemma 4's assistant attends to its target model's last ones).
            shapes = _shared_kv_shapes(self.model, batch, self.length)
            if not shapes:
                return False
            value = {kind: (torch.randn(shape), torch.randn(shape)) for kind, shape in shapes.items()}
        elif name.endswith("_input_ids"):  # ids of a sub-model's own vocabulary (InstructBLIP's Q-Former)
            sub_vocab = getattr(
                getattr(config, name.removesuffix("input_ids") + "config", None), "vocab_size", None
            )
            if not sub_vocab:
                return False
            value, positions = token_ids(sub_vocab, (batch, self.length)), (batch, self.length)
        elif name == "hidden_states" and isinstance(layer := _input_layer(self.model), torch.nn.Conv1d):
            # A convolutional stack's own input, shaped by the layer that reads it: a codec's
            # encoder reads a waveform of the channels that layer takes (VibeVoice's encoder),
            # its decoder latents, (batch, channels, frames).
            value = _waveform(config, batch, length)
            if value.dim() != 3 or value.shape[1] != layer.in_channels:
                value = torch.randn(batch, layer.in_channels, length)
        elif name == getattr(self.model, "main_input_name", None) and _modalities(self.model) == {"audio"}:
            # An audio encoder's main input under a name of its own (Gemma 3n's `audio_mel`): features.
            value, positions = _features(self.model, batch, length)
        elif name.endswith("_position_mask") and (places := self.placed(name)) is not None:
            value = places
        elif (session := self.session(name)) is not None:
            value = session
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

    config = model.config
    parameters = inspect.signature(model.forward).parameters
    main = _main_inputs(model, parameters)
    made = _Inputs(model, seq_len=seq_len, batch_size=batch_size, image_size=image_size)
    made.main = main
    several = [
        name
        for name in _required(parameters)
        if name == "pixel_values"
        or name.endswith("_pixel_values")
        or re.search(r"height,\s*width$", made.documented.get(name, ("", None, True))[1] or "")
    ]
    if image_size is None and len(several) > 1:
        # A model that requires several images and stitches them into one (SegGPT: a prompt above
        # its input, its config's `image_size` the pair's) reads each at its image processor's size.
        made.image_size = _processor_size(config)
    patch_grid = "grid_thw" in parameters or "image_grid_thw" in parameters
    declared = getattr(model, "main_input_name", None)
    # A vision tower that takes its image as flattened patches, with what places them (a row of
    # `PATCHES` where one model names that otherwise): (batch, patches, values) under `pixel_values`.
    flattened = (
        next(iter(_patches_for("main", config, parameters)), None) if main[0] == "pixel_values" else None
    )
    if patch_grid and (main[0] != "input_ids" or "input_ids" not in parameters):  # a vision tower
        made.kwargs.update(_patches(model, parameters))
    elif flattened is not None:
        made.kwargs.update(flattened.apply(made))
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
        and _needed_by_a_part(model, "input_features")
    ):
        # Audio read beside the text by a part of the model that cannot run without it (CLVP's
        # conditioning encoder), not spliced in at placeholders.
        made.add("input_features")
    text = _sub(config, "text_config") is not config and not _placeholders(config, "image", "video")
    if main[0].startswith("pixel_values") and "input_ids" in parameters and text:
        made.add("input_ids")
    for patch in _patches_for("joined", config, parameters):  # what one model adds or changes
        patch.apply(made)
    # A model whose main input only its docstring shapes (Decision Transformer's `states`) reads the
    # other tensors that docstring lists without calling them optional, though they default to None.
    documented_main = main[0] == declared and main[0] in made.from_docstring
    for name in _needed(parameters, made.documented) if documented_main else _required(parameters):
        if name not in made.kwargs:
            made.add(name)
    for name in _refused_when_none(model):  # defaults to None, though the forward raises without it
        if name in parameters and name not in made.kwargs:
            made.add(name)
    for name in parameters:
        # Optional inputs the forward reads all the same: features whose width the config names
        # (LXMERT raises without its regions).
        if type(_width(config, name)) is int and name not in made.kwargs:
            made.add(name)
    pixels = made.kwargs.get("pixel_values")
    for name in parameters:
        if name.endswith("_position_mask") and pixels is not None and name not in made.kwargs:
            made.add(name)  # where the image's vectors go in the text (Kosmos-2)
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
        made.kwargs["decoder_input_ids"] = _decoder_ids(model, made.vocab, batch_size, seq_len)
    if "bbox" in parameters and "bbox" not in made.kwargs:
        grid = getattr(config, "max_2d_position_embeddings", None)
        # A layout model reads a box per token: Bros, whose config embeds no coordinates, in
        # [0, 1]; where the config embeds integer coordinates, on the grid their docstrings give,
        # [0, max_2d_position_embeddings - 1] (UDOP, which needs boxes, clips them to [0, 1]).
        boxes = _boxes(batch_size, made.length if "input_ids" in made.kwargs else seq_len)
        made.kwargs["bbox"] = (boxes * (grid - 1)).long() if type(grid) is int and grid > 1 else boxes
    return made.kwargs


def _refused_when_none(model: Any) -> list[str]:
    """The parameters the forward raises on at once when they are None (Gemma 4's assistant:
    `if inputs_embeds is None or shared_kv_states is None: raise ...`): those an `if` of the
    forward's body that only raises tests with `is None`, alone or joined by `or`."""
    import ast
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(type(model).forward)))
    except (OSError, TypeError, SyntaxError):
        return []
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef) else []
    found: list[str] = []
    for node in body:
        if not (isinstance(node, ast.If) and len(node.body) == 1 and isinstance(node.body[0], ast.Raise)):
            continue
        test = node.test
        tests = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
        names = [
            t.left.id
            for t in tests
            if isinstance(t, ast.Compare)
            and isinstance(t.left, ast.Name)
            and [type(op) for op in t.ops] == [ast.Is]
            and isinstance(t.comparators[0], ast.Constant)
            and t.comparators[0].value is None
        ]
        if len(names) == len(tests):
            found += names
    return found


def _shared_kv_shapes(model: Any, batch_size: int, length: int) -> dict[str, tuple[int, ...]]:
    """The shape of the keys (and values) of `length` positions for each kind of attention layer
    of `model` (its `layer_type`): (batch, key-value heads, positions, head size) as it reads them."""
    shared: dict[str, tuple[int, ...]] = {}
    for module in model.modules():
        kind, size = getattr(module, "layer_type", None), getattr(module, "head_dim", None)
        groups = getattr(module, "num_key_value_groups", None)  # query heads per key-value head
        heads = getattr(getattr(module, "config", None), "num_attention_heads", None)
        if not (isinstance(kind, str) and type(size) is int and type(groups) is int and type(heads) is int):
            continue
        shared.setdefault(kind, (batch_size, heads // groups, length, size))
    return shared


def _decoder_ids(model: Any, vocab: int, batch_size: int, seq_len: int) -> Any:
    """An encoder-decoder's decoder ids, of the decoder's vocabulary (`vocab` where its config
    names none): (batch, length); (batch, length, channels) for a decoder of audio codes with one
    vocabulary per channel, which one table embeds side by side (Dia's `num_channels`)."""
    import torch

    try:
        decoder = model.config.get_text_config(decoder=True)
    except ValueError:  # more than one decoder config: none is the one
        decoder = model.config
    vocab = getattr(decoder, "vocab_size", None) or vocab
    channels = next(
        (n for key in ("num_codebooks", "num_channels") if type(n := getattr(decoder, key, None)) is int), 1
    )
    tables = {m.num_embeddings for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    if channels > 1 and vocab * channels in tables:
        return token_ids(vocab, (batch_size, seq_len, channels), seed=1)
    return token_ids(vocab, (batch_size, seq_len), seed=1)


def _processor_size(config: Any) -> tuple[int, int] | None:
    """The (height, width) the image processor of the config's model type resizes to by default;
    None where it has none, or no fixed size."""
    from transformers.models.auto import image_processing_auto as auto

    names = auto.IMAGE_PROCESSOR_MAPPING_NAMES.get(config.model_type) or {}
    if not isinstance(names, dict):
        names = {"": names}
    pil_first = sorted(set(names.values()) - {None}, key=lambda n: not n.endswith("Pil"))  # no backend needed
    for name in pil_first:
        try:
            size = auto.get_image_processor_class_from_name(name)().size
        except Exception:  # a backend that is not installed, a processor that needs arguments
            continue
        if not isinstance(size, dict):  # transformers 5's SizeDict
            size = {key: getattr(size, key, None) for key in ("height", "width")}
        height, width = size.get("height"), size.get("width")
        if type(height) is int and type(width) is int:
            return height, width
    return None


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


# Per-model patches: what one model (or a few) needs that the general code above cannot read from
# names many models share. Each row keys on an input or config name only those models have.


@dataclass(frozen=True)
class Patch:
    """One special case. `stage` says where the general code applies it and what `apply` takes:
    "side": (config, vision config, (height, width)) -> (height, width), an image's side;
    "make": `_Inputs` -> (value, positions) or None (not this case), the input `sets`;
    "main": `_Inputs` -> inputs, a vision tower's flattened patches and what places them;
    "joined": `_Inputs` -> None, inputs added or changed once the main ones are made."""

    stage: str
    keys: tuple[str, ...]  # forward parameters, or `config.<key>` set in the config or a sub-config
    sets: str
    models: tuple[str, ...]  # the model types that need it
    why: str
    apply: Callable[..., Any]
    transformers: str = "5.24.0"  # the version whose model needed it


def _patches_for(stage: str, config: Any, parameters: Any = (), name: str | None = None) -> Iterator[Patch]:
    """The rows of `PATCHES` of `stage` (that make the input `name`) whose key the config sets or
    the forward takes."""
    for patch in PATCHES:
        if patch.stage != stage or (name is not None and patch.sets != name):
            continue
        if any(
            _find(config, key.removeprefix("config.")) is not None
            if key.startswith("config.")
            else key in parameters
            for key in patch.keys
        ):
            yield patch


def _prompt_side(config: Any, vision: Any, side: tuple[int, int]) -> tuple[int, int]:
    if _find(vision, "image_size") is not None:
        return side
    return _size(getattr(config, "max_img_size", None), None)


def _windowed_side(config: Any, vision: Any, side: tuple[int, int]) -> tuple[int, int]:
    windows, patch = getattr(vision, "num_windows", None), getattr(vision, "patch_size", None)
    if not (type(windows) is int and type(patch) is int and windows > 1):
        return side
    tile = windows * patch
    height, width = (-(-length // tile) * tile for length in side)
    return height, width


def _scaled_side(config: Any, vision: Any, side: tuple[int, int]) -> tuple[int, int]:
    ratios, patch = getattr(config, "scaled_images_ratios", None), getattr(config, "patch_size", None)
    if not (isinstance(ratios, (list, tuple)) and ratios and type(patch) is int):
        return side
    least = math.ceil(patch / min(ratios))
    return max(side[0], least), max(side[1], least)


def _text_and_codes(made: _Inputs) -> tuple[Any, tuple[int, ...]] | None:
    import torch

    streams, codes = (
        getattr(made.config, "num_codebooks", None),
        getattr(made.config, "codebook_vocab_size", None),
    )
    if not (isinstance(streams, int) and isinstance(codes, int)):
        return None
    table = getattr(getattr(made.model.get_input_embeddings(), "embed_tokens", None), "num_embeddings", 0)
    if table != made.vocab + streams * codes + 1:
        return None
    text = token_ids(made.vocab, (made.batch_size * made.codebooks, made.length))
    audio = token_ids(codes, (made.batch_size, made.length, streams), seed=3)
    return torch.cat([text.unsqueeze(-1), audio], dim=-1), (made.batch_size, made.length)


def _task_prompt(made: _Inputs) -> tuple[Any, None] | None:
    length = getattr(made.config, "task_seq_len", None)
    return (token_ids(made.vocab, (made.batch_size, length)), None) if type(length) is int else None


def _high_frequency(made: _Inputs) -> tuple[Any, None]:
    import torch

    return torch.zeros(made.batch_size, 1, dtype=torch.long), None


def _pix2struct_patches(made: _Inputs) -> tuple[Any, None]:
    return _flattened_patches(made.config, made.batch_size, made.seq_len), None


def _codec_latents(made: _Inputs) -> tuple[Any, tuple[int, ...]] | None:
    import torch

    hidden = getattr(made.text, "hidden_size", None) or getattr(made.config, "hidden_size", None)
    if not hidden:
        return None
    return torch.randn(made.batch_size, hidden, made.seq_len), (made.batch_size, made.seq_len)


def _positioned(made: _Inputs) -> dict[str, Any]:
    return _positioned_patches(made.config, made.batch_size, made.seq_len)


def _spatial(made: _Inputs) -> dict[str, Any]:
    return _spatial_patches(made.config, made.batch_size)


def _merge_sizes(made: _Inputs) -> None:
    import torch

    if not ("grid_thw" in made.kwargs or "image_grid_thw" in made.kwargs):
        return
    merges = next(n for n in ("merge_sizes", "image_merge_sizes") if n in made.parameters)
    vision = _sub(made.config, "vision_config")
    made.kwargs[merges] = torch.tensor([getattr(vision, "spatial_merge_size", None) or 1])


def _frames_per_token(made: _Inputs) -> tuple[Any, tuple[int, ...]] | None:
    per_token = _find(made.config, "audio_length_per_tok")
    if not (type(per_token) is int and "input_ids" in made.kwargs):
        return None
    return _features(made.model, made.batch_size, made.length * per_token)


def _query_placeholders(made: _Inputs) -> None:
    config, queries = made.config, getattr(made.config, "num_query_tokens", None)
    main = made.main[0]
    if not (type(queries) is int and main.startswith("pixel_values") and "input_ids" in made.parameters):
        return
    if "input_ids" in made.kwargs:  # a text the model reads beside the image: no placeholders
        return
    made.add("input_ids")
    token = next(
        (
            getattr(config, k)
            for k in ("image_token_id", "video_token_id")
            if type(getattr(config, k, None)) is int
        ),
        None,
    )
    clip = made.kwargs.get(main)
    spliced = queries * (clip.shape[1] if clip is not None and clip.dim() == 5 else 1)
    if token is not None and spliced < made.kwargs["input_ids"].shape[1]:
        made.kwargs["input_ids"][:, :spliced] = token


def _images_per_sample(made: _Inputs) -> None:
    import torch

    pixels = made.kwargs.get("pixel_values")
    # (FLAVA's mask of that name is over image patches, (batch, patches), as its docstring says.)
    over_patches = (made.documented.get("image_attention_mask", ("", None, True))[1] or "").count(",") == 1
    if "input_ids" not in made.kwargs or pixels is None or over_patches:
        return
    if pixels.dim() == 4:
        made.kwargs["pixel_values"] = pixels.unsqueeze(1)
    made.kwargs["image_attention_mask"] = torch.ones(*made.kwargs["input_ids"].shape, 1, dtype=torch.long)


def _default_language(made: _Inputs) -> None:
    if getattr(made.config, "default_language", "") is None and "lang_ids" not in made.kwargs:
        made.add("lang_ids")


def _patch_grid(made: _Inputs) -> None:
    import torch

    pixels: Any = made.kwargs.get("pixel_values")
    if getattr(pixels, "ndim", 0) != 4:
        return
    size = _find(_sub(made.config, "vision_config"), "patch_size") or 14
    height, width = _size(size, None)
    patches = [pixels.shape[-2] // height, pixels.shape[-1] // width]
    made.kwargs["target_sizes"] = torch.tensor([patches] * pixels.shape[0], dtype=torch.int32)


def _fused_crops(made: _Inputs) -> None:
    import torch

    features = made.kwargs.get("input_features")
    extractor = _feature_extractor(made.config) if _find(made.config, "enable_fusion") else None
    if extractor is None or features is None or features.ndim != 4:
        return
    hop = getattr(extractor, "hop_length", None) or 1
    extracted = _extracted(extractor, made.batch_size, features.shape[2] * hop)
    crops = extracted["input_features"].shape[1]
    if crops <= 1:
        return
    made.kwargs["input_features"] = torch.randn(made.batch_size, crops, *features.shape[2:])
    for key, value in extracted.items():
        if key in made.parameters and key not in made.kwargs:
            made.kwargs[key] = value


def _attended_states(made: _Inputs) -> None:
    import torch

    width = getattr(made.config, "encoder_hidden_size", None)
    if width and "encoder_hidden_states" not in made.kwargs:
        made.kwargs["encoder_hidden_states"] = torch.randn(made.batch_size, made.seq_len, width)


def _prompted_frame(made: _Inputs) -> None:
    from amplint.runtime.target import MadeInTrace

    if any(isinstance(value, MadeInTrace) for value in made.kwargs.values()):
        made.kwargs["frame_idx"] = 0


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


PATCHES: tuple[Patch, ...] = (
    Patch(
        "side",
        ("config.max_img_size",),
        "pixel_values",
        ("tvp",),
        "the side its visual prompt pads to is on the model's config, not its vision config's",
        _prompt_side,
    ),
    Patch(
        "side",
        ("config.num_windows",),
        "pixel_values",
        ("rf_detr",),
        "a windowed ViT splits the patch grid into num_windows x num_windows: its processor resizes"
        " to a side they tile (518 -> 560 for a 14-pixel patch and 4 windows)",
        _windowed_side,
    ),
    Patch(
        "side",
        ("config.scaled_images_ratios",),
        "pixel_values",
        ("depth_pro",),
        "it cuts the image, at each of several scales, into patches of `patch_size` pixels: its"
        " smallest scale must hold one (its processor's side, 1536 for 384)",
        _scaled_side,
    ),
    Patch(
        "make",
        ("config.codebook_vocab_size",),
        "input_ids",
        ("kyutai_speech_to_text",),
        "one embedding table for the text and each codebook's stream, summed per position: a text"
        " token, then one code per codebook, at every position",
        _text_and_codes,
    ),
    Patch(
        "make",
        ("config.task_seq_len",),
        "task_inputs",
        ("oneformer",),
        "its task prompt is token ids of the length the config gives",
        _task_prompt,
    ),
    Patch(
        "make",
        ("freq",),
        "freq",
        ("timesfm",),
        "its frequency class: 0 (high), what its forecaster uses when not told",
        _high_frequency,
    ),
    Patch(
        "make",
        ("flattened_patches",),
        "flattened_patches",
        ("pix2struct", "kosmos2_5"),
        "each row holds its patch's row and column (numbered from 1, as its processor does), then its values",
        _pix2struct_patches,
    ),
    Patch(
        "make",
        ("latents",),
        "latents",
        ("mimi_decoder", "pocket_tts_audio_tokenizer_decoder"),
        "what an audio codec's decoder decodes: (batch, hidden, frames)",
        _codec_latents,
    ),
    Patch(
        "main",
        ("pixel_position_ids",),
        "pixel_values",
        ("gemma4", "gemma4_vision"),
        "its vision tower takes flattened patches and each patch's (x, y) place in its image: a"
        " square grid whose side is a multiple of the tower's pooling kernel",
        _positioned,
    ),
    Patch(
        "main",
        ("spatial_shapes",),
        "pixel_values",
        ("siglip2", "siglip2_vision_model"),
        "its NaFlex tower takes a batch of flattened patch sequences and the grid each came from:"
        " a square image that fills its `num_patches`",
        _spatial,
    ),
    Patch(
        "joined",
        ("merge_sizes", "image_merge_sizes"),
        "merge_sizes",
        ("video_llama_3_vision",),
        "its tower is told each image's merge block beside its grid: the config's spatial merge"
        " size, else 1 (what its image processor gives a still image)",
        _merge_sizes,
    ),
    Patch(
        "make",
        ("config.audio_length_per_tok",),
        "input_features",
        ("voxtral_realtime",),
        "it adds its audio to the text token by token: `audio_length_per_tok` frames per token",
        _frames_per_token,
    ),
    Patch(
        "joined",
        ("config.num_query_tokens",),
        "input_ids",
        ("instructblip", "instructblipvideo"),
        "a Q-Former model splices its `num_query_tokens` queries into a prompt at placeholder"
        " tokens: it reads the prompt too, the placeholders first (per frame of a clip)",
        _query_placeholders,
    ),
    Patch(
        "joined",
        ("image_attention_mask",),
        "image_attention_mask",
        ("idefics",),
        "cross-attention from each token to each image of its sample: images come per sample"
        " (batch, images, channels, height, width), one here, attended by every token",
        _images_per_sample,
    ),
    Patch(
        "joined",
        ("lang_ids",),
        "lang_ids",
        ("xmod",),
        "its forward raises without a language when the config sets no default",
        _default_language,
    ),
    Patch(
        "joined",
        ("target_sizes",),
        "target_sizes",
        ("minicpm_ocr_vision", "minicpmv4_7_vision"),
        "a NaViT-style tower sizes its position embeddings by each image's patch grid",
        _patch_grid,
    ),
    Patch(
        "joined",
        ("config.enable_fusion",),
        "input_features",
        ("clap",),
        "a model that fuses a clip's crops reads as many as its feature extractor cuts (a global"
        " view, 3 local) and what the extractor says of the clip (`is_longer`: fuse the crops)",
        _fused_crops,
    ),
    Patch(
        "joined",
        ("encoder_hidden_states",),
        "encoder_hidden_states",
        ("blip_2_qformer",),
        "a cross-attending stack whose config names the width of what it attends to (BLIP-2's"
        " Q-Former over the vision tower's output) cannot run its cross-attention layers without it",
        _attended_states,
    ),
    Patch(
        "joined",
        ("frame_idx",),
        "frame_idx",
        ("sam2_video", "sam3_video", "sam3_tracker_video", "edgetam_video"),
        "a video tracker's forward reads the frame its prompt is on",
        _prompted_frame,
    ),
)
