"""What a user sees in the chart's objects: who selects whom, where the pods run and with what rights, the
probes, what the exporter is told (its own flag parser reads the rendered arguments and environment), the
mounts, and the monitors' relabeling."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from se_exporter.actions.config import parse_actions
from se_exporter.app import STOP_SECONDS
from se_exporter.cli import build_parser, subparser
from se_exporter.config.flags import apply_environment
from se_exporter.config.options import ExporterConfig, config_from_args
from tests.deploy.helm import CHART, Helm, container, env_of

pytestmark = pytest.mark.debian

CI = CHART / "ci"


def exporter_config(daemonset: dict[str, Any]) -> ExporterConfig:
    """The configuration the exporter builds from the container's arguments and literal environment."""
    argv = list(container(daemonset)["args"])
    assert argv[0] == "run"
    environ = {name: value for name, value in env_of(daemonset).items() if isinstance(value, str)}
    parser = build_parser(("run",))
    args = parser.parse_args(argv)
    apply_environment(subparser(parser, "run"), args, argv[1:], environ)
    return config_from_args(args)


def mounts(daemonset: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """mount path -> the volume mounted there."""
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in container(daemonset)["volumeMounts"]}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_one_pod_on_every_linux_node_spot_and_draining_included(helm: Helm) -> None:
    daemonset = helm.template().one("DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["priorityClassName"] == "system-node-critical"
    assert selects(daemonset["spec"]["selector"]["matchLabels"], daemonset["spec"]["template"]["metadata"]["labels"])
    assert daemonset["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    assert not pod.get("hostNetwork")


def test_the_pod_is_given_the_whole_stop(helm: Helm) -> None:
    pod = helm.template().one("DaemonSet")["spec"]["template"]["spec"]
    grace = pod.get("terminationGracePeriodSeconds", 30)  # Kubernetes' default
    assert grace >= STOP_SECONDS + 5, "the whole stop, and the interpreter's exit"


def test_no_api_token_no_root_no_capabilities_read_only(helm: Helm) -> None:
    rendered = helm.template()
    pod = rendered.one("DaemonSet")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == rendered.one("ServiceAccount")["metadata"]["name"] == "se-exporter"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container(rendered.one("DaemonSet"))["securityContext"]
    assert security == {
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    [init] = pod["initContainers"]  # root only to hand the hostPath directory to the exporter's user
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert init["command"] == ["chown", "10160:10160", "/var/lib/se-exporter"]


@pytest.mark.parametrize(("tls", "scheme"), [(False, "HTTP"), (True, "HTTPS")])
def test_probes_on_healthy_and_ready(helm: Helm, tls: bool, scheme: str) -> None:
    windows = ("windows.enabled=true", "windows.image.repository=registry.example.com/se-exporter-windows")
    sets = ("webConfig.tls=true", "webConfig.existingSecret=web", *windows) if tls else ()
    for daemonset in helm.template(sets=sets).all("DaemonSet"):
        exporter = container(daemonset)
        for probe, path in (("livenessProbe", "/-/healthy"), ("readinessProbe", "/-/ready")):
            get = exporter[probe]["httpGet"]
            assert (get["path"], get["port"], get.get("scheme", "HTTP")) == (path, "metrics", scheme)
        assert exporter["ports"] == [{"name": "metrics", "containerPort": 10160, "protocol": "TCP"}]


def test_the_exporter_is_told_its_address_and_state_file_on_the_host(helm: Helm) -> None:
    daemonset = helm.template().one("DaemonSet")
    config = exporter_config(daemonset)
    assert (config.listen_host, config.listen_port) == ("", 10160)
    assert config.state_file is not None and config.approval_config is None and config.web_config_file is None
    volume = mounts(daemonset)[str(PurePosixPath(config.state_file).parent)]
    assert volume["hostPath"] == {"path": "/var/lib/se-exporter", "type": "DirectoryOrCreate"}
    env = env_of(daemonset)
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "k8s.node.name=$(NODE_NAME)" in env["OTEL_RESOURCE_ATTRIBUTES"]
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in env  # OTLP is off until an endpoint is given
    without_state = helm.template(sets=("state.enabled=false",)).one("DaemonSet")
    assert exporter_config(without_state).state_file is None
    assert "initContainers" not in without_state["spec"]["template"]["spec"]
    assert all("hostPath" not in volume for volume in mounts(without_state).values())


def test_flags_approval_and_web_config_reach_the_exporter_from_their_mounts(helm: Helm) -> None:
    rendered = helm.template(CI / "approval-otel-tls-values.yaml")
    daemonset = rendered.one("DaemonSet")
    config = exporter_config(daemonset)
    assert (config.poll_interval, config.log_format) == (2.0, "json")
    assert config.approval_config is not None and config.web_config_file is not None
    approval = mounts(daemonset)[str(config.approval_config.parent)]
    assert approval["configMap"]["name"] == rendered.one("ConfigMap")["metadata"]["name"]
    assert config.approval_config.name in rendered.one("ConfigMap")["data"]
    assert mounts(daemonset)[str(config.web_config_file.parent)]["secret"] == {"secretName": "se-exporter-web"}
    assert config.web_config_file.name == "web.yml"
    everything = exporter_config(helm.template(CI / "everything-values.yaml").one("DaemonSet", "se-exporter-azse"))
    assert (everything.traffic_lead_time, everything.log_level) == (600.0, "debug")


@pytest.mark.parametrize(
    ("sets", "endpoint", "port"),
    [
        (("opentelemetry.nodeLocalCollector=true",), "http://$(HOST_IP):4318", 4318),
        (("opentelemetry.nodeLocalCollector=true", "opentelemetry.protocol=grpc"), "http://$(HOST_IP):4317", 4317),
        (("opentelemetry.endpoint=http://otel.observability:4318",), "http://otel.observability:4318", 4318),
        (("opentelemetry.endpoint=https://otel.example.com",), "https://otel.example.com", 443),
    ],
)
def test_otlp_endpoint_and_the_network_policy_that_lets_it_out(
    helm: Helm, sets: tuple[str, ...], endpoint: str, port: int
) -> None:
    rendered = helm.template(sets=(*sets, "networkPolicy.enabled=true"))
    env = env_of(rendered.one("DaemonSet"))
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == endpoint
    if "HOST_IP" in endpoint:  # defined before it is used, as Kubernetes expands $(VAR) in order
        assert env["HOST_IP"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
        names = [item["name"] for item in container(rendered.one("DaemonSet"))["env"]]
        assert names.index("HOST_IP") < names.index("OTEL_EXPORTER_OTLP_ENDPOINT")
    policy = rendered.one("NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]
    imds, dns, otlp = policy["egress"]
    assert imds == {"to": [{"ipBlock": {"cidr": "169.254.169.254/32"}}], "ports": [{"port": 80, "protocol": "TCP"}]}
    assert {p["port"] for p in dns["ports"]} == {53}
    assert otlp == {"ports": [{"port": port, "protocol": "TCP"}]}


def test_without_otlp_the_policy_lets_out_only_imds_and_dns(helm: Helm) -> None:
    policy = helm.template(sets=("networkPolicy.enabled=true",)).one("NetworkPolicy")["spec"]
    assert len(policy["egress"]) == 2


def test_service_and_monitors_select_every_exporter_pod_linux_and_windows(helm: Helm) -> None:
    rendered = helm.template(CI / "everything-values.yaml")
    linux, windows = (rendered.one("DaemonSet", name) for name in ("se-exporter-azse", "se-exporter-azse-windows"))
    pods = [ds["spec"]["template"]["metadata"]["labels"] for ds in (linux, windows)]
    for daemonset in (linux, windows):  # the two DaemonSets never claim each other's pods
        own = daemonset["spec"]["selector"]["matchLabels"]
        assert [selects(own, labels) for labels in pods] == [daemonset is linux, daemonset is windows]
    service = rendered.one("Service")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9160, "targetPort": "metrics", "protocol": "TCP"}]
    assert all(selects(service["spec"]["selector"], labels) for labels in pods)
    monitor = rendered.one("ServiceMonitor")["spec"]
    assert selects(monitor["selector"]["matchLabels"], service["metadata"]["labels"])
    assert all(selects(rendered.one("PodMonitor")["spec"]["selector"]["matchLabels"], labels) for labels in pods)
    windows_pod = windows["spec"]["template"]["spec"]
    assert windows_pod["nodeSelector"]["kubernetes.io/os"] == "windows"
    assert container(windows)["image"] == "registry.example.com/se-exporter:pinned-build-42-windows"
    assert mounts(windows)["C:\\ProgramData\\se-exporter"]["hostPath"]["path"] == "C:\\ProgramData\\se-exporter"


def test_both_monitors_add_the_node_label_before_the_users_relabeling(helm: Helm) -> None:
    rendered = helm.template(CI / "everything-values.yaml")
    service_monitor, pod_monitor = rendered.one("ServiceMonitor"), rendered.one("PodMonitor")
    assert pod_monitor["apiVersion"] == "azmonitoring.coreos.com/v1"
    assert service_monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    for endpoint in (service_monitor["spec"]["endpoints"][0], pod_monitor["spec"]["podMetricsEndpoints"][0]):
        node, instance, *users = endpoint["relabelings"]
        assert node == {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}
        assert instance["targetLabel"] == "instance"
        assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == ("metrics", "/metrics", "https")
        assert endpoint["tlsConfig"] == {"insecureSkipVerify": False}
    assert users == [] and service_monitor["spec"]["endpoints"][0]["relabelings"][2]["targetLabel"] == "cluster"
    assert service_monitor["spec"]["endpoints"][0]["metricRelabelings"][0]["action"] == "drop"
    assert (
        service_monitor["spec"]["endpoints"][0]["interval"],
        pod_monitor["spec"]["podMetricsEndpoints"][0]["interval"],
    ) == ("30s", "15s")


def test_actions_reach_the_exporter_from_their_config_map(helm: Helm, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        "actions:\n  enabled: true\n  config:\n    actions:\n"
        "      - {name: note, transitions: [scheduled], command: [/bin/true]}\n",
        encoding="utf-8",
    )
    rendered = helm.template(values)
    daemonset = rendered.one("DaemonSet")
    config = exporter_config(daemonset)
    assert config.actions_config is not None
    (configmap,) = [c for c in rendered.all("ConfigMap") if c["metadata"]["name"].endswith("-actions")]
    assert mounts(daemonset)[str(config.actions_config.parent)]["configMap"]["name"] == configmap["metadata"]["name"]
    assert parse_actions(yaml.safe_load(configmap["data"][config.actions_config.name])).actions[0].name == "note"


def test_a_listen_address_in_flags_replaces_the_charts_own(helm: Helm) -> None:
    """The exporter refuses a flag given twice (issue 29, point 8): the chart must not add its own then."""
    daemonset = helm.template(sets=("flags.web\\.listen-address=:9999",)).one("DaemonSet")
    args = container(daemonset)["args"]
    assert [a for a in args if a.startswith("--web.listen-address")] == ["--web.listen-address=:9999"]
    assert exporter_config(daemonset).listen_port == 9999


def test_host_network_and_a_digest(helm: Helm) -> None:
    """Issue 29, points 7 and 15: AKS's IMDS restriction needs host networking; a digest pins the image."""
    digest = "sha256:" + "0" * 64
    spec = helm.template(sets=("hostNetwork=true", f"image.digest={digest}")).one("DaemonSet")["spec"]["template"][
        "spec"
    ]
    assert (spec["hostNetwork"], spec["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert {c["image"] for c in spec["containers"] + spec["initContainers"]} == {
        f"ghcr.io/se-exporter/azure-scheduled-events-exporter@{digest}"
    }
    default = helm.template().one("DaemonSet")["spec"]["template"]["spec"]
    assert "hostNetwork" not in default and ":" in container(helm.template().one("DaemonSet"))["image"]
