"""Sections of the top-level README, for tests that check what it shows."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def section(title: str) -> str:
    """The text of the ``## title`` section, up to the next ``## `` heading."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]
