"""The Helm chart, by the real helm: lint, every ci/ values file, the schema's refusals, and every object
validated (core kinds by kubernetes-validate, the monitors and rules by prometheus-operator's models)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from se_exporter import __version__
from tests.deploy.helm import CHART, CI_VALUES, NAMESPACE, Helm, Rendered
from tests.deploy.support import DASHBOARDS_DIR, REPO, load_yaml
from tests.support.tools import require

pytestmark = pytest.mark.debian

EVERYTHING = CHART / "ci" / "everything-values.yaml"
OPERATOR_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")  # cloudcoil's models of them
CORE_KINDS = {"DaemonSet", "Service", "ServiceAccount", "ConfigMap", "NetworkPolicy"}


def test_lint_strict(helm: Helm) -> None:
    for values in (None, *CI_VALUES):
        args = ["lint", "--strict", str(CHART), "--namespace", NAMESPACE]
        result = helm.run(*args, *(["--values", str(values)] if values else []))
        assert "0 chart(s) failed" in result.stdout, result.stdout


def test_defaults_render_only_what_needs_no_crd(helm: Helm) -> None:
    assert helm.template().kinds() == ["DaemonSet", "Service", "ServiceAccount"]


RENDERS = {  # each ci/ values file -> the kinds it renders, sorted
    "default": "DaemonSet Service ServiceAccount",
    "azure-monitor": "DaemonSet PodMonitor Service ServiceAccount",
    "kube-prometheus": "ConfigMap ConfigMap DaemonSet PrometheusRule Service ServiceAccount ServiceMonitor",
    "approval-otel-tls": "ConfigMap DaemonSet NetworkPolicy Service ServiceAccount ServiceMonitor",
    "windows": "DaemonSet DaemonSet Service ServiceAccount",
    "everything": "ConfigMap ConfigMap DaemonSet DaemonSet NetworkPolicy PodMonitor PrometheusRule Service "
    "ServiceAccount ServiceMonitor",
}


def test_the_ci_folder_holds_the_combinations() -> None:
    assert {p.name for p in CI_VALUES} == {f"{name}-values.yaml" for name in RENDERS}


@pytest.mark.parametrize(("values", "kinds"), RENDERS.items())
def test_each_ci_values_file_renders_its_objects(helm: Helm, values: str, kinds: str) -> None:
    assert helm.template(CHART / "ci" / f"{values}-values.yaml").kinds() == kinds.split()


@pytest.fixture(scope="module")
def every_rendering(helm: Helm) -> list[Rendered]:
    """The defaults and every ci/ file, rendered once for the validators."""
    return [helm.template(), *(helm.template(values) for values in CI_VALUES)]


def test_core_kinds_pass_kubernetes_validate_strict(every_rendering: list[Rendered], tmp_path: Path) -> None:
    tool = require("kubernetes-validate")
    files = []
    for number, rendered in enumerate(every_rendering):
        for index, doc in enumerate(d for d in rendered.documents if d["kind"] in CORE_KINDS):
            files.append(tmp_path / f"{number}-{index}-{doc['kind']}.yaml")
            files[-1].write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = subprocess.run(
        [tool, "--strict", *map(str, files)], capture_output=True, text=True, timeout=300, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "ERROR" not in output and "WARN" not in output, output
    assert output.count(" passed ") == len(files), output


def _round_trip(doc: dict[str, Any]) -> dict[str, Any]:
    """The object as prometheus-operator's model reads it: a key the model does not know is lost, so a
    difference is an unknown key (or a wrong type). Azure's azmonitoring group has the same schema."""
    as_operator = {**doc, "apiVersion": "monitoring.coreos.com/v1"}
    # Imported here: the models take seconds to import, which every worker would pay at collection.
    from cloudcoil.models.prometheus_operator import v1 as operator

    model = getattr(operator, doc["kind"]).model_validate(as_operator)
    dumped: dict[str, Any] = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return {**dumped, "apiVersion": doc["apiVersion"]}


def test_monitors_and_rules_match_the_prometheus_operator_schema(every_rendering: list[Rendered]) -> None:
    checked = set()
    for rendered in every_rendering:
        for doc in rendered.documents:
            if doc["kind"] in OPERATOR_KINDS:
                assert doc["apiVersion"] in ("monitoring.coreos.com/v1", "azmonitoring.coreos.com/v1")
                assert _round_trip(doc) == doc, doc["kind"]
                checked.add((doc["kind"], doc["apiVersion"]))
    assert {kind for kind, _ in checked} == set(OPERATOR_KINDS)
    assert ("PodMonitor", "azmonitoring.coreos.com/v1") in checked


def test_the_round_trip_notices_an_unknown_key() -> None:
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "m"},
        "spec": {"selector": {}, "endpoints": [{"port": "metrics", "relabellings": []}]},
    }
    assert _round_trip(monitor) != monitor


@pytest.mark.parametrize(
    ("option", "values", "message"),
    [
        ("--set-string", "state.enabled=yes", "at '/state/enabled': got string, want boolean"),
        ("--set", "approval.enabled=1", "at '/approval/enabled': got number, want boolean"),
        ("--set-string", "service.port=http", "at '/service/port': got string, want integer"),
        ("--set", "serviceMonitor.apiVersion=monitoring.coreos.com/v2", "at '/serviceMonitor/apiVersion'"),
        ("--set", "opentelemetry.protocol=thrift", "at '/opentelemetry/protocol'"),
        ("--set", "tolerations=everything", "at '/tolerations': got string, want array"),
        ("--set", "webConfig.existingSecet=web", "at '/webConfig': additional properties 'existingSecet'"),
        ("--set", "serviceMonitor.intervall=30s", "at '/serviceMonitor': additional properties 'intervall'"),
        ("--set", "unknownTopLevel=1", "additional properties 'unknownTopLevel' not allowed"),
        ("--set", "image.digest=latest", "at '/image/digest'"),
        ("--set-string", "hostNetwork=yes", "at '/hostNetwork': got string, want boolean"),
    ],
)
def test_bad_values_are_refused_naming_the_key(helm: Helm, option: str, values: str, message: str) -> None:
    result = helm.run("template", "se-exporter", str(CHART), option, values, check=False)
    assert result.returncode != 0, result.stdout
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert message in result.stderr, result.stderr


def test_actions_without_a_file_is_refused_with_what_to_give(helm: Helm) -> None:
    result = helm.run("template", "se-exporter", str(CHART), "--set", "actions.enabled=true", check=False)
    assert result.returncode != 0
    assert "actions.config is empty: give the actions file" in result.stderr, result.stderr


def test_windows_without_a_named_image_is_refused(helm: Helm) -> None:
    """Issue 40: windows.enabled rendered a DaemonSet of an image nothing publishes and no file builds."""
    result = helm.run("template", "se-exporter", str(CHART), "--set", "windows.enabled=true", check=False)
    assert result.returncode != 0
    assert (
        "windows.enabled is true but windows.image.repository is empty: se-exporter publishes no Windows image; "
        "build one and name it (docs/helm.md, Windows node pools)"
    ) in result.stderr, result.stderr
    named = helm.template(sets=("windows.enabled=true", "windows.image.repository=myacr.azurecr.io/se-windows"))
    version = __version__
    (daemonset,) = [d for d in named.all("DaemonSet") if d["metadata"]["name"].endswith("-windows")]
    images = [c["image"] for c in daemonset["spec"]["template"]["spec"]["containers"]]
    assert images == [f"myacr.azurecr.io/se-windows:{version}-windows-ltsc2022"]


def test_approval_without_a_policy_is_refused_with_what_to_give(helm: Helm) -> None:
    result = helm.run("template", "se-exporter", str(CHART), "--set", "approval.enabled=true", check=False)
    assert result.returncode != 0
    assert "approval.policy is empty: give the policy" in result.stderr, result.stderr


def test_the_approval_policy_it_mounts_is_one_the_exporter_accepts(helm: Helm, tmp_path: Path) -> None:
    rendered = helm.template(CHART / "ci" / "approval-otel-tls-values.yaml")
    policy = tmp_path / "policy.yaml"
    policy.write_text(rendered.one("ConfigMap")["data"]["policy.yaml"], encoding="utf-8")
    check = [sys.executable, "-m", "se_exporter", "check", f"--approval.config={policy}"]
    result = subprocess.run(check, capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr


def test_rules_are_exactly_those_of_alerts(helm: Helm) -> None:
    shipped = load_yaml(REPO / "alerts" / "se-exporter.rules.yml")["groups"]
    aks = load_yaml(REPO / "alerts" / "aks.rules.yml")["groups"]
    rule = helm.template(sets=("prometheusRule.enabled=true",)).one("PrometheusRule")
    assert rule["spec"]["groups"] == shipped
    with_aks = helm.template(sets=("prometheusRule.enabled=true", "prometheusRule.aksRules=true"))
    assert with_aks.one("PrometheusRule")["spec"]["groups"] == shipped + aks


def test_dashboards_are_exactly_those_of_dashboards(helm: Helm) -> None:
    rendered = helm.template(sets=("dashboards.enabled=true",))
    found = {}
    for config_map in rendered.all("ConfigMap"):
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        [(name, text)] = config_map["data"].items()
        found[name] = json.loads(text)
    expected = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in DASHBOARDS_DIR.glob("*.json")}
    assert found == expected and len(found) == 2


def test_the_notes_warn_while_the_image_is_the_unpublished_default(helm: Helm) -> None:
    def notes(*sets: str) -> str:
        args = [arg for item in sets for arg in ("--set", item)]
        out = helm.run("install", "se-exporter", str(CHART), "--dry-run=client", "-n", "monitoring", *args).stdout
        return out[out.index("NOTES:") :]

    warning = "WARNING: no se-exporter image is published at ghcr.io/se-exporter/azure-scheduled-events-exporter"
    assert notes().startswith(f"NOTES:\n{warning}")
    assert "WARNING" not in notes("image.repository=myregistry.azurecr.io/azure-scheduled-events-exporter")
