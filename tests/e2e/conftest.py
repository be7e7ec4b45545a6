"""The module-scoped end-to-end stack: simulator, exporter, Prometheus, Alertmanager, webhook (stack.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.processes import require_binary
from tests.e2e.stack import Stack, running_stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Started once per module (about 15 s), shared by its tests, always stopped afterwards."""
    prometheus_bin = require_binary("prometheus")
    alertmanager_bin = require_binary("prometheus-alertmanager", "alertmanager")
    with running_stack(tmp_path_factory.mktemp("e2e"), prometheus_bin, alertmanager_bin) as started:
        yield started
