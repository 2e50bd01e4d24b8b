"""A text dataset the project generates (no download): Python standard-library source as
ShareGPT-style conversations, the format :func:`nightjar_ray.loadgen.dataset.read_dataset`
reads.

Each conversation asks to continue one block of a module's source (a run of lines up to
a blank line, at least ``MIN_BLOCK_CHARS`` long) and answers with the next block. The
text is the kind the generated pairs' tokenizer was trained on (Python source,
:mod:`nightjar_ray.models.pair`), so it tokenizes into the pair's frequent tokens, not
random IDs; a real model reads it as ordinary code. The modules differ from the
tokenizer's training corpus, and the result depends only on the Python version.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import json
import random
from pathlib import Path
from typing import Any

SOURCE_MODULES = ("difflib", "shlex", "configparser", "calendar", "pprint", "fractions")
MIN_BLOCK_CHARS = 200
"""Blocks shorter than this are joined with the next one."""


def _blocks(module: str) -> list[str]:
    source = inspect.getsource(importlib.import_module(module))
    blocks: list[str] = []
    current = ""
    for part in source.split("\n\n"):
        current = f"{current}\n\n{part}" if current else part
        if len(current.strip()) >= MIN_BLOCK_CHARS:
            blocks.append(current.strip("\n"))
            current = ""
    return blocks


def generated_conversations(num_conversations: int, seed: int = 0) -> list[dict[str, Any]]:
    """``num_conversations`` ShareGPT-style entries (module docstring), shuffled by
    ``seed``; ``ValueError`` if the modules hold fewer block pairs."""
    pairs = []
    for module in SOURCE_MODULES:
        blocks = _blocks(module)
        pairs += [(module, a, b) for a, b in itertools.pairwise(blocks)]
    if not 1 <= num_conversations <= len(pairs):
        raise ValueError(f"num_conversations must be in [1, {len(pairs)}], got {num_conversations}")
    random.Random(seed).shuffle(pairs)
    return [
        {
            "id": f"{module}-{i}",
            "conversations": [
                {"from": "human", "value": f"Continue this code from `{module}`:\n\n{first}"},
                {"from": "gpt", "value": second},
            ],
        }
        for i, (module, first, second) in enumerate(pairs[:num_conversations])
    ]


def write_generated_dataset(path: Path, num_conversations: int = 200, seed: int = 0) -> Path:
    """Write :func:`generated_conversations` to ``path`` as JSON Lines; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps(c) for c in generated_conversations(num_conversations, seed))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def generated_prompts(num_conversations: int = 200, seed: int = 0) -> list[str]:
    """The prompt texts of :func:`generated_conversations` (what a dataset file of them
    gives to :func:`nightjar_ray.loadgen.dataset.read_dataset`)."""
    entries = generated_conversations(num_conversations, seed)
    return [str(e["conversations"][0]["value"]) for e in entries]
