"""The DaemonSet's pod as ``helm template`` renders it, run with podman as a kubelet would run it.

``podman kube play`` (4.3) knows no DaemonSet, no fieldRef and races init containers, so the pod spec is
translated into ``podman run`` options here, field by field; anything in the spec this translation does
not know fails the test rather than being dropped:

- env and args: values, ``$(VAR)`` references, and fieldRefs given the node's values;
- securityContext: user, group and fsGroup, runAsNonRoot checked, read-only root (nothing else writable:
  ``--read-only-tmpfs=false``), capabilities, no privilege escalation, the runtime's default seccomp;
- volumes: emptyDir as a tmpfs of its sizeLimit, hostPath as a bind of a directory made as kubelet makes
  it (root, 0755), ConfigMap and Secret files written from the rendered objects, mounted read-only;
- init containers run to completion first, in order; ``resources.limits`` become the cgroup's limits.

The pod shares the host's network (the fake IMDS and the test listen on its loopback); kubelet's probes
are the test's own requests to the probe's path and port.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.shipped.containers import Podman

FIELDS = ("spec.nodeName", "metadata.name", "metadata.namespace", "status.hostIP", "status.podIP")
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|m)?$")


@dataclass(frozen=True)
class Node:
    """What the API server would fill in: the fieldRefs' values."""

    name: str = "aks-nodepool1-12345678-vmss000000"
    pod: str = "se-exporter-x7k2p"
    namespace: str = "monitoring"
    host_ip: str = "127.0.0.1"

    def field(self, path: str) -> str:
        return {
            "spec.nodeName": self.name,
            "metadata.name": self.pod,
            "metadata.namespace": self.namespace,
            "status.hostIP": self.host_ip,
            "status.podIP": self.host_ip,
        }[path]


@dataclass
class Pod:
    """The rendered DaemonSet and the objects its volumes name, laid out under ``root``."""

    daemonset: dict[str, Any]
    objects: list[dict[str, Any]]
    root: Path
    node: Node = field(default_factory=Node)

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.daemonset["spec"]["template"]["spec"]
        return spec

    def container(self, name: str) -> dict[str, Any]:
        (found,) = [c for c in self.spec.get("initContainers", []) + self.spec["containers"] if c["name"] == name]
        return dict(found)

    def host_path(self, volume: str) -> Path:
        return self.root / "host" / volume

    def run_options(self, container: dict[str, Any], image: str) -> list[str]:
        """``podman run`` options and arguments for ``container`` of this pod (image replaced by ``image``)."""
        known = {"name", "image", "imagePullPolicy", "command", "args", "env", "ports", "livenessProbe"}
        known |= {"readinessProbe", "resources", "securityContext", "volumeMounts"}
        unknown = set(container) - known
        assert not unknown, f"container {container['name']}: not translated: {sorted(unknown)}"
        env = self._env(container.get("env", []))
        options = ["--network", "host", "--pull", "never", *self._security(container), *self._limits(container)]
        for name, value in env.items():
            options += ["--env", f"{name}={value}"]
        options += self._mounts(container.get("volumeMounts", []))
        command = [expand(part, env) for part in container.get("command", [])]
        args = [expand(part, env) for part in container.get("args", [])]
        if command:
            options += ["--entrypoint", command[0]]
            args = command[1:] + args
        return [*options, image, *args]

    def _env(self, items: list[dict[str, Any]]) -> dict[str, str]:
        env: dict[str, str] = {}
        for item in items:
            if "value" in item:
                env[item["name"]] = expand(str(item["value"]), env)
            else:
                path = item["valueFrom"]["fieldRef"]["fieldPath"]
                assert path in FIELDS, f"env {item['name']}: fieldRef {path} not translated"
                env[item["name"]] = self.node.field(path)
        return env

    def _security(self, container: dict[str, Any]) -> list[str]:
        pod = self.spec.get("securityContext", {})
        own = container.get("securityContext", {})
        merged = {**pod, **own}
        user, group = merged.get("runAsUser"), merged.get("runAsGroup")
        if merged.get("runAsNonRoot"):
            assert user not in (None, 0), f"{container['name']}: runAsNonRoot without a non-root runAsUser"
        assert pod.get("seccompProfile", {}).get("type", "RuntimeDefault") == "RuntimeDefault"
        options = ["--user", f"{user}:{group}"] if user is not None else []
        if "fsGroup" in pod:
            options += ["--group-add", str(pod["fsGroup"])]
        if own.get("readOnlyRootFilesystem"):
            options += ["--read-only", "--read-only-tmpfs=false"]
        if own.get("allowPrivilegeEscalation") is False:
            options += ["--security-opt", "no-new-privileges"]
        capabilities = own.get("capabilities", {})
        options += [f"--cap-drop={cap}" for cap in capabilities.get("drop", [])]
        options += [f"--cap-add={cap}" for cap in capabilities.get("add", [])]
        return options

    def _limits(self, container: dict[str, Any]) -> list[str]:
        limits = container.get("resources", {}).get("limits", {})
        options: list[str] = []
        if "memory" in limits:
            options += ["--memory", str(quantity(limits["memory"])), "--memory-swap", str(quantity(limits["memory"]))]
        if "cpu" in limits:
            options += ["--cpus", f"{quantity(limits['cpu']):g}"]
        return options

    def _mounts(self, mounts: list[dict[str, Any]]) -> list[str]:
        volumes = {volume["name"]: volume for volume in self.spec.get("volumes", [])}
        options: list[str] = []
        for mount in mounts:
            volume, target = volumes[mount["name"]], mount["mountPath"]
            read_only = ",ro" if mount.get("readOnly") else ""
            if "emptyDir" in volume:
                size = volume["emptyDir"].get("sizeLimit")
                options += ["--tmpfs", f"{target}:rw,mode=1777" + (f",size={quantity(size)}" if size else "")]
            elif "hostPath" in volume:
                options += ["--volume", f"{self._host_dir(mount['name'])}:{target}{read_only}"]
            elif "configMap" in volume or "secret" in volume:
                options += ["--volume", f"{self._files(volume)}:{target}:ro"]
            else:
                raise AssertionError(f"volume {mount['name']}: kind not translated: {sorted(volume)}")
        return options

    def _host_dir(self, volume: str) -> Path:
        path = self.host_path(volume)
        path.mkdir(parents=True, exist_ok=True)  # DirectoryOrCreate: root-owned, 0755
        path.chmod(0o755)
        return path

    def _files(self, volume: dict[str, Any]) -> Path:
        if "configMap" in volume:
            source = self._object("ConfigMap", volume["configMap"]["name"])
            data = {key: value.encode() for key, value in source.get("data", {}).items()}
        else:
            source = self._object("Secret", volume["secret"]["secretName"])
            data = {key: base64.b64decode(value) for key, value in source.get("data", {}).items()}
            data |= {key: value.encode() for key, value in source.get("stringData", {}).items()}
        directory = self.root / "volumes" / str(volume["name"])
        directory.mkdir(parents=True, exist_ok=True)
        for key, content in data.items():
            (directory / key).write_bytes(content)
            (directory / key).chmod(0o644)  # defaultMode
        return directory

    def _object(self, kind: str, name: str) -> dict[str, Any]:
        found = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        assert found, f"{kind} {name}: named by a volume, not among the objects given"
        return found[0]


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)``: replaced by an earlier variable's value, left as it is otherwise."""
    return re.sub(r"\$\((\w+)\)", lambda match: env.get(match.group(1), match.group(0)), text)


def quantity(text: str | int) -> float:
    """A Kubernetes quantity (``96Mi``, ``100m``, ``16Mi``) in bytes or cores."""
    match = _QUANTITY.match(str(text))
    assert match, f"quantity {text!r} not translated"
    scale = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "m": 0.001, None: 1}[match.group(2)]
    number = float(match.group(1)) * scale
    return int(number) if match.group(2) != "m" else number


@dataclass(frozen=True)
class Cgroup:
    """The memory cgroup of a running container, as the kernel counts it (v1 here; v2 where the host has it)."""

    path: Path
    v1: bool

    @classmethod
    def of(cls, podman: Podman, name: str) -> Cgroup:
        relative = podman.run("inspect", "--format", "{{.State.CgroupPath}}", name).stdout.strip().lstrip("/")
        v1 = Path("/sys/fs/cgroup/memory").is_dir()
        return cls(Path("/sys/fs/cgroup/memory" if v1 else "/sys/fs/cgroup") / relative, v1)

    def _pairs(self, name: str) -> dict[str, int]:
        lines = (self.path / name).read_text(encoding="utf-8").splitlines()
        return {key: int(value) for key, value in (line.split() for line in lines)}

    def _number(self, name: str) -> int:
        return int((self.path / name).read_text(encoding="utf-8"))

    def rss_bytes(self) -> int:
        stat = self._pairs("memory.stat")
        return stat["total_rss"] if self.v1 else stat["anon"]

    def page_cache_bytes(self) -> tuple[int, int]:
        """(file pages, of which tmpfs/shmem): what the cgroup counts beside anonymous memory."""
        stat = self._pairs("memory.stat")
        return (stat["total_cache"], stat.get("total_shmem", 0)) if self.v1 else (stat["file"], stat["shmem"])

    def oom_kills(self) -> int:
        return self._pairs("memory.oom_control" if self.v1 else "memory.events").get("oom_kill", 0)

    def peak_bytes(self) -> int:
        return self._number("memory.max_usage_in_bytes" if self.v1 else "memory.peak")

    def limit_bytes(self) -> int:
        return self._number("memory.limit_in_bytes" if self.v1 else "memory.max")
