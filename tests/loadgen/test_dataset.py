"""Prompts from a dataset file: both formats, the generated dataset, and prompts fitted to
exact lengths with the generated pair's tokenizer (pure; no endpoint)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.cli.loadgen import build_requests, dataset_texts, prompt_source
from nightjar_ray.cli.main import build_parser
from nightjar_ray.loadgen.dataset import (
    RandomTokens,
    TextPrompts,
    load_tokenizer,
    read_dataset,
)
from nightjar_ray.loadgen.generated_text import (
    generated_conversations,
    generated_prompts,
    write_generated_dataset,
)
from nightjar_ray.models.pair import TINY_SPEC, build_tokenizer


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny pair's tokenizer, saved as a model directory would hold it."""
    path = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer(TINY_SPEC.vocab_size).save_pretrained(path)
    return path


def _sharegpt(human: str) -> dict[str, Any]:
    return {
        "conversations": [
            {"from": "system", "value": "be brief"},
            {"from": "human", "value": human},
            {"from": "gpt", "value": "an answer"},
        ]
    }


def test_sharegpt_json_list_and_jsonl_prompts_are_read(tmp_path: Path) -> None:
    listed = tmp_path / "sharegpt.json"
    listed.write_text(json.dumps([_sharegpt("first"), _sharegpt("second")]))
    assert read_dataset(listed) == ["first", "second"]
    lines = tmp_path / "prompts.jsonl"
    user_turn = {"conversations": [{"from": "user", "value": "third"}]}
    lines.write_text(f'{{"prompt": "one"}}\n\n{json.dumps(user_turn)}\n{{"prompt": "two"}}\n')
    assert read_dataset(lines) == ["one", "third", "two"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "ok"}\n{"text": "x"}\n', r"prompts\.jsonl line 2: expected a 'prompt'"),
        ('{"prompt": ""}\n', r"line 1: 'prompt' must be a non-empty string"),
        ('{"prompt": "ok"}\n{not json\n', r"line 2: not valid JSON"),
        ('{"conversations": [{"from": "gpt", "value": "a"}]}\n', "no non-empty human"),
        ('{"conversations": [{"from": "human"}]}\n', r"conversations\[0\] needs 'from'"),
        ('{"conversations": "hello"}\n', "'conversations' must be a list"),
        ("[]", "no entries"),
        ('[{"prompt": "a"}, 3]', r"prompts\.jsonl entry 1: expected a 'prompt'"),
    ],
)
def test_a_bad_entry_is_named_with_its_field(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        read_dataset(path)


def test_a_missing_dataset_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--dataset: file .*missing\.jsonl does not exist"):
        read_dataset(tmp_path / "missing.jsonl")


def test_the_generated_dataset_file_reads_back_as_its_prompts(tmp_path: Path) -> None:
    path = write_generated_dataset(tmp_path / "generated.jsonl", num_conversations=50, seed=3)
    assert read_dataset(path) == generated_prompts(50, seed=3)
    entries = generated_conversations(50, seed=3)
    assert len({e["id"] for e in entries}) == 50
    assert all(e["conversations"][1]["value"] for e in entries)  # the next block answers
    assert generated_prompts(50, seed=3) != generated_prompts(50, seed=4)  # seeded order
    with pytest.raises(ValueError, match="num_conversations must be in"):
        generated_conversations(0)


def test_text_prompts_hit_exact_lengths_by_cutting_or_joining(tokenizer_dir: Path) -> None:
    tokenizer = load_tokenizer(str(tokenizer_dir))
    texts = ["def parse(self, args):\n    return args", "import json"]
    source = TextPrompts(texts, tokenizer)
    first = tokenizer.encode(texts[0])
    for n in (1, 3, len(first), len(first) + 1, 200):
        ids = source.prompt(n, random.Random(n))
        assert len(ids) == n
    rng = random.Random(0)
    start = random.Random(0).randrange(2)
    ids = source.prompt(200, rng)
    whole = tokenizer.decode(list(ids))  # type: ignore[attr-defined]
    assert whole.startswith(texts[start] + "\n\n" + texts[1 - start] + "\n\n" + texts[start])
    assert source.prompt(5, random.Random(7)) == source.prompt(5, random.Random(7))


def test_random_tokens_stay_below_the_vocabulary() -> None:
    ids = RandomTokens(50).prompt(400, random.Random(0))
    assert len(ids) == 400 and min(ids) >= 10 and max(ids) < 50
    with pytest.raises(ValueError, match="--vocab-size must be > 10"):
        RandomTokens(10)


def test_a_tokenizer_that_cannot_load_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--tokenizer: cannot load a tokenizer from"):
        load_tokenizer(str(tmp_path / "no-model"))


def test_the_flags_build_dataset_prompts_of_the_requested_lengths(
    tmp_path: Path, tokenizer_dir: Path
) -> None:
    path = write_generated_dataset(tmp_path / "data.jsonl", num_conversations=20)
    flags = ["loadgen", "--dataset", str(path), "--tokenizer", str(tokenizer_dir), "--rate",
             "5", "--duration-s", "10", "--input-len", "16:64", "--output-len", "9"]  # fmt: skip
    args = build_parser().parse_args(flags)
    requests = build_requests(args, prompt_source(args, dataset_texts(args), "served-name"))
    assert len(requests) > 20 and {r.num_output_tokens for r in requests} == {9}
    prompts = [r.prompt for r in requests if isinstance(r.prompt, tuple)]
    assert len(prompts) == len(requests)
    assert all(16 <= len(p) <= 64 for p in prompts)
    tokenizer = load_tokenizer(str(tokenizer_dir))
    texts = read_dataset(path)
    decoded = tokenizer.decode(list(prompts[0]))  # type: ignore[attr-defined]
    assert any(text.startswith(decoded) or decoded.startswith(text) for text in texts)
    random_args = build_parser().parse_args(["loadgen", "--dataset", "random"])
    assert dataset_texts(random_args) is None
    assert dataset_texts(build_parser().parse_args(["loadgen", "--dataset", "generated"]))
