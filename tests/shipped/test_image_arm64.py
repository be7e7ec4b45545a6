"""The image on arm64 (issue 56, point 4): built from the same Dockerfile and lock for linux/arm64, run under
qemu's binfmt on this amd64 machine against the demo's simulator, and every ELF file in it checked to be
aarch64. Peers have shipped "arm64" images holding amd64 binaries; their users met ``exec format error``.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.shipped.containers import Podman
from tests.shipped.test_image import bound, get, start
from tests.support.tools import unavailable
from tests.support.wait import wait_for

pytestmark = [pytest.mark.xdist_group("arm64"), pytest.mark.long, pytest.mark.debian, pytest.mark.posix]
# Cold, the arm64 base (mmdebstrap under qemu) takes about 4 minutes and the image's build under emulation more.
pytestmark += [pytest.mark.shipped, pytest.mark.timeout(2400)]

Name = Callable[[], str]
EM_X86_64, EM_AARCH64 = 62, 183
BINFMT = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")


@pytest.fixture(scope="module")
def arm64_image(podman: Podman) -> str:
    if not BINFMT.exists() or "enabled" not in BINFMT.read_text(encoding="utf-8"):
        unavailable(
            "aarch64 binaries do not run here: mount binfmt_misc (mount -t binfmt_misc binfmt_misc "
            "/proc/sys/fs/binfmt_misc), then apt-get install qemu-user-static binfmt-support arch-test"
        )
    return podman.project_image("arm64")


def elf_machines(tar: Path) -> Iterator[tuple[str, int]]:
    """Every ELF file of an exported file system, with its e_machine (both ELF classes, little-endian)."""
    with tarfile.open(tar) as archive:
        for member in archive:
            if not member.isfile() or member.size < 20:
                continue
            handle = archive.extractfile(member)
            assert handle is not None
            header = handle.read(20)
            if header[:4] == b"\x7fELF":
                yield member.name, int.from_bytes(header[18:20], "little")


def exported(podman: Podman, image: str, into: Path, name: str) -> Path:
    podman.run("create", "--platform", "linux/arm64", "--name", name, image)
    tar = into / f"{name}.tar"
    podman.run("export", "--output", str(tar), name, timeout=300)
    return tar


def not_aarch64(tar: Path) -> list[str]:
    machines = dict(elf_machines(tar))
    assert len(machines) > 50, f"only {len(machines)} ELF files: not an image with an interpreter and wheels"
    return sorted(f"{name} (e_machine {machine})" for name, machine in machines.items() if machine != EM_AARCH64)


def test_the_arm64_image_serves_metrics_against_the_simulator(
    podman: Podman, arm64_image: str, container_name: Name
) -> None:
    name = container_name()
    start(podman, name, "--platform", "linux/arm64", arm64_image, "demo", "--web.listen-address=127.0.0.1:0")
    arch = podman.run("exec", name, "uname", "-m").stdout.strip()
    assert arch == "aarch64", f"the container runs {arch}"
    port = bound(podman, name)
    wait_for(lambda: "azure_scheduled_events_event_info{" in get(port, "/metrics").text, 180, "a demo event listed")
    podman.run("stop", "--time", "20", name, timeout=60)


def test_every_elf_file_of_the_arm64_image_is_aarch64_and_the_check_sees_an_amd64_one(
    podman: Podman, arm64_image: str, container_name: Name, tmp_path: Path
) -> None:
    assert not_aarch64(exported(podman, arm64_image, tmp_path, container_name())) == []
    # An amd64 extension forced in, as a wrong wheel would put it: the check names it.
    amd64 = next(path for path in Path(tarfile.__file__).parent.glob("lib-dynload/*.so"))
    forced = tmp_path / "forced"
    forced.mkdir()
    (forced / "wrong.so").write_bytes(amd64.read_bytes())
    (forced / "Containerfile").write_text(
        f"FROM {arm64_image}\nCOPY wrong.so /usr/local/lib/python3.11/dist-packages/msgspec/wrong.so\n",
        encoding="utf-8",
    )
    tag = f"{arm64_image}-forced"
    podman.run("build", "--platform", "linux/arm64", "--tag", tag, str(forced), timeout=300)
    try:
        found = not_aarch64(exported(podman, tag, tmp_path, container_name()))
    finally:
        podman.run("rmi", "--force", tag, check=False)
    assert found == [f"usr/local/lib/python3.11/dist-packages/msgspec/wrong.so (e_machine {EM_X86_64})"]
