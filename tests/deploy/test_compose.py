"""The compose stack: structure, mounts, port wiring, and its Prometheus/Alertmanager configs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tests.deploy.support import (
    COMPOSE_DIR,
    DASHBOARDS_DIR,
    EXPORTER_PORT,
    REPO,
    RULES_FILE,
    interpolate,
    load_yaml,
    split_host_port,
)
from tests.support.tools import require

pytestmark = pytest.mark.debian

COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"

# Default listening port of each image's HTTP server (overridable by the flags handled below).
IMAGE_DEFAULT_PORTS = {
    "prom/prometheus": ("--web.listen-address", 9090),
    "prom/alertmanager": ("--web.listen-address", 9093),
    "grafana/grafana": ("GF_SERVER_HTTP_PORT", 3000),
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = interpolate(load_yaml(COMPOSE_FILE))
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = compose["services"]
    return services


def _by_image(services: dict[str, dict[str, Any]], prefix: str) -> tuple[str, dict[str, Any]]:
    matches = [(n, s) for n, s in services.items() if str(s.get("image", "")).startswith(prefix)]
    assert len(matches) == 1, f"expected one service with image {prefix}*, got {[n for n, _ in matches]}"
    return matches[0]


def _exporter(services: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    matches = [(n, s) for n, s in services.items() if "build" in s]
    assert len(matches) == 1, "exactly one service (the exporter) is built from the repo"
    return matches[0]


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _command(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return command.split() if isinstance(command, str) else [str(c) for c in command]


def _flag(command: list[str], flag: str) -> str | None:
    for i, word in enumerate(command):
        if word == flag and i + 1 < len(command):
            return command[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def _mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, container path) of each volume; short and long syntax."""
    mounts = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            source, _, rest = volume.partition(":")
            mounts.append((source, rest.split(":")[0]))
        else:
            mounts.append((str(volume.get("source", "")), str(volume["target"])))
    return mounts


def _bind_source(source: str) -> Path | None:
    return (COMPOSE_DIR / source).resolve() if source.startswith((".", "/")) else None


def _collector_config(services: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    name, service = _by_image(services, "otel/opentelemetry-collector")
    config_path = _flag(_command(service), "--config")
    assert config_path, "the collector's --config must be given explicitly"
    for source, target in _mounts(service):
        host = _bind_source(source)
        if target == config_path and host is not None:
            return name, load_yaml(host)
    raise AssertionError(f"--config={config_path} is not a bind mount of the collector service")


def listening_ports(services: dict[str, dict[str, Any]]) -> dict[str, set[int]]:
    """Which TCP ports each service listens on, from its image defaults, flags and config."""
    ports: dict[str, set[int]] = {}
    for name, service in services.items():
        image, command, env = str(service.get("image", "")), _command(service), _environment(service)
        if "build" in service:
            address = _flag(command, "--web.listen-address") or env.get("SE_EXPORTER_WEB_LISTEN_ADDRESS")
            ports[name] = {split_host_port(address)[1] if address else EXPORTER_PORT}
            continue
        if image.startswith("otel/opentelemetry-collector"):
            _, config = _collector_config(services)
            found = set()
            for receiver in config.get("receivers", {}).values():
                for endpoint in _endpoints(receiver):
                    found.add(split_host_port(endpoint)[1])
            for reader in config.get("service", {}).get("telemetry", {}).get("metrics", {}).get("readers", []):
                prometheus = reader.get("pull", {}).get("exporter", {}).get("prometheus", {})
                if "port" in prometheus:
                    found.add(int(prometheus["port"]))
            ports[name] = found
            continue
        for prefix, (knob, default) in IMAGE_DEFAULT_PORTS.items():
            if image.startswith(prefix):
                value = _flag(command, knob) if knob.startswith("--") else env.get(knob)
                ports[name] = {split_host_port(value)[1] if value and ":" in value else int(value or default)}
                break
        else:
            raise AssertionError(f"service {name}: unknown image {image!r}; teach IMAGE_DEFAULT_PORTS its port")
    return ports


def _endpoints(node: Any) -> list[str]:
    """Every ``endpoint`` value under a collector component config (e.g. otlp.protocols.grpc)."""
    if isinstance(node, dict):
        found = [str(node["endpoint"])] if "endpoint" in node else []
        for value in node.values():
            found.extend(_endpoints(value))
        return found
    return []


def _assert_reaches(services: dict[str, dict[str, Any]], client: str, address: str, what: str) -> None:
    host, port = split_host_port(address)
    ports = listening_ports(services)
    if host in {"localhost", "127.0.0.1"}:
        host = client
    assert host in services, f"{what}: {address} names no compose service"
    assert port in ports[host], f"{what}: {address}, but {host} listens on {sorted(ports[host])}"


# --------------------------------------------------------------------------------------------


def test_every_service_has_image_or_build(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        if "image" in service and "build" not in service:
            tag = str(service["image"]).rpartition(":")[2]
            assert "/" not in tag and tag not in {"", "latest"}, f"{name}: pin the image tag"
        if "build" in service:
            build = service["build"]
            context = COMPOSE_DIR / (build if isinstance(build, str) else build.get("context", "."))
            dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            assert (context / dockerfile).is_file(), f"{name}: {context / dockerfile} missing"


def test_expected_services(services: dict[str, dict[str, Any]]) -> None:
    _exporter(services)
    for image in ("prom/prometheus", "prom/alertmanager", "grafana/grafana", "otel/opentelemetry-collector-contrib"):
        _by_image(services, image)


def test_exporter_defaults_to_demo(services: dict[str, dict[str, Any]]) -> None:
    raw = load_yaml(COMPOSE_FILE)["services"][_exporter(services)[0]]
    assert _command(services[_exporter(services)[0]])[:1] == ["demo"], "demo by default (works anywhere)"
    assert "SE_EXPORTER_MODE" in str(raw.get("command")), "the documented switch to the real IMDS"


def _mount_params() -> list[Any]:
    data = load_yaml(COMPOSE_FILE)
    params = []
    for name, service in data["services"].items():
        for source, target in _mounts(service):
            params.append(pytest.param(name, source, target, id=f"{name}:{target}"))
    return params


@pytest.mark.parametrize(("service", "source", "target"), _mount_params())
def test_mount_sources_exist(compose: dict[str, Any], service: str, source: str, target: str) -> None:
    assert PurePosixPath(target).is_absolute(), f"{service}: container path {target} must be absolute"
    host = _bind_source(source)
    if host is None:
        assert source in (compose.get("volumes") or {}), f"{service}: named volume {source} is not declared"
        return
    assert host.is_relative_to(REPO), f"{service}: {source} points outside the repository"
    assert host.exists(), f"{service}: mounted host path {source} ({host}) does not exist"


def test_published_ports_are_listened_on(services: dict[str, dict[str, Any]]) -> None:
    listening = listening_ports(services)
    for name, service in services.items():
        for published in service.get("ports") or []:
            text = str(published if not isinstance(published, dict) else published["target"])
            container = int(text.split("/", 1)[0].rsplit(":", 1)[-1].split("-", 1)[0])
            assert container in listening[name], f"{name} publishes {container}, listens on {listening[name]}"
    _, service = _exporter(services)
    published = [str(p) for p in service.get("ports") or []]
    assert any(p.endswith(f":{EXPORTER_PORT}") for p in published), "the exporter's port is published"


def _prometheus(services: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any], Path]:
    name, service = _by_image(services, "prom/prometheus")
    config_path = _flag(_command(service), "--config.file") or "/etc/prometheus/prometheus.yml"
    for source, target in _mounts(service):
        host = _bind_source(source)
        if target == config_path and host is not None:
            return name, service, host
    raise AssertionError(f"{config_path} is not bind-mounted into {name}")


def test_prometheus_targets_are_wired(services: dict[str, dict[str, Any]]) -> None:
    name, _, config_path = _prometheus(services)
    config = load_yaml(config_path)
    exporter, _ = _exporter(services)
    scraped = set()
    for job in config["scrape_configs"]:
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                _assert_reaches(services, name, target, f"scrape job {job['job_name']}")
                scraped.add(split_host_port(target)[0])
    assert exporter in scraped, "Prometheus must scrape the exporter"
    alertmanager, _ = _by_image(services, "prom/alertmanager")
    targets = [t for am in config["alerting"]["alertmanagers"] for s in am["static_configs"] for t in s["targets"]]
    assert targets, "Prometheus must alert to Alertmanager"
    for target in targets:
        _assert_reaches(services, name, target, "alertmanager target")
        assert split_host_port(target)[0] == alertmanager


def test_otlp_endpoint_is_the_collector(services: dict[str, dict[str, Any]]) -> None:
    exporter, service = _exporter(services)
    env = _environment(service)
    endpoint = env["OTEL_EXPORTER_OTLP_ENDPOINT"]
    _assert_reaches(services, exporter, endpoint, "OTEL_EXPORTER_OTLP_ENDPOINT")
    collector, config = _collector_config(services)
    assert split_host_port(endpoint)[0] == collector
    protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    kind = "grpc" if protocol == "grpc" else "http"
    receiver_endpoint = config["receivers"]["otlp"]["protocols"][kind]["endpoint"]
    assert split_host_port(endpoint)[1] == split_host_port(receiver_endpoint)[1], f"{protocol} port mismatch"
    assert split_host_port(receiver_endpoint)[0] in {"0.0.0.0", ""}, "in a container, listen on all interfaces"


def test_collector_pipelines(services: dict[str, dict[str, Any]]) -> None:
    _, config = _collector_config(services)
    pipelines = config["service"]["pipelines"]
    assert {"logs", "traces"} <= {p.split("/")[0] for p in pipelines}
    for pipeline_name, pipeline in pipelines.items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in (config.get(kind) or {}), f"{pipeline_name}: {kind[:-1]} {component} undefined"
    exporters = {e for p in pipelines.values() for e in p["exporters"]}
    assert all(e.split("/")[0] == "debug" for e in exporters), "the demo prints to the debug exporter"
    text = (COMPOSE_DIR / "otel-collector.yaml").read_text(encoding="utf-8")
    assert re.search(r"#\s*otlphttp/loki:", text) and re.search(r"#\s*otlp/tempo:", text), "Loki/Tempo example"


def test_alertmanager_webhook_reaches_collector(services: dict[str, dict[str, Any]]) -> None:
    name, service = _by_image(services, "prom/alertmanager")
    config_file = _flag(_command(service), "--config.file")
    (host,) = [_bind_source(s) for s, t in _mounts(service) if t == config_file]
    assert host is not None
    config = load_yaml(host)
    collector, collector_config = _collector_config(services)
    webhook = collector_config["receivers"]["webhookevent"]
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            _assert_reaches(services, name, hook["url"], f"receiver {receiver['name']}")
            path = "/" + hook["url"].split("://", 1)[1].partition("/")[2]
            assert split_host_port(hook["url"])[0] == collector and path == webhook["path"]


def test_promtool_check_config(services: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    promtool = require("promtool")
    _, service, config_path = _prometheus(services)
    config = load_yaml(config_path)
    mounts = [(t, _bind_source(s)) for s, t in _mounts(service) if _bind_source(s) is not None]
    rewritten = []
    for pattern in config.get("rule_files", []):
        target, host = max(
            ((t, h) for t, h in mounts if pattern.startswith(t.rstrip("/") + "/")),
            key=lambda m: len(m[0]),
            default=(None, None),
        )
        assert target is not None and host is not None, f"rule_files {pattern}: not under a bind mount"
        local = str(host) + pattern[len(target.rstrip("/")) :]
        matches = sorted(Path(local).parent.glob(Path(local).name))
        assert matches, f"rule_files {pattern} matches nothing in {host}"
        if RULES_FILE.exists():
            assert RULES_FILE.resolve() in [m.resolve() for m in matches], "the project's rule file is loaded"
        rewritten.append(local)
    config["rule_files"] = rewritten
    local_config = tmp_path / "prometheus.yml"
    local_config.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = subprocess.run(
        [promtool, "check", "config", str(local_config)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_amtool_check_config(services: dict[str, dict[str, Any]]) -> None:
    amtool = require("amtool")
    _, service = _by_image(services, "prom/alertmanager")
    config_file = _flag(_command(service), "--config.file")
    (host,) = [_bind_source(s) for s, t in _mounts(service) if t == config_file]
    assert host is not None
    result = subprocess.run(
        [amtool, "check-config", str(host)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_alertmanager_routing_matches_project(services: dict[str, dict[str, Any]]) -> None:
    """The demo Alertmanager routes and inhibits exactly like alerts/alertmanager.yml (dummy receivers)."""
    project_file = REPO / "alerts" / "alertmanager.yml"
    _, service = _by_image(services, "prom/alertmanager")
    config_file = _flag(_command(service), "--config.file")
    (host,) = [_bind_source(s) for s, t in _mounts(service) if t == config_file]
    assert host is not None
    demo, project = load_yaml(host), load_yaml(project_file)
    hint = "copy route/inhibit_rules from alerts/alertmanager.yml into deploy/compose/alertmanager.yml"
    assert demo["route"] == project["route"], hint
    assert demo.get("inhibit_rules") == project.get("inhibit_rules"), hint

    def used(route: dict[str, Any]) -> set[str]:
        names = {route["receiver"]} if "receiver" in route else set()
        for child in route.get("routes", []):
            names |= used(child)
        return names

    defined = {r["name"] for r in demo["receivers"]}
    assert used(demo["route"]) <= defined
    for receiver in demo["receivers"]:
        assert set(receiver) <= {"name", "webhook_configs"}, f"{receiver['name']}: demo receivers are webhooks"


def test_rule_jobs_are_scraped(services: dict[str, dict[str, Any]]) -> None:
    """job="…" matchers in the alert rules name the exporter's scrape job."""
    _, _, config_path = _prometheus(services)
    jobs = {job["job_name"] for job in load_yaml(config_path)["scrape_configs"]}
    referenced = set(re.findall(r'\bjob\s*=~?\s*"([^"]+)"', RULES_FILE.read_text(encoding="utf-8")))
    for job in referenced:
        assert any(re.fullmatch(job, j) for j in jobs), f'rules use job="{job}"; compose scrapes {sorted(jobs)}'


def test_grafana_provisioning_matches_mounts(services: dict[str, dict[str, Any]]) -> None:
    provisioning = DASHBOARDS_DIR / "provisioning"
    name, service = _by_image(services, "grafana/grafana")
    mounts = [(t, _bind_source(s)) for s, t in _mounts(service) if _bind_source(s) is not None]
    assert any(h == provisioning.resolve() and t == "/etc/grafana/provisioning" for t, h in mounts)
    providers = sorted((provisioning / "dashboards").glob("*.y*ml"))
    assert providers, "a dashboard provider in dashboards/provisioning/dashboards/"
    for provider_file in providers:
        for provider in load_yaml(provider_file).get("providers", []):
            path = str(provider["options"]["path"])
            target, host = max(
                ((t, h) for t, h in mounts if (path + "/").startswith(t.rstrip("/") + "/")),
                key=lambda m: len(m[0]),
                default=(None, None),
            )
            assert target is not None and host is not None, f"{provider_file.name}: {path} is not mounted"
            local = Path(str(host) + path[len(target.rstrip("/")) :])
            assert list(local.rglob("*.json")), f"{provider_file.name}: no dashboard JSON under {local}"
    for datasource_file in sorted((provisioning / "datasources").glob("*.y*ml")):
        for datasource in load_yaml(datasource_file).get("datasources", []):
            if datasource.get("url"):
                _assert_reaches(services, name, datasource["url"], f"datasource {datasource.get('name')}")


def test_grafana_file_settings_are_mounted(services: dict[str, dict[str, Any]]) -> None:
    """GF_* settings that name a file in the container (e.g. the home dashboard) find it mounted."""
    _, service = _by_image(services, "grafana/grafana")
    mounts = [(t, _bind_source(s)) for s, t in _mounts(service) if _bind_source(s) is not None]
    for key, value in _environment(service).items():
        if not key.startswith("GF_") or not value.startswith("/"):
            continue
        target, host = max(
            ((t, h) for t, h in mounts if value.startswith(t.rstrip("/") + "/")),
            key=lambda m: len(m[0]),
            default=(None, None),
        )
        assert target is not None and host is not None, f"{key}={value}: not under a bind mount"
        local = Path(str(host) + value[len(target.rstrip("/")) :])
        assert local.exists(), f"{key}={value}: {local} does not exist"


def test_no_unexpected_files() -> None:
    """Everything in deploy/compose is used by the stack (or is this directory's README)."""
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    for path in COMPOSE_DIR.iterdir():
        if path.name in {COMPOSE_FILE.name, "README.md", ".env"} or path.name.startswith("."):
            continue
        assert f"./{path.name}" in text, f"{path.name} is not mounted by docker-compose.yml"
