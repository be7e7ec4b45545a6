"""The dashboards are built with grafana-foundation-sdk's typed builders (issue 47), pinned to one Grafana build.

``test_dashboards_static.py::test_generated_files_are_up_to_date`` regenerates the committed JSON byte for byte;
here, the JSON is read back into the SDK's typed models of that Grafana version and written again: a key the
schema does not know (a typo, a field of another version) is dropped on the way and the two differ.
"""

from __future__ import annotations

import json
import re
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from grafana_foundation_sdk.cog import plugins
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))


def _through_the_schema(data: dict[str, Any]) -> Any:
    plugins.register_default_plugins()  # panel options and queries decoded by their plugin's own model
    return json.loads(json.dumps(dm.Dashboard.from_json(data), cls=JSONEncoder))


@pytest.mark.parametrize("path", DASHBOARDS, ids=[path.name for path in DASHBOARDS])
def test_every_field_of_the_committed_dashboards_is_in_the_schema(path: Path) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert _through_the_schema(data) == data


def test_a_field_the_schema_does_not_know_is_caught() -> None:
    data = json.loads(DASHBOARDS[0].read_text(encoding="utf-8"))
    panel = next(p for p in data["panels"] if p["type"] == "timeseries")
    panel["fieldConfig"]["defaults"]["unitt"] = "s"  # a typo the hand-written dictionaries could carry
    assert _through_the_schema(data) != data


def test_the_sdk_is_pinned_to_the_grafana_version_the_readme_names_and_never_a_runtime_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (pin,) = project["optional-dependencies"]["dashboards"]
    grafana = re.fullmatch(r"grafana-foundation-sdk==\d+!(\d+\.\d+)\.0", pin)
    assert grafana, pin
    assert version("grafana-foundation-sdk").endswith(f"!{grafana.group(1)}.0"), "the installed build is the pinned one"
    assert f"Grafana {grafana.group(1)}" in (ROOT / "dashboards" / "README.md").read_text(encoding="utf-8")
    assert not [r for r in project["dependencies"] if "grafana" in r], "a build-time dependency only"
    imports = [p for p in (ROOT / "se_exporter").rglob("*.py") if "grafana_foundation_sdk" in p.read_text("utf-8")]
    assert not imports, imports
