"""The container image: hadolint, structure, and its install + HEALTHCHECK replayed without Docker."""

from __future__ import annotations

import fnmatch
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from tests.deploy.support import (
    EXPORTER_PORT,
    REPO,
    Stage,
    healthcheck_command,
    key_values,
    parse_dockerfile,
    project_version,
)
from tests.support.exporter_process import bound_port, refused_port
from tests.support.lock import locked_requirements
from tests.support.tools import require

pytestmark = [pytest.mark.posix, pytest.mark.full]

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE)[1]


@pytest.fixture(scope="module")
def final(stages: list[Stage]) -> Stage:
    return stages[-1]


def test_hadolint_clean() -> None:
    hadolint = require("hadolint")
    result = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_multi_stage_final_installs_the_locked_requirements_then_only_the_wheel(
    stages: list[Stage], final: Stage
) -> None:
    assert len(stages) >= 2, "builder + final stage expected"
    builder = stages[0]
    assert builder.name, "the builder stage needs a name for COPY --from="
    assert any("pip wheel" in run.args for run in builder.all("RUN"))
    # The final stage gets nothing from the build context, and everything from the builder by COPY: buildah
    # leaves a RUN --mount's source out of its cache key, so a mounted wheel was installed stale from the cache.
    for copy in final.all("COPY") + final.all("ADD"):
        assert f"--from={builder.name}" in copy.args, f"line {copy.line}: final stage copies from the context"
    for run in final.all("RUN"):
        assert "--mount" not in run.args, f"line {run.line}: a mount buildah's cache does not key on"
    installs = [run for run in final.all("RUN") if "pip install" in run.args]
    assert len(installs) == 2, "the locked requirements, then the project's wheel"
    requirements, wheel = installs
    assert "--require-hashes" in requirements.args and "--no-deps" in requirements.args
    assert "--no-index" in wheel.args and "--no-deps" in wheel.args and ".whl" in wheel.args
    # The layers follow what changes: the requirements are exported before the sources come in.
    export = next(run for run in builder.all("RUN") if "uv export" in run.args)
    sources = next(copy for copy in builder.all("COPY") if "se_exporter" in copy.args)
    assert export.line < sources.line, "a change to the sources would export the requirements again"


def test_base_images_pinned(stages: list[Stage]) -> None:
    for stage in stages:
        image = stage.base
        if stage.base in {s.name for s in stages}:
            continue
        repo, _, tag = image.partition(":")
        assert repo in {"python", "docker.io/library/python"}, image
        assert tag and tag != "latest" and "slim" in tag, f"pin a slim tag, got {image!r}"
        assert tag.startswith(("3.11", "3.12")), f"Python 3.11/3.12 expected, got {image!r}"


def test_runtime_contract(final: Stage) -> None:
    env = key_values(final.all("ENV"))
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
    assert env.get("PIP_NO_CACHE_DIR") in {"1", "off", "true"}

    (user,) = final.all("USER")
    uid = user.args.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "USER must be a fixed numeric non-root uid (runAsNonRoot)"

    (entrypoint,) = final.all("ENTRYPOINT")
    assert entrypoint.exec_form() == ["/usr/bin/tini", "--", "se-exporter"], "an init that reaps is PID 1"

    exposed = {port.split("/")[0] for e in final.all("EXPOSE") for port in e.args.split()}
    assert str(EXPORTER_PORT) in exposed

    state_file = env.get("SE_EXPORTER_STATE_FILE", "")
    assert state_file.startswith("/"), "the image sets --state.file through SE_EXPORTER_STATE_FILE"
    volumes: set[str] = set()
    for volume in final.all("VOLUME"):
        form = volume.exec_form()
        volumes.update(form if form is not None else volume.args.split())
    assert str(PurePosixPath(state_file).parent) in volumes, "the state directory must be a VOLUME"


def test_oci_labels(final: Stage) -> None:
    global_args, _ = parse_dockerfile(DOCKERFILE)
    labels = key_values(final.all("LABEL"))
    for key in ("title", "description", "version", "source", "revision", "created", "licenses"):
        assert f"org.opencontainers.image.{key}" in labels, key
    args = key_values(final.all("ARG")) | global_args
    version = labels["org.opencontainers.image.version"]
    assert version == "${VERSION}", "the version label is the VERSION build argument"
    # pyproject.toml is the one place the version is written: the release workflow passes it in.
    assert args["VERSION"] == "dev" != project_version()
    assert labels["org.opencontainers.image.title"] == "azure-scheduled-events-exporter"


def _copied_sources(stages: list[Stage]) -> list[str]:
    sources: list[str] = []
    for copy in stages[0].all("COPY"):
        words = [w for w in copy.args.split() if not w.startswith("--")]
        sources.extend(words[:-1])
    return sources


def _ignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    return [line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith("#")]


def _ignored(relative: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern that matches decides, and a ``!`` pattern takes the path back in."""
    parts = PurePosixPath(relative).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        bare = pattern.removeprefix("!").removeprefix("**/")
        for prefix in prefixes:
            if fnmatch.fnmatch(prefix, pattern.removeprefix("!")) or fnmatch.fnmatch(PurePosixPath(prefix).name, bare):
                ignored = not pattern.startswith("!")
    return ignored


def test_dockerignore(stages: list[Stage]) -> None:
    patterns = _ignore_patterns()
    for must in (".git", ".venv", "tests", "**/__pycache__"):
        assert must in patterns, f".dockerignore must exclude {must}"
    for source in _copied_sources(stages):
        assert (REPO / source).exists(), f"COPY {source}: not in the repo"
        assert not _ignored(source, patterns), f"COPY {source} is excluded by .dockerignore"


def _build_context(stages: list[Stage], dest: Path) -> None:
    """What the builder stage sees: its COPY sources, minus what .dockerignore drops."""
    patterns = _ignore_patterns()
    for source in _copied_sources(stages):
        path = REPO / source
        if path.is_dir():
            for file in path.rglob("*"):
                relative = file.relative_to(REPO).as_posix()
                if file.is_file() and not _ignored(relative, patterns):
                    (dest / relative).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(file, dest / relative)
        else:
            (dest / source).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest / source)


def _get(url: str) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


@pytest.fixture(scope="module")
def installed_venv(stages: list[Stage], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's install replayed: a wheel from the build context, installed into a fresh venv."""
    work = tmp_path_factory.mktemp("image")
    context, wheels = work / "context", work / "wheels"
    context.mkdir()
    _build_context(stages, context)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SE_EXPORTER_", "OTEL_"))}
    env |= {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(wheels), str(context)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = wheels.glob("azure_scheduled_events_exporter-*.whl")

    # Every file of the package (scenarios, policies, py.typed...) must be in the wheel: `demo` needs
    # them. Markdown files are notes for people, not data the code loads.
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    missing = [
        file.relative_to(context).as_posix()
        for file in sorted((context / "se_exporter").rglob("*"))
        if file.is_file()
        and file.suffix != ".md"
        and "__pycache__" not in file.parts
        and file.relative_to(context).as_posix() not in names
    ]
    assert not missing, f"not in the wheel (add to [tool.setuptools.package-data] in pyproject.toml): {missing}"

    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    locked = work / "locked.txt"  # as the builder stage writes it: the lock's runtime set with [grpc], hashed
    locked.write_text(locked_requirements("--no-dev", "--extra", "grpc"), encoding="utf-8")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps"]
    for install_command in ([*pip, "--require-hashes", "-r", str(locked)], [*pip, str(wheel)]):
        install = subprocess.run(install_command, capture_output=True, text=True, timeout=600, env=env, check=False)
        assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    assert (venv / "bin" / "se-exporter").exists(), "console script se-exporter not installed"
    return venv


@pytest.fixture
def exporter(installed_venv: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, dict[str, str]]]:
    with refused_port() as closed_port:  # IMDS unreachable
        yield from _installed_exporter(installed_venv, tmp_path, closed_port)


def _installed_exporter(
    installed_venv: Path, tmp_path: Path, closed_port: int
) -> Iterator[tuple[subprocess.Popen[str], int, dict[str, str]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SE_EXPORTER_", "OTEL_"))}
    env |= {
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "SE_EXPORTER_STATE_FILE": str(tmp_path / "state" / "state.db"),  # as the image sets it
        "OTEL_SDK_DISABLED": "true",
    }
    (tmp_path / "state").mkdir()
    log = (tmp_path / "exporter.log").open("w+")
    process = subprocess.Popen(
        [
            str(installed_venv / "bin" / "se-exporter"),
            "--web.listen-address",
            "127.0.0.1:0",
            "--imds.url",
            f"http://127.0.0.1:{closed_port}",
        ],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                log.seek(0)
                pytest.fail(f"se-exporter exited with {process.returncode}:\n{log.read()[-3000:]}")
            port = bound_port((tmp_path / "exporter.log").read_text(errors="replace"))
            try:
                if port is not None and _get(f"http://127.0.0.1:{port}/-/healthy") == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                log.seek(0)
                pytest.fail(f"/-/healthy did not answer 200 within 60 s:\n{log.read()[-3000:]}")
            time.sleep(0.2)
        assert port is not None
        yield process, port, env
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


def _healthcheck(final: Stage, installed_venv: Path, env: dict[str, str], port: int) -> int:
    options, command = healthcheck_command(final)
    timeout = float(options.get("timeout", "30s").rstrip("s"))
    assert command[0] in {"python", "python3"}, "HEALTHCHECK must not need curl/wget"
    command = [str(installed_venv / "bin" / "python"), *command[1:]]
    # The image's default listen address is :10160; here the test port, through the same variable.
    env = env | {"SE_EXPORTER_WEB_LISTEN_ADDRESS": f"127.0.0.1:{port}", "HTTP_PROXY": "http://127.0.0.1:9"}
    return subprocess.run(command, env=env, timeout=timeout + 5, capture_output=True, check=False).returncode


@pytest.mark.timeout(600)
def test_installed_wheel_serves_and_healthcheck_passes(
    exporter: tuple[subprocess.Popen[str], int, dict[str, str]], installed_venv: Path, final: Stage
) -> None:
    process, port, env = exporter
    assert _get(f"http://127.0.0.1:{port}/-/healthy") == 200
    # IMDS is unreachable: alive but not ready (the DaemonSet's Service publishes not-ready pods).
    assert _get(f"http://127.0.0.1:{port}/-/ready") == 503
    assert _get(f"http://127.0.0.1:{port}/metrics") == 200
    assert _healthcheck(final, installed_venv, env, port) == 0

    # `docker stop` / pod termination: SIGTERM must end the process promptly.
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=10)
    assert _healthcheck(final, installed_venv, env, port) != 0, "HEALTHCHECK passes with nothing listening"
