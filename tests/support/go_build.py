"""The Go programs the tests run beside se-exporter (the OpenTelemetry Collector, exporter-toolkit's web
server): each a folder of this suite with a main, its go.mod and its go.sum (which verifies every module),
built once per machine into the test cache (``tests/support/cache.py``), named by a digest of what it is
built from (go.mod, go.sum, main.go and the Go version), so it is rebuilt only when one of them changes.

The build uses the machine's Go when that is at least ``GO_MINIMUM`` (the go.mod files' ``go`` line); else
Go ``TOOLCHAIN``, fetched once from the Go module proxy (the ``golang.org/toolchain`` module the go command
itself switches to) and checked against the SHA-256 pinned here. The build never asks the checksum
database: ``-mod=readonly`` and a complete go.sum. Go serves the tests only: the product stays Python.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import urllib.request
import zipfile
from pathlib import Path

from tests.support.cache import CACHE, cache_lock
from tests.support.tools import unavailable

TESTS = Path(__file__).resolve().parents[1]
GO_MINIMUM = (1, 26)
TOOLCHAIN = "go1.26.8"
TOOLCHAIN_SHA256 = {  # the zips of golang.org/toolchain v0.0.1-go1.26.8.linux-<arch> on the Go module proxy
    "amd64": "30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7",
    "arm64": "02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99",
}


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _go_version(go: str) -> tuple[int, int]:
    try:
        printed = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60).stdout
    except OSError:
        return (0, 0)
    match = re.match(r"go(\d+)\.(\d+)", printed.strip())
    return (int(match[1]), int(match[2])) if match else (0, 0)


def _proxy() -> str:
    """The first Go module proxy the environment names (GOPROXY), as the go command would use it."""
    for entry in re.split(r"[,|]", os.environ.get("GOPROXY") or "https://proxy.golang.org"):
        if entry.startswith(("https://", "http://")):
            return entry.rstrip("/")
    return "https://proxy.golang.org"


def go_command() -> tuple[str, str]:
    """A go command that can build the Collector, and which one it is (for the docs and the note)."""
    machine = shutil.which("go")
    if machine and _go_version(machine) >= GO_MINIMUM:
        return machine, f"the machine's Go ({machine})"
    arch = _arch()
    if arch not in TOOLCHAIN_SHA256:
        unavailable(f"no Go {'.'.join(map(str, GO_MINIMUM))} here and no pinned toolchain for {arch}")
    folder = CACHE / f"{TOOLCHAIN}.linux-{arch}"
    go = folder / f"golang.org/toolchain@v0.0.1-{TOOLCHAIN}.linux-{arch}" / "bin" / "go"
    with cache_lock("go-toolchain"):
        if not go.exists():
            url = f"{_proxy()}/golang.org/toolchain/@v/v0.0.1-{TOOLCHAIN}.linux-{arch}.zip"
            download = CACHE / f"{TOOLCHAIN}.linux-{arch}.zip.part"
            try:
                with urllib.request.urlopen(url, timeout=300) as answer, download.open("wb") as out:
                    shutil.copyfileobj(answer, out)
            except OSError as error:
                unavailable(f"cannot fetch Go {TOOLCHAIN} from {url}: {error}")
            digest = hashlib.sha256(download.read_bytes()).hexdigest()
            if digest != TOOLCHAIN_SHA256[arch]:
                download.unlink()
                raise AssertionError(f"{url}: sha256 {digest}, not the pinned {TOOLCHAIN_SHA256[arch]}")
            shutil.rmtree(folder, ignore_errors=True)
            with zipfile.ZipFile(download) as archive:
                for member in archive.infolist():  # zip keeps no modes: bin/ and pkg/tool/ are programs
                    path = Path(archive.extract(member, folder))
                    if "/bin/" in member.filename or "/pkg/tool/" in member.filename:
                        path.chmod(0o755)
            download.unlink()
    return str(go), f"Go {TOOLCHAIN} from the module proxy ({go})"


def go_build(source: Path) -> Path:
    """The program of ``source`` (a folder of this suite with its go.mod, go.sum and main.go), built now
    unless the cache has it."""
    go, _ = go_command()
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((source / name).read_bytes())
    digest.update(str(_go_version(go)).encode())
    binary = CACHE / f"{source.name}-{digest.hexdigest()[:16]}" / source.name
    with cache_lock(f"go-{source.name}"):
        if not binary.exists():
            building = binary.with_name(f"{source.name}.building")
            env = {
                **os.environ,
                "GOFLAGS": "-mod=readonly -trimpath",
                "GOTOOLCHAIN": "local",  # this go, whatever go.mod says
                "CGO_ENABLED": "0",
                "GOCACHE": str(CACHE / "go-build"),
                "GOMODCACHE": str(CACHE / "go-mod"),
            }
            built = subprocess.run(
                [go, "build", "-o", str(building), "."],
                cwd=source,
                env=env,
                capture_output=True,
                text=True,
                timeout=1800,
                check=False,
            )
            assert built.returncode == 0, f"building {source} failed:\n{built.stderr[-6000:]}"
            building.rename(binary)
    return binary
