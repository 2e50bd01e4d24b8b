"""A generated target/draft model pair with a tunable acceptance rate.

Nothing can be downloaded at run time, so tests, benchmarks and the profiler
build their models here::

    target (Llama, L layers)                draft (Llama, 1 layer)
    +-------------------------+             +-------------------------+
    | embed_tokens            | -- copy --> | embed_tokens            |
    | layer 0                 | -- copy --> | layer 0                 |
    | layers 1..L-1           |             |                         |
    |   o_proj, down_proj * s |             |                         |
    | norm, lm_head           | -- copy --> | norm, lm_head           |
    +-------------------------+             +-------------------------+

Scaling the residual-branch output projections of layers 1..L-1 by ``s``
makes the target's deeper layers a small perturbation of layer 0, so the
1-layer draft agrees with the target often: smaller ``s`` gives higher
acceptance (s=0.05, the default, is the pair the demo and benchmarks use).
``draft="copy"`` makes the draft an exact copy of the target (acceptance ~1 under
greedy float32), which the catch-up tests use.

The tokenizer is a byte-level BPE trained in about a second on Python's own
standard-library source, so no data set is needed either.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

TOKENIZER_CORPUS_MODULES = ("argparse", "json.decoder", "textwrap", "string", "csv")
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
"""A plain role-prefixed template, so ``/v1/chat/completions`` works on generated pairs."""
PAIR_FORMAT = 2
"""Bumped when generated files change (2: chat template); older caches are rebuilt."""


@dataclass(frozen=True)
class PairSpec:
    """Shape of a generated pair. Defaults: the 79M-parameter s=0.05 benchmark pair."""

    num_layers: int = 12
    hidden_size: int = 768
    intermediate_size: int = 2048
    num_heads: int = 12
    num_kv_heads: int = 4
    vocab_size: int = 2048
    residual_scale: float = 0.05
    """``s``: multiplier on ``o_proj``/``down_proj`` of layers 1..L-1."""
    dtype: Literal["bfloat16", "float32"] = "bfloat16"
    draft: Literal["layer0", "copy"] = "layer0"
    """``layer0``: 1-layer draft from the target; ``copy``: draft = target."""
    max_position_embeddings: int = 2048
    seed: int = 0


TINY_SPEC = PairSpec(
    num_layers=4,
    hidden_size=256,
    intermediate_size=512,
    num_heads=4,
    num_kv_heads=2,
    vocab_size=1024,
)
"""A small pair for CPU tests: seconds to build and to run."""


@dataclass(frozen=True)
class ModelPair:
    """Paths of a generated pair (each a Hugging Face model directory)."""

    target_dir: Path
    draft_dir: Path
    spec: PairSpec


def _tokenizer_corpus() -> list[str]:
    import importlib

    texts = [inspect.getsource(importlib.import_module(m)) for m in TOKENIZER_CORPUS_MODULES]
    return [line for text in texts for line in text.splitlines() if line.strip()]


def build_tokenizer(vocab_size: int) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` with ``vocab_size`` entries."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_tokenizer_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", chat_template=CHAT_TEMPLATE
    )


def _llama_config(spec: PairSpec, num_layers: int, tokenizer: Any) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        torch_dtype=spec.dtype,
    )


def _build_target(spec: PairSpec, tokenizer: Any) -> Any:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(_llama_config(spec, spec.num_layers, tokenizer))
    with torch.no_grad():
        for layer in model.model.layers[1:]:
            layer.self_attn.o_proj.weight.mul_(spec.residual_scale)
            layer.mlp.down_proj.weight.mul_(spec.residual_scale)
    return model


def _build_layer0_draft(spec: PairSpec, target: Any, tokenizer: Any) -> Any:
    from transformers import LlamaForCausalLM

    draft = LlamaForCausalLM(_llama_config(spec, 1, tokenizer))
    state = {
        k: v
        for k, v in target.state_dict().items()
        if not k.startswith("model.layers.") or k.startswith("model.layers.0.")
    }
    draft.load_state_dict(state)
    return draft


def _save(model: Any, tokenizer: Any, out_dir: Path, dtype: str) -> None:
    import torch

    model.to(getattr(torch, dtype)).save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def generate_pair(out_dir: str | Path, spec: PairSpec = PairSpec()) -> ModelPair:
    """Write ``target/`` and ``draft/`` under ``out_dir`` (reused if present).

    A ``pair.json`` records the spec; an existing directory with the same spec
    is reused as is, so fixtures and CLI runs can share one generation.
    """
    out = Path(out_dir)
    pair = ModelPair(out / "target", out / "draft", spec)
    marker = out / "pair.json"
    wanted = json.dumps({**spec.__dict__, "format": PAIR_FORMAT}, sort_keys=True)
    if marker.is_file() and marker.read_text() == wanted:
        return pair
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec.vocab_size)
    target = _build_target(spec, tokenizer)
    draft = target if spec.draft == "copy" else _build_layer0_draft(spec, target, tokenizer)
    _save(target, tokenizer, pair.target_dir, spec.dtype)
    _save(draft, tokenizer, pair.draft_dir, spec.dtype)
    marker.write_text(wanted)
    return pair
