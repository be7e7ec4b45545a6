"""Shared helpers of the benchmarks: tables, percentiles, /proc readings, processes, simulators.

Everything here is stdlib (plus se_exporter itself): the benchmarks must start on any checkout.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.support.proc_sockets import listening_ports
from tests.support.wait import wait_for

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
FAR_NOTICE = 30 * 24 * 3600.0  # a NotBefore a month away: the event stays Scheduled for the whole run

# Urllib without proxies: everything here talks to 127.0.0.1.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ----- modes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    """How long/how often: ``full`` (publishable), ``quick`` (~10 s runs) or ``tiny`` (smoke test)."""

    name: str = "full"

    def pick(self, full: Any, quick: Any, tiny: Any) -> Any:
        return {"full": full, "quick": quick, "tiny": tiny}[self.name]


# ----- statistics and tables -------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.{digits}f}"
    return str(value)


def render_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (readable in a terminal, pasteable into BENCHMARKS.md)."""
    cells = [[str(h) for h in headers], *[[fmt(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [f"### {title}", ""]
    for index, row in enumerate(cells):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if index == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


@dataclass
class Report:
    """What one benchmark produced: printed tables plus a JSON document."""

    name: str
    tables: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def table(self, title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        text = render_table(title, headers, rows)
        self.tables.append(text)
        print(text, "", sep="\n", flush=True)

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"note: {text}", flush=True)


def machine_info() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kib = 0
    with contextlib.suppress(OSError), open("/proc/meminfo", encoding="utf-8") as meminfo:
        mem_kib = int(meminfo.readline().split()[1])
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "mem_gib": round(mem_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "kernel": platform.release(),
        "python_executable": sys.executable,
    }


def write_results(report: Report, mode: Mode) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    path = RESULTS_DIR / f"{report.name}-{mode.name}-{stamp}.json"
    payload = {
        "benchmark": report.name,
        "mode": mode.name,
        "machine": machine_info(),
        "data": report.data,
        "notes": report.notes,
        "tables": report.tables,
    }
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


# ----- /proc -----------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """CPU time of the whole process (every thread, exited ones too), in seconds, to the nanosecond.

    The kernel's process CPU clock (what ``clock_getcpuclockid(pid)`` names: CPUCLOCK_SCHED, process-wide),
    not /proc/<pid>/stat's utime+stime, which count in 10 ms ticks: an idle exporter uses about 70 ms a
    minute, so one tick more or less was a 14 % swing of a 60 s window's ratio. /proc is the fallback."""
    try:
        return time.clock_gettime((~pid << 3) | 2)
    except OSError:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            text = stat.read()
        fields = text[text.rindex(")") + 2 :].split()  # the command name may contain spaces
        return (int(fields[11]) + int(fields[12])) / CLK_TCK


def spread(values: Sequence[float], digits: int = 2) -> str:
    """``median (min-max)`` of ``values``, as BENCHMARKS.md reports a figure."""
    if not values:
        return "n/a"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def proc_status_kib(pid: int, key: str) -> int:
    """A ``kB`` field of /proc/<pid>/status, e.g. ``VmHWM`` (peak RSS) or ``VmRSS``."""
    with open(f"/proc/{pid}/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


# ----- HTTP ------------------------------------------------------------------------------------


# What the exporter (and every server here started on port 0) prints once bound: the port it got. No port is
# chosen here and left for another process (a test beside the benchmarks) to take first.
LISTENING = re.compile(r"listening on https?://[^\s\"]+?:(\d+)/")

_REFUSING: list[socket.socket] = []  # bound, never listening: held for the life of the benchmarks


def refusing_port() -> int:
    """A loopback port where every connection is refused, and that no other process can take: bound here and
    never listened on, for as long as this process lives."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _REFUSING.append(sock)
    return int(sock.getsockname()[1])


def bound_url(process: subprocess.Popen[bytes]) -> str:
    """The URL of a server started on 127.0.0.1:0 (Prometheus, VictoriaMetrics), its port read from the
    kernel's table of its listening sockets: VictoriaMetrics logs the address it was given, not the port."""

    def port() -> int | None:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        ports = listening_ports(process.pid)
        if len(ports) > 1:
            raise RuntimeError(f"{process.args!r} listens on {ports}: which is its HTTP port?")
        return ports[0] if ports else None

    return f"http://127.0.0.1:{wait_until(port, 60, 'its port')}"


def http_get(url: str, headers: dict[str, str] | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def wait_until(condition: Callable[[], T | None], timeout: float, what: str, interval: float = 0.01) -> T:
    """The tests' waiter; a connection error (exporter not listening yet) counts as "not yet"."""
    return wait_for(condition, timeout, what, interval=interval, retry_on=(OSError,))


# ----- subprocesses ----------------------------------------------------------------------------


def clean_env(extra: dict[str, str] | None = None, *, otel: bool = False) -> dict[str, str]:
    """The current environment without SE_EXPORTER_*/OTEL_*; OTel disabled unless ``otel``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SE_EXPORTER_", "OTEL_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    if not otel:
        env["OTEL_SDK_DISABLED"] = "true"
    env.update(extra or {})
    return env


class Proc:
    """A child process whose stdout+stderr lines are collected, each stamped with its arrival time."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str], name: str) -> None:
        self.name = name
        self.spawned_at = time.time()
        self.spawned_mono = time.monotonic()
        self.proc = subprocess.Popen(
            list(argv),
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            bufsize=0,
        )
        self.output: list[str] = []
        self.stamped: list[tuple[float, str]] = []  # (wall time the line arrived, line)
        self._reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            arrived = time.time()
            self.output.append(line)
            self.stamped.append((arrived, line))

    def wait_for_line(self, starts: Callable[[str], bool], what: str, timeout: float = 30.0) -> float:
        """Block until the process printed a line ``starts`` accepts; return seconds since spawn."""
        wait_until(
            lambda: self.alive() and any(starts(line) for line in self.output),
            timeout,
            f"{self.name} {what}",
            interval=0.005,
        )
        return time.monotonic() - self.spawned_mono

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            tail = "\n".join(self.output[-30:])
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")
        return True

    def kill_for_rusage(self) -> tuple[float, int]:
        """SIGKILL now (no shutdown work counted) and reap: (CPU seconds of the whole life, μs precision;
        peak RSS KiB). /proc/<pid>/stat only has clock ticks (10 ms); wait4's rusage is exact."""
        self.proc.kill()
        _, _, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = -9
        self._reader.join(timeout=2)
        return usage.ru_utime + usage.ru_stime, usage.ru_maxrss

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self._reader.join(timeout=2)


class ScrapedProc(Proc):
    """A process serving /metrics at ``self.url``, scraped as Prometheus would: started on port 0, it
    prints a "listening on" line naming the port it got."""

    _port: int | None = None

    @property
    def port(self) -> int:
        """The port it bound (its "listening on" line, waited for)."""
        if self._port is None:
            self.wait_for_line(lambda line: LISTENING.search(line) is not None, "'listening on' line", 60)
            self._port = next(int(found[1]) for line in self.output if (found := LISTENING.search(line)))
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metrics(self, headers: dict[str, str] | None = None) -> str:
        code, body = http_get(self.url + "/metrics", headers)
        if code != 200:
            raise RuntimeError(f"/metrics answered {code}")
        return body.decode()


class ExporterProc(ScrapedProc):
    """``python -m se_exporter run`` on loopback, port 0."""

    def __init__(
        self,
        imds_url: str,
        *,
        otel_env: dict[str, str] | None = None,
        interval: str = "1s",
        extra_args: Sequence[str] = (),
        name: str = "exporter",
    ) -> None:
        argv = [
            sys.executable,
            "-m",
            "se_exporter",
            "run",
            "--web.listen-address=127.0.0.1:0",
            f"--imds.url={imds_url}",
            f"--poll.interval={interval}",
            *extra_args,
        ]
        super().__init__(argv, env=clean_env(otel_env, otel=otel_env is not None), name=name)

    def ready(self) -> bool:
        return self.alive() and http_get(self.url + "/-/ready", timeout=1)[0] == 200

    def wait_ready(self, timeout: float = 30.0) -> float:
        """Block until /-/ready answers 200; return seconds since spawn."""
        wait_until(self.ready, timeout, f"{self.name} ready", interval=0.005)
        return time.monotonic() - self.spawned_mono


class ReferenceProc(Proc):
    """The plain polling loop of Microsoft's docs (benchmarks/reference_loop.py)."""

    def __init__(self, imds_url: str, *, interval: float = 1.0, name: str = "reference") -> None:
        argv = [sys.executable, str(REPO / "benchmarks" / "reference_loop.py"), imds_url, f"--interval={interval}"]
        super().__init__(argv, env=clean_env(), name=name)

    def wait_first_document(self, timeout: float = 30.0) -> float:
        """Block until the loop printed its first document; return seconds since spawn."""
        return self.wait_for_line(lambda line: "DocumentIncarnation" in line, "first document", timeout)


class StackScriptProc(ScrapedProc):
    """The design's stack used plainly (benchmarks/reference_stack.py): httpx, prometheus_client's
    start_http_server, the OpenTelemetry SDK's batch processors and OTLP/HTTP exporters."""

    def __init__(self, imds_url: str, *, otel_env: dict[str, str] | None = None, name: str = "script") -> None:
        argv = [sys.executable, str(REPO / "benchmarks" / "reference_stack.py"), imds_url, "--port=0"]
        super().__init__(argv, env=clean_env(otel_env, otel=otel_env is not None), name=name)

    def wait_first_document(self, timeout: float = 30.0) -> float:
        """Block until the script printed its first document; return seconds since spawn."""
        return self.wait_for_line(lambda line: line.startswith("first document"), "first document", timeout)


def wait_all_started(processes: Iterable[Proc]) -> None:
    """Block until every exporter is ready and every reference loop printed its first document."""
    for proc in processes:
        if isinstance(proc, ExporterProc):
            proc.wait_ready()
        elif isinstance(proc, (ReferenceProc, StackScriptProc)):
            proc.wait_first_document()


class FedClient:
    """The real IMDSClient with only its HTTP fetch replaced (the in-process benchmarks): ``get_document`` runs
    its own code (parse, and the reuse of the previous Document when the body is identical), fed ``body`` as
    the response."""

    def __init__(self, client: Any) -> None:
        self.body = b""
        self._client = client
        client._request = lambda *_args, **_kwargs: self.body  # the fetch (and its client span) excluded

    def get_document(self) -> Any:
        return self._client.get_document()

    @property
    def api_version(self) -> str:
        return str(self._client.api_version)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"the benchmark stub client has no {name}")


# ----- simulator -------------------------------------------------------------------------------


def add_events(world: Any, count: int, description: str = "benchmark event") -> None:
    """Make ``count`` far-future Scheduled events appear in the simulator's ``world`` now."""
    from se_exporter.simulator import EventPlan

    types = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
    for index in range(count):
        plan = EventPlan(
            event_type=types[index % len(types)], notice=FAR_NOTICE, duration=-1, description=f"{description} {index}"
        )
        world.add_event(plan)


@contextlib.contextmanager
def simulator(events: int = 0, *, seed: int = 0) -> Iterator[Any]:
    """An in-process IMDS simulator (real time) listing ``events`` far-future Scheduled events."""
    from se_exporter.simulator import SimClock, SimulatorServer, SimWorld

    world = SimWorld(clock=SimClock(speed=1.0), rng=random.Random(seed))
    add_events(world, events)
    server = SimulatorServer(world, tick_interval=0.05)
    with server:
        yield server


@contextlib.contextmanager
def simulator_process(events: int = 0, *, seed: int = 0) -> Iterator[str]:
    """Like :func:`simulator`, in a child process (off the driver's GIL); yields its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.sim_server", f"--events={events}", f"--seed={seed}"],
        cwd=REPO,
        env=clean_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"simulator process did not start (exit {proc.poll()})")
        yield url
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextlib.contextmanager
def otlp_receiver() -> Iterator[Any]:
    """The real OTLP/HTTP receiver of tests/otlp, or None when its dependencies are missing."""
    try:
        if str(REPO) not in sys.path:
            sys.path.insert(0, str(REPO))
        from tests.otlp import OTLPHttpReceiver
    except ImportError as error:  # grpcio / opentelemetry-proto are test extras
        print(f"note: OTLP receiver unavailable ({error}); OTel-on rows are skipped", flush=True)
        yield None
        return
    with OTLPHttpReceiver() as receiver:
        yield receiver


def otel_env(receiver: Any) -> dict[str, str]:
    """Environment of an exporter with OTel on, shipping to ``receiver`` over OTLP/HTTP."""
    env = dict(receiver.env)
    env.update({"OTEL_SERVICE_NAME": "se-exporter-bench", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
    return env


def telemetry_module_present() -> bool:
    import importlib.util

    return importlib.util.find_spec("se_exporter.otel.pipeline") is not None


def count_samples(exposition: str) -> int:
    return sum(1 for line in exposition.splitlines() if line and not line.startswith("#"))


def metric_value(exposition: str, name: str) -> float | None:
    for line in exposition.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None
