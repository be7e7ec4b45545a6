"""Fixtures of the rule and recipe tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.processes import Alertmanager, WebhookReceiver

from .recipes import ALERTS, running


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[tuple[Alertmanager, WebhookReceiver]]:
    """The shipped alerts/alertmanager.yml, running."""
    with running(tmp_path, (ALERTS / "alertmanager.yml").read_text(encoding="utf-8")) as started:
        yield started
