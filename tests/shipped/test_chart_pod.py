"""The Helm chart's DaemonSet pod, rendered by helm and run in the image (issue 28, part 2).

Everything comes from ``helm template`` (tests/shipped/pod.py translates it, field by field): the
image and IMDS are set through the chart's own values, as a user would. The pod listens on the chart's
port, 10160, in the host's network, so these tests run one at a time (one xdist group).
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from se_exporter.simulator import ManualClock, SimulatedVM, SimulatorServer, SimWorld, builtin_scenario
from tests.deploy.helm import Helm, container
from tests.hostile.test_memory_bounds import worst_document
from tests.shipped.containers import REPORTS, Podman
from tests.shipped.pod import Cgroup, Pod
from tests.support.exposition import series, value
from tests.support.fake_imds import Answer, FakeIMDS
from tests.support.wait import wait_for

pytestmark = [
    pytest.mark.xdist_group("chart-pod"),
    pytest.mark.long,
    pytest.mark.debian,
    pytest.mark.posix,
    pytest.mark.shipped,
]
Name = Callable[[], str]
LIMIT_BYTES = 96 << 20  # the chart's resources.limits.memory


@pytest.fixture
def render_pod(helm: Helm, image: str, tmp_path: Path) -> Callable[[dict[str, Any]], Pod]:
    """The DaemonSet's pod as helm renders it with these values (and the image under test)."""

    def render(values: dict[str, Any]) -> Pod:
        repository, _, tag = image.rpartition(":")
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump({"image": {"repository": repository, "tag": tag}, **values}))
        rendered = helm.template(path)
        return Pod(rendered.one("DaemonSet"), rendered.documents, tmp_path / "pod")

    return render


def probe_url(pod: Pod, probe: str) -> str:
    spec = pod.container("se-exporter")
    get = spec[probe]["httpGet"]
    ports = {port["name"]: port["containerPort"] for port in spec["ports"]}
    port = ports.get(get["port"], get["port"])
    return f"{get.get('scheme', 'HTTP').lower()}://127.0.0.1:{port}{get['path']}"


def status(url: str) -> int:
    return httpx.get(url, timeout=5, trust_env=False).status_code


def transitions(podman: Podman, name: str) -> list[tuple[str, str]]:
    logs = podman.run("logs", name)
    return re.findall(r"scheduled_event\.transition=(\w+) scheduled_event\.id=(\S+)", logs.stdout + logs.stderr)


@contextlib.contextmanager
def told(podman: Podman, container: str) -> Iterator[None]:
    """A wait that fails says what became of the container (exited, OOM-killed) and what it printed last."""
    try:
        yield
    except AssertionError as error:
        raise AssertionError(f"{error}\n{podman.explain(container)}") from None


def start_pod(podman: Podman, pod: Pod, image: str, name: Name) -> str:
    for init in pod.spec.get("initContainers", []):
        result = podman.run("run", "--rm", "--name", name(), *pod.run_options(init, image), check=False)
        assert result.returncode == 0, f"init container {init['name']}: {result.stderr[-2000:]}"
    main = name()
    podman.run("run", "--detach", "--name", main, *pod.run_options(pod.container("se-exporter"), image))
    return main


def test_the_rendered_pod_runs_is_ready_reports_and_keeps_its_state(
    podman: Podman, image: str, render_pod: Callable[[dict[str, Any]], Pod], container_name: Name
) -> None:
    world = SimWorld(vm=SimulatedVM(name="aks-vm-0"), clock=ManualClock(start=time.time()), rng=random.Random(1))
    ids = world.play(builtin_scenario("user-reboot"))
    with SimulatorServer(world) as simulator:
        pod = render_pod({"flags": {"imds.url": simulator.url, "poll.interval": "250ms"}})
        assert container(pod.daemonset)["resources"]["limits"]["memory"] == "96Mi"
        main = start_pod(podman, pod, image, container_name)
        state_dir = pod.host_path("state")
        assert (state_dir.stat().st_uid, state_dir.stat().st_gid) == (10160, 10160), "init container: chown"

        ready = probe_url(pod, "readinessProbe")
        with told(podman, main):
            wait_for(
                lambda: status(ready) == 200, 60, "the readiness probe's path answers 200", retry_on=(httpx.HTTPError,)
            )
        assert status(probe_url(pod, "livenessProbe")) == 200
        metrics = httpx.get(ready.replace("/-/ready", "/metrics"), timeout=5, trust_env=False).text
        listed = {s["event_id"]: s for s in series(metrics, "azure_scheduled_events_event_info")}
        assert set(listed) == set(ids.values())
        assert {s["affects_this_vm"] for s in listed.values()} == {"true"}, "the VM's name learned from IMDS"
        wait_for(lambda: (state_dir / "state.db").exists(), 20, "state.db on the hostPath")
        first = transitions(podman, main)
        assert [kind for kind, _ in first] == ["scheduled"], first

        podman.run("stop", "--time", "10", main, timeout=30)  # kubelet restarts the container, not the pod
        podman.run("start", main)
        wait_for(lambda: status(ready) == 200, 60, "ready after the restart", retry_on=(httpx.HTTPError,))
        assert transitions(podman, main) == first, "a transition was emitted again after the restart"


def test_a_thousand_events_with_approval_actions_and_a_dead_collector_stay_under_the_memory_limit(
    podman: Podman, image: str, render_pod: Callable[[dict[str, Any]], Pod], container_name: Name, fake_imds: FakeIMDS
) -> None:
    body = worst_document(1, 0)
    fake_imds.respond = lambda seen: Answer(body=body)
    values = {
        "flags": {"imds.url": fake_imds.url},
        "approval": {
            "enabled": True,
            "policy": {"leader": "any_listed", "rules": [{"name": "every-reboot", "event_types": ["Reboot"]}]},
        },
        "actions": {
            "enabled": True,
            "config": {"actions": [{"name": "note", "transitions": ["scheduled"], "command": ["/bin/true"]}]},
        },
        "opentelemetry": {"endpoint": "http://127.0.0.1:9"},  # nothing listens: the spool fills
    }
    pod = render_pod(values)
    main = start_pod(podman, pod, image, container_name)
    cgroup = Cgroup.of(podman, main)
    assert cgroup.limit_bytes() == LIMIT_BYTES
    metrics_url = probe_url(pod, "readinessProbe").replace("/-/ready", "/metrics")

    def counted() -> dict[str, float]:
        text = httpx.get(metrics_url, timeout=10, trust_env=False).text
        return {
            "scheduled": value(
                text, "azure_scheduled_events_transitions_total", event_type="Reboot", transition="scheduled"
            )
            or 0,
            "actions": sum(
                value(text, "azure_scheduled_events_actions_total", action="note", transition="scheduled", result=r)
                or 0
                for r in ("succeeded", "failed", "timed_out", "skipped")
            ),
            "spooled": (value(text, "azure_scheduled_events_log_spool_depth") or 0)
            + (value(text, "azure_scheduled_events_log_spool_dropped_total") or 0),
        }

    began = time.monotonic()
    with told(podman, main):
        wait_for(
            lambda: counted()["scheduled"] == 1000, 180, "1,000 scheduled transitions", retry_on=(httpx.HTTPError,)
        )
        wait_for(lambda: counted()["actions"] == 1000, 300, "1,000 action runs", retry_on=(httpx.HTTPError,))
    final = counted() | {"seconds": round(time.monotonic() - began)}
    assert final["spooled"] >= 1000, final
    approvals = len([seen for seen in fake_imds.requests if seen.method == "POST"])
    assert approvals > 0, "the policy approved nothing"

    inspected = json.loads(podman.run("inspect", main).stdout)[0]
    state = inspected["State"]
    figures = {
        **final,
        "approval_posts": approvals,
        "peak_mib": round(cgroup.peak_bytes() / (1 << 20), 1),
        "rss_mib": round(cgroup.rss_bytes() / (1 << 20), 1),
        # What the cgroup's peak counts besides anonymous memory, at the end: the page cache of the state
        # file, the spool and the action runs' files, and of it the /tmp tmpfs (memory, not reclaimable).
        "file_mib": round(cgroup.page_cache_bytes()[0] / (1 << 20), 1),
        "tmpfs_mib": round(cgroup.page_cache_bytes()[1] / (1 << 20), 1),
        "oom_kills": cgroup.oom_kills(),
    }
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / "pod-memory.json").write_text(json.dumps(figures) + "\n")  # the closing note's figure
    assert state["Running"] and not state["OOMKilled"] and inspected["RestartCount"] == 0, inspected
    assert figures["oom_kills"] == 0, figures
