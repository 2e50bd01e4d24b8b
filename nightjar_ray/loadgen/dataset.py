"""Prompts for the load generator: token IDs fitted to each request's prompt length.

A :class:`PromptSource` turns a requested prompt length into exactly that many token
IDs (the completions API accepts token IDs, so the server sees the length the workload
asked for). Two sources:

- :class:`RandomTokens`: uniform IDs below a vocabulary size (no tokenizer needed; the
  draft's acceptance on such prompts says nothing about a real workload);
- :class:`TextPrompts`: text from a dataset file, tokenized with the served model's
  tokenizer; a request starts at a random text (seeded) and takes the next texts,
  separated by a blank line, until it has enough tokens, then cuts the rest.

Dataset files (:func:`read_dataset`) are a JSON list or JSON Lines of either
ShareGPT-style conversations, ``{"conversations": [{"from": "human", "value": "..."},
...]}`` (the first human or user turn is the text), or plain prompts, ``{"prompt": "..."}``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

FIRST_TOKEN_ID = 10
"""Random token IDs are drawn from ``[FIRST_TOKEN_ID, vocab_size)`` (skips special tokens)."""
HUMAN_ROLES = ("human", "user")
"""ShareGPT ``from`` values whose turn is a prompt."""
TEXT_SEPARATOR = "\n\n"
"""Put between two texts when one is too short for the requested length."""


class PromptSource(Protocol):
    """Makes prompts of exact lengths."""

    def prompt(self, num_tokens: int, rng: random.Random) -> tuple[int, ...]:
        """Exactly ``num_tokens`` (>= 1) token IDs; all randomness from ``rng``."""
        ...


class RandomTokens:
    """Uniform token IDs in ``[FIRST_TOKEN_ID, vocab_size)``."""

    def __init__(self, vocab_size: int) -> None:
        if vocab_size <= FIRST_TOKEN_ID:
            raise ValueError(f"--vocab-size must be > {FIRST_TOKEN_ID}, got {vocab_size}")
        self.vocab_size = vocab_size

    def prompt(self, num_tokens: int, rng: random.Random) -> tuple[int, ...]:
        return tuple(rng.randrange(FIRST_TOKEN_ID, self.vocab_size) for _ in range(num_tokens))


class Tokenizer(Protocol):
    """What :class:`TextPrompts` needs of a Hugging Face tokenizer."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...


class TextPrompts:
    """Dataset texts cut or joined to the requested length (module docstring)."""

    def __init__(self, texts: Sequence[str], tokenizer: Tokenizer) -> None:
        if not texts:
            raise ValueError("the dataset holds no prompt")
        self.texts, self.tokenizer = list(texts), tokenizer
        self._separator = tokenizer.encode(TEXT_SEPARATOR, add_special_tokens=False)
        self._cache: dict[int, list[int]] = {}

    def _tokens(self, index: int, first: bool) -> list[int]:
        if first:  # special tokens (a BOS) as the server would add to a text prompt
            return self.tokenizer.encode(self.texts[index], add_special_tokens=True)
        if index not in self._cache:
            ids = self.tokenizer.encode(self.texts[index], add_special_tokens=False)
            self._cache[index] = self._separator + ids
        return self._cache[index]

    def prompt(self, num_tokens: int, rng: random.Random) -> tuple[int, ...]:
        start = rng.randrange(len(self.texts))
        ids = self._tokens(start, first=True)
        for step in range(1, 1 + len(self.texts) * (num_tokens + 1)):
            if len(ids) >= num_tokens:
                break
            ids = ids + self._tokens((start + step) % len(self.texts), first=False)
        if len(ids) < num_tokens:
            raise ValueError("the dataset's texts tokenize to nothing")
        return tuple(ids[:num_tokens])


def read_dataset(path: Path) -> list[str]:
    """The prompt texts of a dataset file (module docstring); ``ValueError`` naming the
    file, the entry and the field for anything else."""
    if not path.is_file():
        raise ValueError(f"--dataset: file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    entries: list[tuple[str, Any]]
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        entries = [(f"entry {i}", item) for i, item in enumerate(items)]
    else:
        entries = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    entries.append((f"line {n}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path} line {n}: not valid JSON ({e})") from None
    texts = [_prompt_text(item, f"{path} {where}") for where, item in entries]
    if not texts:
        raise ValueError(f"{path}: no entries")
    return texts


def _prompt_text(item: Any, where: str) -> str:
    if isinstance(item, dict) and "prompt" in item:
        prompt = item["prompt"]
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"{where}: 'prompt' must be a non-empty string")
        return prompt
    if isinstance(item, dict) and "conversations" in item:
        turns = item["conversations"]
        if not isinstance(turns, list):
            raise ValueError(f"{where}: 'conversations' must be a list of turns")
        for i, turn in enumerate(turns):
            if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                raise ValueError(f"{where}: conversations[{i}] needs 'from' and 'value'")
            if turn.get("from") in HUMAN_ROLES and turn["value"]:
                return str(turn["value"])
        raise ValueError(f"{where}: 'conversations' has no non-empty human or user turn")
    raise ValueError(
        f"{where}: expected a 'prompt' string or ShareGPT 'conversations' "
        '([{"from": "human", "value": ...}, ...])'
    )


def load_tokenizer(name_or_path: str) -> Tokenizer:
    """The Hugging Face tokenizer of a model (a local directory works offline);
    ``ValueError`` naming ``--tokenizer`` if it cannot be loaded."""
    from transformers import AutoTokenizer

    try:
        tokenizer: Tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    except (OSError, ValueError) as e:
        raise ValueError(
            f"--tokenizer: cannot load a tokenizer from {name_or_path!r} (a Hugging Face "
            f"model ID or a local model directory): {str(e).splitlines()[0]}"
        ) from None
    return tokenizer
