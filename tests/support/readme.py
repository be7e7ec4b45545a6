"""The README and the docs/ pages, for tests that check what they show."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"


def section(title: str, path: Path = README) -> str:
    """The text of the ``## title`` section of ``path``, up to the next ``## `` heading."""
    text = path.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def code_blocks(text: str, language: str) -> list[str]:
    """The fenced ``language`` blocks of ``text``, without their fences."""
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def marked(path: Path, marker: str) -> str:
    """The one code block between ``<!-- marker -->`` and ``<!-- /marker -->``."""
    text = path.read_text(encoding="utf-8")
    inner = text[text.index(f"<!-- {marker} -->") : text.index(f"<!-- /{marker} -->")]
    (block,) = code_blocks(inner, "sh")
    return block
