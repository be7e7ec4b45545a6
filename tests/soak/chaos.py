"""The soak run: simulator + real OTLP receiver + exporter subprocesses, with faults injected all along.

Threads (all bounded by the run's deadline, all joined before the run returns):

- *chaos*: one IMDS fault at a time (5xx/429/410 bursts, malformed bodies, connection resets, a
  read timeout, slow answers) or an exporter restart (SIGKILL or SIGTERM, each new process meeting
  a slow first answer), each followed by a quiet pause. One at a time keeps every blind window of the
  exporter (a burst of 2 failed polls with its backoff, or a kill + restart + slow first answer) to
  about 4 s on an idle machine, well below the shortest state of the history (``tmin``, 12 s), so the
  expectation stays exact on a loaded one too.
- *otlp*: the OTLP receiver answers 503 for a while, or goes away entirely (``stop``) and comes back
  on the same port. SIGTERM restarts wait for the receiver to be up, so shutdown stays quick; a
  SIGKILL may land in the middle of an outage (the spool on disk must carry the records over).
- *director*: DocumentIncarnation resets at planned moments.
- *sampler*: the RSS of the current exporter process, twice a second.
- *web*: now and then, what once stopped or starved the web server or exhausted memory: a flood of idle
  and dripping connections, and a storm of scrapes at once; a scrape in the middle of it must answer.

IMDS faults include documents beyond what the exporter holds (25,000 events, 500,000 Resources): each is a
refused poll, and memory stays under the DaemonSet's 96 MiB (``checks.check_memory``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from se_exporter.simulator import FaultPlan, FaultRule, SimClock, SimulatedVM, SimulatorServer, SimWorld
from se_exporter.simulator.faults import MALFORMED
from se_exporter.simulator.truth import ApprovalRecord, Change, RequestRecord
from tests.approval.helpers import DESIGN_POLICY
from tests.otlp import OTLPHttpReceiver, ReceivedLog
from tests.soak.history import HistoryPlan, expected_transitions, plan_history
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.tmpfs import fill, mount_tmpfs, unmount
from tests.support.wait import wait_for

VM_NAME = "sim-vm-0"
IMDS_TIMEOUT = 1.0  # --imds.timeout: a delayed answer beyond it is a client timeout
SLOW_ANSWER = 0.4  # a delay the client waits out
DISK_KIB = 64 * 1024  # the tmpfs for the state file and the spool, filled now and then
DISK_FULL_SHARE = 0.15  # of the chaos episodes (when a tmpfs can be mounted)
GAP_SECONDS = 10.0  # se_exporter/poller/loop.py's GAP_FLOOR_SECONDS at the soak's 1 s interval
PAUSE_SECONDS = (11.5, 13.0)  # beyond the 10 s a view may miss (at a 1 s interval) before it is a gap
FIRST_ANSWER_DELAY = 1.5  # every new exporter process meets a slow first answer
POLICY = DESIGN_POLICY.format(dry_run="false", leader="first_resource")
WEB_FLOOD = 200  # connections held open by the web chaos (every tenth sends part of a request, never the rest)
SCRAPE_STORM = 20  # scrapes at once
StartExporter = Callable[..., ExporterProcess]


@dataclass(frozen=True)
class SoakConfig:
    active: float  # real seconds of history (events appear, live and finish within it)
    speed: float = 300.0  # simulated seconds per real second
    # Shortest state, real seconds (see history.py): above every blind window of a restart. A SIGTERM restart
    # (the stop, a fresh interpreter, the slow first answer) is about 4 s on an idle machine, 6 s with two
    # cores' worth of busy loops beside it, and took 8.8 s once in a full suite beside Wine and qemu.
    tmin: float = 12.0
    tmax: float = 16.0
    mean_gap: float = 1.2  # mean real seconds between event appearances
    burst_every: float = 20.0
    kill_every: float = 12.0
    kill_until: float = 0.6  # fraction of ``active`` after which the exporter is left running
    pause_every: float = 30.0  # a pause of the exporter (SIGSTOP, as a Freeze pauses the VM), beyond a gap
    quiet: tuple[float, float] = (2.5, 4.0)  # pause after each IMDS fault (real s)
    otlp_gap: tuple[float, float] = (4.0, 9.0)
    otlp_outage: tuple[float, float] = (2.0, 5.0)
    warmup: float = 5.0  # RSS samples of the last process before this are warm-up
    web_gap: tuple[float, float] = (6.0, 12.0)  # between two web attacks (real s)
    seed: int = 20240617

    @classmethod
    def short(cls, seed: int) -> SoakConfig:
        # Two restarts in the first 30 s, then a pause of the exporter beyond a gap in its view. The chaos
        # thread stops at active - 2 * tmin (44 s): room for the pause after a fault episode (14 s at most).
        return cls(active=68.0, kill_until=30.0 / 68.0, seed=seed)

    @classmethod
    def long(cls, minutes: float, seed: int) -> SoakConfig:
        return cls(
            active=minutes * 60.0,
            tmax=30.0,
            mean_gap=2.0,
            burst_every=60.0,
            kill_every=40.0,
            kill_until=0.5,
            pause_every=90.0,
            otlp_gap=(10.0, 30.0),
            otlp_outage=(2.0, 12.0),
            warmup=30.0,
            seed=seed,
        )


@dataclass
class ExporterRun:
    index: int
    process: ExporterProcess
    started: float  # monotonic
    ended: float | None = None
    how: str = ""  # SIGKILL | SIGTERM | final | died
    exit_code: int | None = None


@dataclass
class SoakResult:
    config: SoakConfig
    plan: HistoryPlan
    ids: dict[str, str]  # scenario alias -> EventId
    changes: tuple[Change, ...]
    requests: tuple[RequestRecord, ...]
    approvals: tuple[ApprovalRecord, ...]
    arrivals: list[tuple[float, str, str]]  # (monotonic, method, endpoint) of every IMDS request
    logs: list[ReceivedLog]
    runs: list[ExporterRun]
    rss: list[tuple[int, float, int]]  # (run index, monotonic, kB)
    final_metrics: str
    otlp_outages: list[tuple[str, float]]  # (kind, seconds)
    pauses: list[tuple[float, float, float, float]]  # SIGSTOP's blind windows: monotonic, wall (start, end)
    sim_seconds: float
    wall_seconds: float
    errors: list[str] = field(default_factory=list)  # unexpected events seen while running
    # Restarts that kept the exporter blind longer than a gap (a loaded machine's slow start): the same kind
    # of window as a pause, from the last document served to the old process to the first one to the new.
    long_restarts: list[tuple[float, float, float, float]] = field(default_factory=list)

    @property
    def blind(self) -> list[tuple[float, float, float, float]]:
        """Every window the exporter could not see across: its pauses and its long restarts."""
        return sorted([*self.pauses, *self.long_restarts])


class ArrivalRecordingFaultPlan(FaultPlan):
    """A fault plan that also notes when each IMDS request arrived (real monotonic time).

    ``decide`` is called once per IMDS request as it arrives (after the slow first answer, which is
    waited out on the server side before the request counts), so these are the times IMDS's 5/s
    limit would see, unlike the ground truth's request records (taken when the answer is sent).
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.arrivals: list[tuple[float, str, str]] = []
        self._arrival_lock = threading.Lock()

    def decide(self, method: str, endpoint: str, real_monotonic: float) -> FaultRule | None:
        with self._arrival_lock:
            self.arrivals.append((real_monotonic, method, endpoint))
        return super().decide(method, endpoint, real_monotonic)


class Fleet:
    """The exporter process of the moment, restarted by the chaos thread; remembers every run."""

    def __init__(
        self, start_exporter: StartExporter, args: tuple[str, ...], env: dict[str, str], faults: FaultPlan
    ) -> None:
        self._start_exporter = start_exporter
        self._args = args
        self._env = env
        self._faults = faults
        self.runs: list[ExporterRun] = []
        self.lock = threading.Lock()
        self.restart_lock = threading.RLock()  # one restart at a time (chaos thread, crash handling)

    @property
    def current(self) -> ExporterRun:
        with self.lock:
            return self.runs[-1]

    def start(self) -> ExporterRun:
        self._faults.set_first_response_delay(FIRST_ANSWER_DELAY)
        process = self._start_exporter(*self._args, env=self._env)
        run = ExporterRun(len(self.runs), process, time.monotonic())
        with self.lock:
            self.runs.append(run)
        return run

    def stop(self, sig: int, how: str) -> ExporterRun:
        run = self.current
        if run.process.proc.poll() is not None:  # died on its own: a crash
            run.ended, run.how, run.exit_code = time.monotonic(), "died", run.process.proc.returncode
            return run
        run.ended = time.monotonic()
        run.exit_code = run.process.stop(sig, timeout=30)
        run.how = how
        return run

    def alive(self) -> bool:
        return self.current.process.proc.poll() is None


def run_soak(config: SoakConfig, tmp: Path, start_exporter: StartExporter) -> SoakResult:
    rng = random.Random(config.seed)
    plan = plan_history(
        rng,
        active=config.active,
        speed=config.speed,
        tmin=config.tmin,
        tmax=config.tmax,
        mean_gap=config.mean_gap,
        burst_every=config.burst_every,
    )
    world = SimWorld(vm=SimulatedVM(name=VM_NAME), clock=SimClock(config.speed), rng=random.Random(config.seed))
    faults = ArrivalRecordingFaultPlan(rng=random.Random(config.seed + 1), rate_limit_per_s=5)
    policy = tmp / "policy.yaml"
    policy.write_text(POLICY)
    errors: list[str] = []
    # The state file and the spool on a small tmpfs when one can be mounted: the chaos then fills it now
    # and then (a full disk for a few seconds, space back before any restart).
    disk = None if mount_tmpfs(tmp / "state", DISK_KIB) else tmp / "state"
    try:
        return _run(config, tmp, start_exporter, rng, plan, world, faults, policy, errors, disk)
    finally:
        if disk is not None:
            unmount(disk)


def _run(  # noqa: PLR0917 - run_soak's locals, handed over whole
    config: SoakConfig,
    tmp: Path,
    start_exporter: StartExporter,
    rng: random.Random,
    plan: HistoryPlan,
    world: SimWorld,
    faults: ArrivalRecordingFaultPlan,
    policy: Path,
    errors: list[str],
    disk: Path | None,
) -> SoakResult:
    with SimulatorServer(world, faults=faults) as sim, OTLPHttpReceiver() as receiver:
        args = (
            f"--imds.url={sim.url}",
            "--poll.interval=1s",
            f"--imds.timeout={IMDS_TIMEOUT}s",
            f"--state.file={tmp / 'state' / 'state.db'}",
            f"--approval.config={policy}",
            f"--vm.name={VM_NAME}",
            "--log.format=json",
        )
        env = {**receiver.env, "OTEL_SDK_DISABLED": "false"}
        fleet = Fleet(start_exporter, args, env, faults)
        fleet.start().process.wait_ready(30)
        began, sim_began = time.monotonic(), world.clock.now()
        ids = world.play(plan.scenario)
        deadline = began + plan.end
        stop = threading.Event()
        otlp_up = threading.Lock()  # held while the receiver is down
        outages: list[tuple[str, float]] = []
        pauses: list[tuple[float, float, float, float]] = []
        long_restarts: list[tuple[float, float, float, float]] = []
        rss: list[tuple[int, float, int]] = []
        threads = [
            threading.Thread(
                target=_chaos,
                name="soak-chaos",
                args=(config, rng),
                kwargs={
                    "faults": faults,
                    "fleet": fleet,
                    "otlp_up": otlp_up,
                    "began": began,
                    "stop": stop,
                    "errors": errors,
                    "disk": disk,
                    "pauses": pauses,
                    "long_restarts": long_restarts,
                    "world": world,
                },
            ),
            threading.Thread(
                target=_otlp_chaos,
                name="soak-otlp",
                args=(config, random.Random(config.seed + 2)),
                kwargs={"receiver": receiver, "otlp_up": otlp_up, "stop": stop, "outages": outages},
            ),
            threading.Thread(target=_director, name="soak-director", args=(world, plan, began, stop)),
            threading.Thread(target=_sampler, name="soak-rss", args=(fleet, stop, rss)),
            threading.Thread(
                target=_web_chaos,
                name="soak-web",
                args=(config, random.Random(config.seed + 3)),
                kwargs={"fleet": fleet, "stop": stop, "errors": errors},
            ),
        ]
        try:
            for thread in threads:
                thread.start()
            while time.monotonic() < deadline:
                time.sleep(0.5)
                with fleet.restart_lock:
                    if not fleet.alive():  # a crash: noted (the checks fail on it), and carried on
                        died = fleet.stop(signal.SIGTERM, "died")
                        tail = "\n".join(died.process.logs().splitlines()[-20:])
                        errors.append(f"exporter run {died.index} died on its own (exit {died.exit_code}):\n{tail}")
                        fleet.start()
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)
        faults.clear()
        faults.set_rate_limit(5)
        _wait(lambda: not world.snapshot().events, 3 * config.tmax, "every event gone", errors)
        # Not an error by itself: if records are missing, check_transitions names them.
        wanted = len(expected_transitions(world.truth.changes(), sorted([*pauses, *long_restarts])))
        _wait(lambda: _all_delivered(wanted, receiver), 45, "every transition delivered", [])
        # A duplicate delivery would be a record still in the spool: once it is empty, every record is acknowledged.
        _wait(lambda: _spool_empty(fleet.current.process), 60, "the log spool empty", errors)
        final_metrics = fleet.current.process.metrics()
        _sample(fleet, rss)
        fleet.stop(signal.SIGTERM, "final")
        truth = {**world.truth.to_json(), "requests": world.truth.requests_json(), "event_ids": ids}
        (tmp / "soak-truth.json").write_text(json.dumps(truth))  # for a look after a failure
        return SoakResult(
            config=config,
            plan=plan,
            ids=ids,
            changes=world.truth.changes(),
            requests=world.truth.requests(),
            approvals=world.truth.approvals(),
            arrivals=list(faults.arrivals),
            logs=receiver.store.logs,
            runs=list(fleet.runs),
            rss=rss,
            final_metrics=final_metrics,
            otlp_outages=outages,
            pauses=pauses,
            long_restarts=long_restarts,
            sim_seconds=world.clock.now() - sim_began,
            wall_seconds=time.monotonic() - began,
            errors=errors,
        )


def _wait(condition: Callable[[], bool], timeout: float, what: str, errors: list[str]) -> None:
    """Wait like ``wait_for``, but note a timeout in the soak's errors instead of stopping the soak."""
    try:
        wait_for(condition, timeout, what, interval=0.25, retry_on=())
    except AssertionError as error:
        errors.append(str(error))


def _spool_empty(process: ExporterProcess) -> bool:
    return value(process.metrics(), "azure_scheduled_events_log_spool_depth") == 0


def _all_delivered(wanted: int, receiver: OTLPHttpReceiver) -> bool:
    uids = {
        log.attributes.get("log.record.uid")
        for log in receiver.store.logs
        if log.event_name == "scheduled_event.transition"
    }
    return len(uids) >= wanted


def _chaos(
    config: SoakConfig,
    rng: random.Random,
    *,
    faults: FaultPlan,
    fleet: Fleet,
    otlp_up: threading.Lock,
    began: float,
    stop: threading.Event,
    errors: list[str],
    disk: Path | None,
    pauses: list[tuple[float, float, float, float]],
    long_restarts: list[tuple[float, float, float, float]],
    world: SimWorld,
) -> None:
    kill_until = began + config.active * config.kill_until
    next_kill = began + config.kill_every * 0.8
    next_pause = began + 2 * config.kill_every  # after two restarts' time: all three fit in the short soak
    signals = [signal.SIGKILL, signal.SIGTERM]
    kills = 0

    def room_for_a_pause(now: float) -> bool:
        return now + PAUSE_SECONDS[1] + 1 < began + config.active

    while not stop.is_set():
        now = time.monotonic()
        if now >= began + config.active - 2 * config.tmin:  # the faults' time is over
            # Slow restarts on a loaded machine may have left no time for the pause the soak promises: it comes
            # now, alone, while there is room for it.
            if not pauses and kills >= 2 and room_for_a_pause(now):
                _pause(fleet, world, rng, pauses, errors)
            break
        # Restarts first: the short soak wants two, and has them however slow the first was (a loaded machine's
        # restart once took it past kill_until, leaving two runs); later ones only before kill_until.
        if now >= next_kill and (now < kill_until or kills < 2):
            sig = signals[kills % 2]
            kills += 1
            next_kill = now + config.kill_every
            _restart(fleet, sig, otlp_up, errors, world=world, long_restarts=long_restarts)
        elif now >= next_pause and kills >= 2 and room_for_a_pause(now):
            next_pause = now + config.pause_every
            _pause(fleet, world, rng, pauses, errors)
            continue
        elif disk is not None and (now + 6 < next_kill or now >= kill_until) and rng.random() < DISK_FULL_SHARE:
            _disk_full(fleet, disk, rng)
        else:
            _imds_fault(rng, faults)
        stop.wait(rng.uniform(*config.quiet))


def _pause(
    fleet: Fleet,
    world: SimWorld,
    rng: random.Random,
    pauses: list[tuple[float, float, float, float]],
    errors: list[str],
) -> None:
    """Stop the exporter (SIGSTOP) for longer than a gap in its view may last, then let it go on. The window
    is what it could not see: from the last document it processed before the stop (the ground truth's answer
    time: what it saw is the state then) to the first one served after."""
    with fleet.restart_lock:
        process = fleet.current.process
        look = _stop_after_a_look(process, world)
        if look is None:
            errors.append("the exporter could not be stopped right after a look")
            return
        try:
            time.sleep(rng.uniform(*PAUSE_SECONDS))
        finally:
            os.kill(process.proc.pid, signal.SIGCONT)
        served = len(_documents_served(world))
        if not _waited(lambda: len(_documents_served(world)) > served, 15):
            errors.append("the exporter did not poll after a pause")
            return
        seen = _documents_served(world)[served]
        pauses.append((look.real_monotonic, seen.real_monotonic, look.real_time, seen.real_time))


def _stop_after_a_look(process: ExporterProcess, world: SimWorld) -> RequestRecord | None:
    """SIGSTOP once the exporter has processed the last document served to it (its last good poll says so):
    stopped between an answer and its processing, it would find the answer's deadline gone on resuming."""
    for _ in range(5):
        served = len(_documents_served(world))
        if not _waited(functools.partial(_served_more_than, world, served), 10):
            return None
        look = _documents_served(world)[-1]
        if not _waited(functools.partial(_processed_since, process, look.real_time - 0.05), 2):
            continue
        os.kill(process.proc.pid, signal.SIGSTOP)
        if _documents_served(world)[-1] is look:
            return look
        os.kill(process.proc.pid, signal.SIGCONT)  # it polled again meanwhile: once more
    return None


def _served_more_than(world: SimWorld, count: int) -> bool:
    return len(_documents_served(world)) > count


def _processed_since(process: ExporterProcess, wall: float) -> bool:
    return (_last_good_poll(process) or 0.0) >= wall


def _last_good_poll(process: ExporterProcess) -> float | None:
    try:
        return value(process.metrics(), "azure_scheduled_events_last_successful_poll_timestamp_seconds")
    except (httpx.HTTPError, AssertionError):
        return None


def _documents_served(world: SimWorld) -> list[RequestRecord]:
    return [r for r in world.truth.requests() if r.method == "GET" and "scheduled" in r.path and r.status == 200]


def _waited(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def _disk_full(fleet: Fleet, disk: Path, rng: random.Random) -> None:
    """Fill the state file's file system for a few seconds; no restart meanwhile (records written while
    the disk is full are promised only if space comes back before the process ends)."""
    with fleet.restart_lock:
        filler = fill(disk)
        time.sleep(rng.uniform(1.5, 4.0))  # the fault lasts this long: polls, transitions, failed writes
        filler.unlink()


def _restart(
    fleet: Fleet,
    sig: int,
    otlp_up: threading.Lock,
    errors: list[str],
    *,
    world: SimWorld,
    long_restarts: list[tuple[float, float, float, float]],
) -> None:
    name = signal.Signals(sig).name
    with fleet.restart_lock:
        if sig == signal.SIGTERM:  # a clean stop flushes the log spool: not while the receiver is down
            with otlp_up:
                run = fleet.stop(sig, name)
        else:
            run = fleet.stop(sig, name)
        before = _documents_served(world)  # the old process is gone: its last look is the last of these
        fleet.start()
        # A restart longer than a gap in the view (a loaded machine's slow start) is a blind window like a
        # pause: what changed meanwhile is seen at its end, by the rules of docs/design.md, What was not seen.
        if before and _waited(lambda: len(_documents_served(world)) > len(before), 60):
            look, seen = before[-1], _documents_served(world)[len(before)]
            if seen.real_monotonic - look.real_monotonic > GAP_SECONDS:
                long_restarts.append((look.real_monotonic, seen.real_monotonic, look.real_time, seen.real_time))
    expected = 0 if sig == signal.SIGTERM else -signal.SIGKILL
    if run.exit_code != expected:
        errors.append(f"exporter run {run.index} stopped by {name} exited {run.exit_code}, expected {expected}")


def _imds_fault(rng: random.Random, faults: FaultPlan) -> None:
    """One fault from the catalogue; waits (bounded) until the exporter has met all of it."""
    # "malformed" includes a gzip bomb; "drip" answers one byte every 0.3 s (abandoned after 5 s).
    kind = rng.choice(["status", "status", "malformed", "reset", "timeout", "slow", "drip"])
    if kind == "status":
        rule = faults.fail_next(rng.choice([500, 502, 503, 504, 429, 410]), rng.choice([1, 2]), method="any")
    elif kind == "malformed":  # GET only: a POST answered 200 with a body would look like a success
        rule = faults.malformed_next(rng.choice(MALFORMED), rng.choice([1, 2]), method="GET")
    elif kind == "reset":
        rule = faults.reset_next(rng.choice([1, 2]), method="any")
    elif kind == "timeout":
        rule = faults.delay_next(IMDS_TIMEOUT + 0.5, 1, method="GET")
    elif kind == "drip":
        rule = faults.drip_next(0.3, 1, method="GET")
    else:
        rule = faults.delay_next(SLOW_ANSWER, 2, method="GET")
    deadline = time.monotonic() + 10
    while rule.count and time.monotonic() < deadline:
        time.sleep(0.05)
    rule.count = 0  # never left armed: a late burst could overlap the next fault


def _otlp_chaos(
    config: SoakConfig,
    rng: random.Random,
    *,
    receiver: OTLPHttpReceiver,
    otlp_up: threading.Lock,
    stop: threading.Event,
    outages: list[tuple[str, float]],
) -> None:
    kinds = ["unavailable", "gone"]
    while not stop.wait(rng.uniform(*config.otlp_gap)):
        kind = kinds[len(outages) % 2]
        seconds = rng.uniform(*config.otlp_outage)
        with otlp_up:
            if kind == "unavailable":
                receiver.set_unavailable(True)
            else:
                receiver.stop()
            stop.wait(seconds)
            if kind == "unavailable":
                receiver.set_unavailable(False)
            else:
                receiver.start()  # same port
        outages.append((kind, seconds))


def _web_chaos(
    config: SoakConfig, rng: random.Random, *, fleet: Fleet, stop: threading.Event, errors: list[str]
) -> None:
    """Idle and dripping connections, then scrapes all at once: a scrape must still answer within 2 s."""
    while not stop.wait(rng.uniform(*config.web_gap)):
        with fleet.restart_lock:  # not while a restart happens: a refused connection would mean nothing
            process = fleet.current.process
            try:
                process.wait_listening(20)
            except AssertionError:
                continue  # it died: the main loop notes it and starts another
            port = process.port
            held: list[socket.socket] = []
            try:
                for index in range(WEB_FLOOD):
                    sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                    if index % 10 == 0:
                        sock.send(b"GET /metr")  # a request that never ends
                    held.append(sock)
                with ThreadPoolExecutor(SCRAPE_STORM) as pool:
                    took = list(pool.map(_timed_scrape, [port] * SCRAPE_STORM))
                if max(took) > 2.0:
                    errors.append(f"a scrape took {max(took):.1f} s during a connection flood and a scrape storm")
            except OSError as error:
                errors.append(f"the web server refused a connection during the web chaos: {error}")
            finally:
                for sock in held:
                    with contextlib.suppress(OSError):
                        sock.close()


def _timed_scrape(port: int) -> float:
    began = time.monotonic()
    answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10, trust_env=False)
    return time.monotonic() - began if answer.status_code == 200 else float("inf")


def _director(world: SimWorld, plan: HistoryPlan, began: float, stop: threading.Event) -> None:
    for at in plan.reset_at:
        if stop.wait(max(0.0, began + at - time.monotonic())):
            return
        world.reset_incarnation()


def _sampler(fleet: Fleet, stop: threading.Event, rss: list[tuple[int, float, int]]) -> None:
    while not stop.wait(0.5):
        _sample(fleet, rss)


def _sample(fleet: Fleet, rss: list[tuple[int, float, int]]) -> None:
    run = fleet.current
    try:
        status = Path(f"/proc/{run.process.proc.pid}/status").read_text(encoding="utf-8")
    except OSError:
        return
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            rss.append((run.index, time.monotonic(), int(line.split()[1])))


def write_summary(path: Path, summary: dict[str, object]) -> None:
    path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
