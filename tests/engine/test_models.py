"""The generated pair follows the recipe: 1-layer draft = target's layer 0, scaled residuals."""

import json
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file

from nightjar_ray.models.pair import TINY_SPEC, generate_pair


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(next(model_dir.glob("*.safetensors"))))


def test_draft_is_target_layer0_and_generation_is_reused(tmp_path: Path) -> None:
    spec = replace(TINY_SPEC, residual_scale=0.05, dtype="float32")
    pair = generate_pair(tmp_path, spec)
    target, draft = weights(pair.target_dir), weights(pair.draft_dir)
    assert json.loads((pair.draft_dir / "config.json").read_text())["num_hidden_layers"] == 1
    assert not any(k.startswith("model.layers.1.") for k in draft)
    for key, tensor in draft.items():
        assert torch.equal(tensor, target[key]), key
    # residual branches of layers >= 1 are scaled down relative to layer 0
    o0 = target["model.layers.0.self_attn.o_proj.weight"].abs().mean()
    o1 = target["model.layers.1.self_attn.o_proj.weight"].abs().mean()
    assert o1 < 0.1 * o0
    stamp = (pair.target_dir / "config.json").stat().st_mtime_ns
    assert generate_pair(tmp_path, spec) == pair
    assert (pair.target_dir / "config.json").stat().st_mtime_ns == stamp
