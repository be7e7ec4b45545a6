"""The image ``Dockerfile`` builds, run with podman as a user of it would (issue 28, part 1).

Containers share the host's network (``--network host``): the exporter binds port 0 and the test reads
the port from its "listening on" line, and the fake IMDS it polls listens on the host's loopback, so no
traffic leaves the machine. The HEALTHCHECK's test alone gives ports (the probe follows them): its
containers have a loopback of their own (``--network none``), so no other process can hold those ports.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from packaging.utils import canonicalize_name

from tests.deploy.support import project_version
from tests.shipped.containers import Podman, build_context
from tests.support.exporter_process import LISTENING
from tests.support.exposition import series
from tests.support.fake_imds import FakeIMDS, document, scheduled_event
from tests.support.lock import locked_requirements
from tests.support.wait import wait_for

pytestmark = [pytest.mark.debian, pytest.mark.posix, pytest.mark.shipped]

Name = Callable[[], str]
EVENT = scheduled_event("C1")


def get(port: int, path: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5, trust_env=False)


def start(podman: Podman, name: str, *args: str, network: str = "host") -> None:
    """``network="none"``: the container's only network is a loopback of its own, where any port is free."""
    podman.run("run", "--detach", "--name", name, "--network", network, *args)


def healthy(podman: Podman, name: str) -> bool:
    return podman.run("healthcheck", "run", name, check=False).returncode == 0


def bound(podman: Podman, name: str, starts: int = 1) -> int:
    """The port the exporter in that container bound at its ``starts``-th start (its "listening on" line)."""

    def port() -> int | None:
        logs = podman.run("logs", name)
        found = LISTENING.findall(logs.stdout + logs.stderr)
        return int(found[starts - 1]) if len(found) >= starts else None

    return wait_for(port, 90, f"{name} listening")


def transitions(podman: Podman, name: str) -> list[str]:
    logs = podman.run("logs", name)
    return re.findall(r"transition=(\w+)", logs.stdout + logs.stderr)


def test_version_is_the_package_version(podman: Podman, image: str) -> None:
    result = podman.run("run", "--rm", image, "--version")
    assert result.stdout.strip() == f"se-exporter {project_version()}"


def test_a_rebuild_after_a_change_to_the_sources_runs_the_changed_code(
    podman: Podman, image: str, tmp_path: Path
) -> None:
    """The layer cache serves what did not change and never what did: a RUN --mount of the builder's wheels
    was left out of buildah's cache key, and a rebuild ran hours-old code (the build had to skip the cache)."""
    context = build_context(tmp_path / "context")
    init = context / "se_exporter" / "__init__.py"
    version = project_version()
    init.write_text(init.read_text(encoding="utf-8").replace(f'"{version}"', f'"{version}+rebuilt"'), encoding="utf-8")
    tag = f"{image}-rebuilt"
    podman.build(tag, context=context)  # after the image's own build: every layer but the sources' is cached
    try:
        assert podman.run("run", "--rm", tag, "--version").stdout.strip() == f"se-exporter {version}+rebuilt"
    finally:
        podman.run("rmi", "--force", tag, check=False)


def test_the_image_keeps_no_package_lists_or_caches(podman: Podman, image: str) -> None:
    """apt's lists and its binary caches (77 MB on a Debian base without the official images' apt settings)."""
    found = podman.run(
        "run",
        "--rm",
        "--user",
        "0",
        "--entrypoint",
        "find",
        image,
        "/var/lib/apt/lists",
        "/var/cache/apt",
        "-type",
        "f",
    ).stdout.split()
    assert [path for path in found if not path.endswith("/lock")] == []


def test_the_image_holds_exactly_the_locked_versions(podman: Podman, image: str) -> None:
    """Issue 56: built from uv.lock with hashes, so every build of the same tree holds the same versions."""
    listed = podman.run("run", "--rm", "--entrypoint", "python", image, "-m", "pip", "list", "--format", "json")
    installed = {canonicalize_name(p["name"]): p["version"] for p in json.loads(listed.stdout)}
    exported = locked_requirements("--no-dev", "--extra", "grpc", "--no-hashes", "--no-header", "--no-annotate")
    locked = dict(line.split(" ;")[0].split("==") for line in exported.splitlines() if re.match(r"^[a-z0-9]", line))
    wanted = {canonicalize_name(name): version for name, version in locked.items()}
    wanted[canonicalize_name("azure-scheduled-events-exporter")] = project_version()
    base = {"pip", "setuptools", "wheel"}  # the base image's own
    assert {name: v for name, v in installed.items() if name not in base} == wanted


def test_demo_on_a_read_only_root_as_uid_10160_serves_metrics_and_stops_on_sigterm(
    podman: Podman, image: str, container_name: Name
) -> None:
    name = container_name()
    start(podman, name, "--read-only", image, "demo", "--web.listen-address=127.0.0.1:0")
    port = bound(podman, name)
    wait_for(lambda: "azure_scheduled_events_event_info{" in get(port, "/metrics").text, 90, "a demo event listed")
    status = podman.run("exec", name, "cat", "/proc/1/status").stdout
    uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
    assert set(uids) == {"10160"}, f"the exporter runs as {uids}, not uid 10160"
    began = time.monotonic()
    podman.run("stop", "--time", "10", name, timeout=30)
    stopped_within = time.monotonic() - began
    state = json.loads(podman.run("inspect", name).stdout)[0]["State"]
    assert state["ExitCode"] == 0, state
    assert stopped_within < 10, f"SIGTERM took {stopped_within:.1f} s (podman kills at 10 s)"


def test_healthcheck_follows_the_listen_address_flag_and_variable(
    podman: Podman, image: str, container_name: Name
) -> None:
    by_flag, by_variable, nothing = container_name(), container_name(), container_name()
    flag_port, variable_port, other_port = 9101, 9102, 9103  # each container's own loopback: all free
    # The flag wins over its variable, in the exporter and so in the probe.
    start(
        podman,
        by_flag,
        "--env",
        f"SE_EXPORTER_WEB_LISTEN_ADDRESS=127.0.0.1:{other_port}",
        image,
        "demo",
        f"--web.listen-address=127.0.0.1:{flag_port}",
        network="none",
    )
    variable = f"SE_EXPORTER_WEB_LISTEN_ADDRESS=127.0.0.1:{variable_port}"
    start(podman, by_variable, "--env", variable, image, "demo", network="none")
    for name, port in ((by_flag, flag_port), (by_variable, variable_port)):
        assert bound(podman, name) == port
        assert healthy(podman, name), podman.run("healthcheck", "run", name, check=False).stdout
    # No exporter in the container: the probe must fail.
    unused = f"SE_EXPORTER_WEB_LISTEN_ADDRESS=127.0.0.1:{other_port}"
    start(podman, nothing, "--env", unused, "--entrypoint", "sleep", image, "60", network="none")
    assert not healthy(podman, nothing), "HEALTHCHECK passed with no exporter listening"


def test_the_state_volume_keeps_every_lifecycle_across_a_restart(
    podman: Podman, image: str, container_name: Name, fake_imds: FakeIMDS
) -> None:
    name = container_name()
    volume = name  # removed with the container by the fixture
    podman.run("volume", "create", volume)
    fake_imds.respond = lambda seen: document(1, EVENT)
    args = (
        "--volume",
        f"{volume}:/var/lib/se-exporter",
        "--read-only",
        image,
        "--web.listen-address=127.0.0.1:0",
        f"--imds.url={fake_imds.url}",
        "--poll.interval=250ms",
    )
    start(podman, name, *args)
    wait_for(lambda: transitions(podman, name) == ["scheduled"], 60, "the scheduled transition logged")
    saved = podman.run("exec", name, "python", "-c", READ_STORE).stdout
    assert '"C1"' in saved, "the state file in the volume holds the event"
    podman.run("stop", "--time", "10", name, timeout=30)
    podman.run("start", name)
    port = bound(podman, name, starts=2)
    wait_for(lambda: get(port, "/-/ready").status_code == 200, 60, "ready after the restart")
    restarted = get(port, "/metrics").text
    assert [s["event_id"] for s in series(restarted, "azure_scheduled_events_event_info")] == ["C1"]
    assert transitions(podman, name) == ["scheduled"], "a transition emitted again after the restart"


# The events' rows, read from the database beside the running exporter, as an operator would.
READ_STORE = (
    "import sqlite3\n"
    "db = sqlite3.connect('file:/var/lib/se-exporter/state.db?mode=ro', uri=True)\n"
    "print([bytes(body).decode() for (body,) in db.execute('SELECT body FROM events')])"
)

_ZOMBIES = (
    "import os\n"
    "states = [open(f'/proc/{p}/stat').read().rsplit(') ', 1) for p in os.listdir('/proc') if p.isdigit()]\n"
    "print(sum(1 for s in states if s[0].endswith('(sleep') and s[1][0] != 'Z'), "
    "sum(1 for s in states if s[1][0] == 'Z'))"
)


def test_an_init_reaps_what_an_action_leaves_behind(
    podman: Podman, image: str, container_name: Name, fake_imds: FakeIMDS, tmp_path: Path
) -> None:
    """Issue 38, point 4: as PID 1 the exporter reaped no orphans; a grandchild left by a hook or an action
    stayed a zombie until the container ended. tini is PID 1 now."""
    actions = tmp_path / "actions.yaml"
    actions.write_text(
        "actions:\n  - name: leave-a-child\n    transitions: [scheduled]\n"
        '    command: ["/bin/sh", "-c", "sleep 1 & exit 0"]\n    timeout_seconds: 10\n',
        encoding="utf-8",
    )
    actions.chmod(0o644)
    fake_imds.respond = lambda seen: document(1, *(scheduled_event(f"Z{n}") for n in range(3)))
    name = container_name()
    start(
        podman,
        name,
        "--read-only",
        "--volume",
        f"{actions}:/etc/se-exporter/actions.yaml:ro",
        image,
        "--web.listen-address=127.0.0.1:0",
        f"--imds.url={fake_imds.url}",
        "--vm.name=vm-a",
        "--actions.config=/etc/se-exporter/actions.yaml",
    )
    ran = 'azure_scheduled_events_actions_total{action="leave-a-child",result="succeeded",transition="scheduled"} 3.0'
    port = bound(podman, name)
    wait_for(lambda: ran in get(port, "/metrics").text, 60, "three runs succeeded")
    assert podman.run("exec", name, "cat", "/proc/1/comm").stdout.strip() == "tini"

    def counts() -> tuple[int, int]:
        sleeping, zombies = podman.run("exec", name, "python", "-c", _ZOMBIES).stdout.split()
        return int(sleeping), int(zombies)

    wait_for(lambda: counts()[0] == 0, 20, "the runs' grandchildren done sleeping")
    assert counts() == (0, 0), "no zombie left behind"
    podman.run("stop", "--time", "10", name, timeout=30)
