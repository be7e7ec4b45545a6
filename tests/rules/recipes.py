"""The shipped Alertmanager recipes on a real Alertmanager, as the tests run them: every receiver's URL on a
local webhook, and timers of a second."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.processes import Alertmanager, WebhookReceiver
from tests.support.tools import require

from .promql import REPO_ROOT

ALERTS = REPO_ROOT / "alerts"


def local(shipped: dict[str, Any], webhook: str, *, group_wait: str | None = "1s") -> dict[str, Any]:
    """The shipped configuration with every receiver's URL on ``webhook`` and timers of a second;
    ``group_wait=None`` keeps the shipped group_wait of every route."""
    config = copy.deepcopy(shipped)
    routes = [config["route"], *config["route"]["routes"]]
    for route in routes:
        route.update({"group_interval": "1s", "repeat_interval": "1h"})
        if group_wait is not None:
            route["group_wait"] = group_wait
    for receiver in config["receivers"]:
        for slack in receiver.get("slack_configs", []):
            slack["api_url"] = f"{webhook}/{receiver['name']}/slack"
        for pager in receiver.get("pagerduty_configs", []):
            pager["url"] = f"{webhook}/{receiver['name']}/pagerduty"
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{webhook}/{receiver['name']}/webhook"
    return config


@contextmanager
def running(
    tmp_path: Path, config_text: str, *, group_wait: str | None = "1s"
) -> Iterator[tuple[Alertmanager, WebhookReceiver]]:
    """Alertmanager with ``config_text`` (an alertmanager.yml), its receivers on a local webhook (group_wait as
    in ``local``)."""
    binary = require("prometheus-alertmanager", "alertmanager")
    webhook = WebhookReceiver().start()
    shipped = yaml.safe_load(config_text)
    config = tmp_path / "alertmanager.yml"
    config.write_text(yaml.safe_dump(local(shipped, webhook.url, group_wait=group_wait), sort_keys=False))
    shutil.copy(ALERTS / "se-exporter.tmpl", tmp_path / "se-exporter.tmpl")  # templates: relative to the config
    manager = Alertmanager(binary, config, tmp_path)
    try:
        manager.wait_ready()
        yield manager, webhook
    finally:
        manager.close()
        webhook.stop()


def firing(labels: dict[str, str], description: str = "") -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "labels": labels,
        "annotations": {"summary": "s", "description": description or f"{labels['alertname']} for the test"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(),
    }
