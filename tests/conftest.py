"""Helpers shared by every test package."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def trace_path() -> Path:
    """The Azure conversation trace, shared next to the checkout (``../shared/data``); it is
    not part of the repository, so tests that need it skip when it is absent."""
    return REPO_ROOT.parent / "shared" / "data" / "azure_llm_inference_trace_conv_2023.csv"
