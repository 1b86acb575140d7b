"""Each row of `hf_inputs.PATCHES` (a special case of one model, or a few) is needed: built from
its default config (every stack shrunk to 2 layers, as docs/hf-coverage.md builds it), a model
type the row names gets a different input without the row and its trace fails; with the row the
trace's forward runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from amplint.runtime import hf_inputs  # noqa: E402
from amplint.runtime.child import run_traced  # noqa: E402
from amplint.runtime.graph import TraceError  # noqa: E402
from amplint.runtime.hf import build  # noqa: E402
from amplint.runtime.target import TargetError  # noqa: E402

# apply's name -> the model type it is shown on, keys set on its default config (InstructBLIP's
# placeholder token, as benchmarks/hf_checkpoint_keys.json sets it) and the batch size (TimesFM's
# trace runs on a batch of one without its row: its frequency embedding, (batch, width) without
# the row's step axis, broadcasts over the patches only then).
EXAMPLES: dict[str, tuple[str, dict[str, Any], int]] = {
    "_prompt_side": ("tvp", {}, 1),
    "_windowed_side": ("rf_detr", {}, 1),
    "_scaled_side": ("depth_pro", {}, 1),
    "_text_and_codes": ("kyutai_speech_to_text", {}, 1),
    "_task_prompt": ("oneformer", {}, 1),
    "_high_frequency": ("timesfm", {}, 2),
    "_pix2struct_patches": ("pix2struct", {}, 1),
    "_codec_latents": ("mimi_decoder", {}, 1),
    "_frames_per_token": ("voxtral_realtime", {}, 1),
    "_positioned": ("gemma4_vision", {}, 1),
    "_spatial": ("siglip2_vision_model", {}, 1),
    "_merge_sizes": ("video_llama_3_vision", {}, 1),
    "_query_placeholders": ("instructblip", {"image_token_index": 32001}, 1),
    "_images_per_sample": ("idefics", {}, 1),
    "_default_language": ("xmod", {}, 1),
    "_patch_grid": ("minicpm_ocr_vision", {}, 1),
    "_fused_crops": ("clap", {"audio_config": {"enable_fusion": True}}, 1),
    "_attended_states": ("blip_2_qformer", {}, 1),
    "_prompted_frame": ("sam2_video", {}, 1),
}


def _spec(tmp_path: Path, model_type: str, keys: dict[str, Any], batch_size: int) -> dict[str, Any]:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": model_type, **keys}), encoding="utf-8")
    return {
        "hf_config": str(config),
        "layers": 2,
        "seq_len": 64,
        "batch_size": batch_size,
        "attn_implementation": "eager",
        "device": "cuda",
        "dtype": "bfloat16",
        "autocast": True,
        "param_dtype": None,
    }


def _described(value: Any) -> Any:
    """What the input is: a tensor's shape, dtype and (for integers) values; else its type."""
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.dtype, None if value.is_floating_point() else value.tolist())
    return type(value).__name__ if value is not None else None


def _inputs(spec: dict[str, Any]) -> dict[str, Any]:
    keys = ("layers", "seq_len", "batch_size", "attn_implementation")
    return build(spec["hf_config"], **{key: spec[key] for key in keys})[2]


@pytest.mark.parametrize("patch", hf_inputs.PATCHES, ids=[p.apply.__name__ for p in hf_inputs.PATCHES])
def test_each_patch_is_needed(patch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model_type, keys, batch_size = EXAMPLES[patch.apply.__name__]
    assert model_type in patch.models
    spec = _spec(tmp_path, model_type, keys, batch_size)
    made = _inputs(spec)
    with monkeypatch.context() as without:
        without.setattr(hf_inputs, "PATCHES", tuple(p for p in hf_inputs.PATCHES if p is not patch))
        assert _described(_inputs(spec).get(patch.sets)) != _described(made.get(patch.sets))
        with pytest.raises((TraceError, TargetError)):
            run_traced(spec)
    graph = run_traced(spec)
    assert sum(node.policy != "input" for node in graph.nodes) > 10


def test_every_row_names_what_it_keys_on_and_why() -> None:
    for patch in hf_inputs.PATCHES:
        assert patch.stage in ("side", "make", "main", "joined") and patch.keys and patch.models
        assert patch.why and patch.transformers
    assert set(EXAMPLES) == {patch.apply.__name__ for patch in hf_inputs.PATCHES}
