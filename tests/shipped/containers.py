"""podman, a local Debian base image, and the project's image built from ``Dockerfile``.

No image registry is reachable here, so the base is made: a Debian bookworm minbase with python3, pip and
venv (``mmdebstrap``), laid out like the official python image (``python`` and ``pip`` in /usr/local/bin,
pip allowed to install system-wide), imported with ``podman import`` and passed as
``--build-arg PYTHON_IMAGE``. Its tarball is cached outside the checkout (:data:`CACHE`), named by the
command that makes it; images are tagged by the hash of what they are built from, so a second test
worker, run or fresh clone reuses them.

podman's settings for this machine live in a private ``containers.conf`` named by ``CONTAINERS_CONF``
(the system-wide one is left as it is): runc (crun refuses a hybrid cgroup layout) and rlimits within the
host's hard limits (root cannot raise them). Builds use ``--format docker`` (OCI drops HEALTHCHECK) and
reach the package index as the host's pip does: its CA bundle and index settings are mounted for the
build only (``podman build -v``), never written into a layer.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.support import REPO
from tests.support.cache import CACHE, cache_lock
from tests.support.tools import unavailable

REPORTS = REPO / ".cache" / "reports"  # what this checkout's last run measured (git-ignored)
IMAGE_REPOSITORY = "localhost/azure-scheduled-events-exporter"
PACKAGES = "podman buildah runc mmdebstrap uidmap fuse-overlayfs slirp4netns containernetworking-plugins catatonit"
_BUILD_INPUTS = (
    "Dockerfile",
    ".dockerignore",
    "pyproject.toml",
    "uv.lock",
    ".ci/uv.txt",
    "README.md",
    "LICENSE",
    "se_exporter",
)


def _containers_conf() -> Path:
    import resource

    # Within the host's hard limits, and modest: runc refused nproc above 32768 here even under a hard
    # limit of 96365 (measured); an exporter's container needs a few dozen of each.
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65_536)
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 4_096)
    path = CACHE / "containers.conf"
    text = (
        "# Written by tests/shipped/containers.py for the test suite's podman only.\n"
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
    )
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        CACHE.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


@dataclass(frozen=True)
class Podman:
    binary: str
    conf: Path

    @classmethod
    def find(cls) -> Podman:
        missing = [tool for tool in ("podman", "runc", "mmdebstrap") if shutil.which(tool) is None]
        if missing:
            unavailable(f"{', '.join(missing)} not found (apt-get install {PACKAGES})")
        if os.geteuid() != 0:
            unavailable("the image tests run podman as root (the README's test command runs them so)")
        return cls(str(shutil.which("podman")), _containers_conf())

    def env(self) -> dict[str, str]:
        return {**os.environ, "CONTAINERS_CONF": str(self.conf)}

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.binary, *args], capture_output=True, text=True, timeout=timeout, env=self.env(), check=False
        )
        if check:
            assert result.returncode == 0, f"podman {' '.join(args)}: exit {result.returncode}\n{result.stderr[-4000:]}"
        return result

    def explain(self, container: str) -> str:
        """What a failed wait on ``container`` should say: its state (exit code, OOM kill) and its last output."""
        state = self.run(
            "inspect",
            "--format",
            "{{.State.Status}} exit={{.State.ExitCode}} oom={{.State.OOMKilled}}",
            container,
            check=False,
        )
        logs = self.run("logs", "--tail", "40", container, check=False)
        said = state.stdout.strip() or state.stderr.strip()
        return f"container {container}: {said}\n{logs.stdout}{logs.stderr}"[-6000:]

    def exists(self, image: str) -> bool:
        return self.run("image", "exists", image, check=False).returncode == 0

    def base_image(self, arch: str = "amd64") -> str:
        """The Debian base for ``arch`` (amd64, or arm64 made and run under qemu's binfmt), imported once."""
        key = _base_key(arch)
        tag = f"{BASE_REPOSITORY}:bookworm-{key}" + ("" if arch == "amd64" else f"-{arch}")
        with cache_lock(f"base-{arch}"):
            if not self.exists(tag):
                tarball = CACHE / f"bookworm-python-{key}.tar"
                if not tarball.exists():
                    _debootstrap(tarball, arch)
                self.run(
                    "import",
                    "--arch",
                    arch,
                    "--change",
                    "ENV PIP_BREAK_SYSTEM_PACKAGES=1",
                    "--change",
                    'CMD ["python"]',
                    str(tarball),
                    tag,
                    timeout=300,
                )
        return tag

    def project_image(self, arch: str = "amd64") -> str:
        """The image ``Dockerfile`` builds for ``arch``, on the local base; built once per content."""
        tag = f"{IMAGE_REPOSITORY}:test-{_inputs_hash()}" + ("" if arch == "amd64" else f"-{arch}")
        with cache_lock(f"image-{arch}"):
            if not self.exists(tag):
                self.build(tag, arch)
        return tag

    def build(self, tag: str, arch: str = "amd64", context: Path = REPO) -> None:
        """``Dockerfile`` in ``context`` built for ``arch`` on the local base, with the layer cache (every file
        the final stage takes from the builder comes by COPY, which buildah keys its cache on)."""
        base = self.base_image(arch)
        mounts = _pip_mounts(CACHE / "build-pip")
        self.run(
            "build",
            "--platform",
            f"linux/{arch}",
            "--format",
            "docker",
            "--network",
            "host",
            "--build-arg",
            f"PYTHON_IMAGE={base}",
            *mounts,
            "--tag",
            tag,
            str(context),
            timeout=1800,  # under emulation (arm64), pip alone takes minutes
        )


def _build_files() -> list[Path]:
    """What the image is built from: the files of ``_BUILD_INPUTS``, without bytecode, in a stable order."""
    files: list[Path] = []
    for name in _BUILD_INPUTS:
        path = REPO / name
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        else:
            files.append(path)
    return files


def build_context(into: Path) -> Path:
    """A copy of what the image is built from (the files ``Dockerfile`` copies, and ``.dockerignore``)."""
    for file in _build_files():
        target = into / file.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, target)
    return into


def _inputs_hash() -> str:
    digest = hashlib.sha256()
    for file in _build_files():
        digest.update(file.relative_to(REPO).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


_HOOK = (
    'ln -sf /usr/bin/python3 "$1/usr/local/bin/python" && ln -sf /usr/bin/pip3 "$1/usr/local/bin/pip" '
    '&& rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED'
)
_MMDEBSTRAP = (
    "mmdebstrap",
    "--variant=minbase",
    "--include=python3,python3-pip,python3-venv",
    f"--customize-hook={_HOOK}",
    "--format=tar",
    "bookworm",
)
BASE_REPOSITORY = "localhost/se-exporter-test-base"


def _mmdebstrap(arch: str) -> tuple[str, ...]:
    return _MMDEBSTRAP if arch == "amd64" else (*_MMDEBSTRAP[:1], f"--architectures={arch}", *_MMDEBSTRAP[1:])


def _base_key(arch: str) -> str:
    """The base's name: the command that makes it, hashed."""
    return hashlib.sha256("\0".join(_mmdebstrap(arch)).encode()).hexdigest()[:12]


def _debootstrap(tarball: Path, arch: str) -> None:
    partial = tarball.with_suffix(".partial")
    result = subprocess.run(
        [*_mmdebstrap(arch), str(partial)],
        capture_output=True,
        text=True,
        timeout=1800,  # arm64 under qemu: 4.5 minutes measured
        check=False,
    )
    assert result.returncode == 0, f"mmdebstrap: exit {result.returncode}\n{result.stderr[-4000:]}"
    partial.rename(tarball)


def pip_settings() -> dict[str, str]:
    """The host pip's settings (``pip config list``, then its PIP_* variables): how it reaches the index."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    settings: dict[str, str] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        name = key.rpartition(".")[2]
        settings[name] = value.strip().strip("'\"")
    for name in ("index-url", "extra-index-url", "trusted-host", "proxy", "cert"):
        if (from_env := os.environ.get("PIP_" + name.upper().replace("-", "_"))) is not None:
            settings[name] = from_env
    return settings


def pip_ca_bundle(settings: dict[str, str] | None = None) -> str | None:
    """The CA bundle the host's pip trusts (a proxy's CA, where there is one), if it names one."""
    settings = pip_settings() if settings is None else settings
    cert = settings.get("cert") or os.environ.get("SSL_CERT_FILE", "")
    return str(Path(cert).resolve()) if cert and Path(cert).is_file() else None


def _pip_mounts(into: Path) -> list[str]:
    """``podman build -v`` options giving the build's pip the host pip's index and CA bundle, for the build only.

    Of the host's pip configuration only what reaches an index over the network is kept (index URLs,
    trusted hosts, proxy, the CA bundle); local paths (find-links, constraints) mean nothing in the build.
    """
    settings = pip_settings()
    lines = ["[global]"]
    for name in ("index-url", "extra-index-url"):
        urls = [url for url in settings.get(name, "").split() if url.startswith(("http://", "https://"))]
        if urls:
            lines.append(f"{name} = {' '.join(urls)}")
    for name in ("trusted-host", "proxy"):
        if settings.get(name):
            lines.append(f"{name} = {settings[name]}")
    mounts: list[str] = []
    if (cert := pip_ca_bundle(settings)) is not None:
        lines.append("cert = /run/host-pip/ca.crt")
        mounts += ["--volume", f"{cert}:/run/host-pip/ca.crt:ro"]
    into.mkdir(parents=True, exist_ok=True)
    (into / "pip.conf").write_text("\n".join(lines) + "\n")
    return [*mounts, "--volume", f"{into / 'pip.conf'}:/etc/pip.conf:ro"]
