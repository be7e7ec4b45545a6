"""Kubernetes manifests: schema validation (core kinds), CRD structure, wiring, PrometheusRule sync."""

from __future__ import annotations

import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tests.deploy.support import (
    EXPORTER_PORT,
    K8S_DIR,
    REPO,
    RULES_FILE,
    key_values,
    load_yaml,
    load_yaml_all,
    parse_dockerfile,
)
from tests.support.tools import require

pytestmark = pytest.mark.pure

KUSTOMIZATION = K8S_DIR / "kustomization.yaml"
CRD_GROUP = "monitoring.coreos.com/v1"
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


def _manifest_files() -> list[Path]:
    return sorted(p for p in K8S_DIR.glob("*.yaml") if p.name != KUSTOMIZATION.name)


@pytest.fixture(scope="module")
def objects() -> dict[str, dict[str, Any]]:
    """Every object of the manifests, by kind (one object per kind here)."""
    found: dict[str, dict[str, Any]] = {}
    for path in _manifest_files():
        for doc in load_yaml_all(path):
            assert doc["kind"] not in found, f"two {doc['kind']} objects; the tests assume one"
            found[doc["kind"]] = doc
    return found


def test_kubernetes_validate_core_kinds(objects: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    tool = require("kubernetes-validate")
    # kubernetes-validate only WARNs (exit 0) for kinds it has no schema for, so pass it the core
    # kinds only; the CRDs are checked structurally below.
    core = [obj for kind, obj in objects.items() if kind not in CRD_KINDS]
    assert {"Namespace", "ServiceAccount", "DaemonSet", "Service"} <= {o["kind"] for o in core}
    files = []
    for obj in core:
        path = tmp_path / f"{obj['kind'].lower()}.yaml"
        path.write_text(yaml.safe_dump(obj), encoding="utf-8")
        files.append(str(path))
    result = subprocess.run([tool, "--strict", *files], capture_output=True, text=True, timeout=120, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "ERROR" not in output and "WARN" not in output, output
    assert output.count(" passed ") == len(files), output


def test_kustomization(objects: dict[str, dict[str, Any]]) -> None:
    kustomization = load_yaml(KUSTOMIZATION)
    assert kustomization["kind"] == "Kustomization"
    resources = kustomization["resources"]
    assert sorted(resources) == sorted(p.name for p in _manifest_files()), "list every manifest, nothing else"
    assert kustomization["namespace"] == objects["Namespace"]["metadata"]["name"]
    containers = _pod(objects)["containers"] + _pod(objects).get("initContainers", [])
    images = {c["image"].split(":")[0] for c in containers}
    (image,) = kustomization["images"]
    assert image["name"] == "azure-scheduled-events-exporter" and image["name"] in images
    assert image["newName"] == "ghcr.io/se-exporter/azure-scheduled-events-exporter"
    assert "newTag" not in image, "the tag is pinned at deploy or release time: pyproject.toml holds the version"


def _pod(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = objects["DaemonSet"]["spec"]["template"]["spec"]
    return spec


def _main_container(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (container,) = [c for c in _pod(objects)["containers"] if c["name"] == "se-exporter"]
    return dict(container)


def test_daemonset_security(objects: dict[str, dict[str, Any]]) -> None:
    pod = _pod(objects)
    assert pod.get("hostNetwork") is False
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["seccompProfile"]["type"] == "RuntimeDefault"
    _, stages = parse_dockerfile(REPO / "Dockerfile")
    (user,) = stages[-1].all("USER")
    assert context["runAsUser"] == int(user.args.split(":")[0]), "runAsUser = the image's USER"
    for container in pod["containers"] + pod.get("initContainers", []):
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, container["name"]
        assert security["allowPrivilegeEscalation"] is False, container["name"]
        assert security["capabilities"]["drop"] == ["ALL"], container["name"]
        assert set(security["capabilities"].get("add", [])) <= {"CHOWN"}, container["name"]
        assert container["resources"]["requests"] and container["resources"]["limits"], container["name"]
    main = _main_container(objects)
    assert main["securityContext"]["runAsNonRoot"] is True
    assert "add" not in main["securityContext"]["capabilities"]
    assert main["resources"]["requests"] == {"cpu": "10m", "memory": "32Mi"}
    assert main["resources"]["limits"] == {"cpu": "100m", "memory": "96Mi"}


def test_daemonset_runs_everywhere(objects: dict[str, dict[str, Any]]) -> None:
    daemonset = objects["DaemonSet"]
    assert {"operator": "Exists"} in _pod(objects)["tolerations"], "tolerate every taint"
    selector = daemonset["spec"]["selector"]["matchLabels"]
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()


def test_daemonset_state_and_tmp(objects: dict[str, dict[str, Any]]) -> None:
    pod, main = _pod(objects), _main_container(objects)
    env = {e["name"]: e for e in main["env"]}
    state_dir = str(PurePosixPath(env["SE_EXPORTER_STATE_FILE"]["value"]).parent)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    state = volumes[mounts[state_dir]]
    assert state["hostPath"] == {"path": "/var/lib/se-exporter", "type": "DirectoryOrCreate"}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    # The init container that hands the hostPath directory to the exporter's uid.
    (init,) = pod["initContainers"]
    assert state_dir in init["command"] and f"{pod['securityContext']['runAsUser']}:" in " ".join(init["command"])
    assert {m["mountPath"] for m in init["volumeMounts"]} == {state_dir}


def test_daemonset_node_name_and_vm_name(objects: dict[str, dict[str, Any]]) -> None:
    main = _main_container(objects)
    env = {e["name"]: e for e in main["env"]}
    node = [e for e in env.values() if e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName"]
    assert node, "node name from the downward API"
    # The VMSS instance name in IMDS Resources (…vmss_0) is not the node name (…vmss000000):
    # the exporter must learn its name from IMDS compute metadata, so --vm.name stays unset.
    assert "SE_EXPORTER_VM_NAME" not in env
    assert not any("--vm.name" in arg for arg in main.get("args", []) + main.get("command", []))
    assert f"$({node[0]['name']})" in env["OTEL_RESOURCE_ATTRIBUTES"]["value"]


def test_probes_and_ports(objects: dict[str, dict[str, Any]]) -> None:
    main = _main_container(objects)
    (port,) = main["ports"]
    assert port == {"name": "metrics", "containerPort": EXPORTER_PORT, "protocol": "TCP"}
    assert main["livenessProbe"]["httpGet"] == {"path": "/-/healthy", "port": "metrics"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/-/ready", "port": "metrics"}
    address = {e["name"]: e.get("value") for e in main["env"]}.get("SE_EXPORTER_WEB_LISTEN_ADDRESS", ":10160")
    assert address.rpartition(":")[2] == str(EXPORTER_PORT)


def test_service(objects: dict[str, dict[str, Any]]) -> None:
    service = objects["Service"]["spec"]
    assert service["clusterIP"] == "None", "headless"
    assert service["publishNotReadyAddresses"] is True, "scrape pods whose IMDS is not answering"
    assert service["selector"].items() <= objects["DaemonSet"]["spec"]["template"]["metadata"]["labels"].items()
    (port,) = service["ports"]
    assert port["name"] == "metrics" and port["port"] == EXPORTER_PORT and port["targetPort"] == "metrics"


_RELABEL_KEYS = {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"}
_RELABEL_ACTIONS = {
    "replace",
    "Replace",
    "keep",
    "Keep",
    "drop",
    "Drop",
    "hashmod",
    "HashMod",
    "labelmap",
    "LabelMap",
    "labeldrop",
    "LabelDrop",
    "labelkeep",
    "LabelKeep",
    "lowercase",
    "Lowercase",
    "uppercase",
    "Uppercase",
    "keepequal",
    "KeepEqual",
    "dropequal",
    "DropEqual",
}
_ENDPOINT_KEYS = {
    "port",
    "targetPort",
    "path",
    "scheme",
    "interval",
    "scrapeTimeout",
    "honorLabels",
    "honorTimestamps",
    "relabelings",
    "metricRelabelings",
    "params",
    "tlsConfig",
    "bearerTokenSecret",
    "authorization",
    "followRedirects",
    "enableHttp2",
    "filterRunning",
    "trackTimestampsStaleness",
    "basicAuth",
    "oauth2",
    "proxyUrl",
}


def test_servicemonitor_structure(objects: dict[str, dict[str, Any]]) -> None:
    monitor = objects["ServiceMonitor"]
    assert monitor["apiVersion"] == CRD_GROUP
    assert set(monitor) <= {"apiVersion", "kind", "metadata", "spec"}
    spec = monitor["spec"]
    assert set(spec) <= {
        "jobLabel",
        "selector",
        "namespaceSelector",
        "endpoints",
        "targetLabels",
        "podTargetLabels",
        "sampleLimit",
        "attachMetadata",
    }
    service = objects["Service"]
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    if "jobLabel" in spec:
        job = service["metadata"]["labels"][spec["jobLabel"]]
        assert job == "se-exporter", "same job name as the compose stack's scrape job"
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert spec["endpoints"]
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= _ENDPOINT_KEYS, set(endpoint) - _ENDPOINT_KEYS
        assert endpoint["port"] in port_names
        assert endpoint.get("path", "/metrics") == "/metrics"
        for relabel in endpoint.get("relabelings", []):
            assert set(relabel) <= _RELABEL_KEYS, set(relabel) - _RELABEL_KEYS
            assert relabel.get("action", "replace") in _RELABEL_ACTIONS
            assert all(isinstance(label, str) for label in relabel.get("sourceLabels", []))
    targets = {r.get("targetLabel"): r.get("sourceLabels") for e in spec["endpoints"] for r in e["relabelings"]}
    assert targets.get("node") == ["__meta_kubernetes_pod_node_name"], "node name as a label"


_RULE_KEYS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
_GROUP_KEYS = {"name", "interval", "rules", "limit", "partial_response_strategy", "query_offset", "labels"}


@pytest.mark.debian
def test_prometheusrule_structure(objects: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    rule = objects["PrometheusRule"]
    assert rule["apiVersion"] == CRD_GROUP
    assert set(rule) <= {"apiVersion", "kind", "metadata", "spec"} and set(rule["spec"]) == {"groups"}
    groups = rule["spec"]["groups"]
    assert groups, "no rule groups"
    for group in groups:
        assert set(group) <= _GROUP_KEYS and group["name"] and group["rules"], group.get("name")
        for item in group["rules"]:
            assert set(item) <= _RULE_KEYS, set(item) - _RULE_KEYS
            assert ("alert" in item) != ("record" in item) and isinstance(item["expr"], str | int)
    promtool = require("promtool")
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    result = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheusrule_in_sync_with_rule_file() -> None:
    """Generated (deploy/copies.py); tests/test_dashboards_static.py checks every generated file byte for byte."""
    committed = load_yaml(K8S_DIR / "prometheusrule.yaml")
    assert committed["spec"]["groups"] == load_yaml(RULES_FILE)["groups"], "run: python dashboards/generate.py"


def test_container_image_matches_dockerfile_contract(objects: dict[str, dict[str, Any]]) -> None:
    """The DaemonSet's state path is the image's default, so both document the same layout."""
    _, stages = parse_dockerfile(REPO / "Dockerfile")
    image_env = key_values(stages[-1].all("ENV"))
    env = {e["name"]: e.get("value") for e in _main_container(objects)["env"]}
    assert env["SE_EXPORTER_STATE_FILE"] == image_env["SE_EXPORTER_STATE_FILE"]
