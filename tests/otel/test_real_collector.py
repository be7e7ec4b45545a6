"""The exporter and the real OpenTelemetry Collector (built from its own modules, tests/support/collector.py):
what a user runs between us and their backend.

Each test runs the exporter against the IMDS simulator and a Collector on a config written here, and reads
what the Collector wrote: its file exporter's OTLP/JSON, and its own telemetry
(``otelcol_receiver_accepted_log_records``). Every record is compared with the exporter's own JSON log line
of the same ``log.record.uid``: the attributes, the event name, the severity and the body arrive unchanged.
"""

from __future__ import annotations

import functools
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from se_exporter.simulator import EventPlan, SimWorld
from tests.otel.conftest import VM, StartOTel
from tests.otlp import OTLPHttpReceiver, ReceivedLog
from tests.support.collector import Collector, file_logs, file_spans, run_validate
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.wait import wait_for
from tests.web.pki import make_pki

pytestmark = [pytest.mark.posix, pytest.mark.full]

TRANSITION = "scheduled_event.transition"
PROTOCOLS = {"http": "http/protobuf", "grpc": "grpc"}


def collector_config(
    folder: Path,
    protocol: str,
    *,
    receiver: dict[str, Any] | None = None,
    processors: tuple[str, ...] = ("memory_limiter", "batch"),
    limit_mib: int = 256,
    extensions: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Collector as users run it: OTLP in, memory_limiter and batch, out to files the test reads."""
    return {
        "extensions": extensions or {},
        "receivers": {"otlp": {"protocols": {protocol: {"endpoint": "127.0.0.1:0", **(receiver or {})}}}},
        "processors": {
            "memory_limiter": {"check_interval": "100ms", "limit_mib": limit_mib, "spike_limit_mib": 0},
            "batch": {"timeout": "100ms"},
        },
        "exporters": {
            "file/logs": {"path": str(folder / "logs.jsonl"), "flush_interval": "100ms"},
            "file/traces": {"path": str(folder / "spans.jsonl"), "flush_interval": "100ms"},
        },
        "service": {
            "extensions": list(extensions or {}),
            "telemetry": {
                "logs": {"level": "info"},
                "metrics": {
                    "level": "detailed",
                    "readers": [{"pull": {"exporter": {"prometheus": {"host": "127.0.0.1", "port": 0}}}}],
                },
            },
            "pipelines": {
                "logs": {"receivers": ["otlp"], "processors": list(processors), "exporters": ["file/logs"]},
                "traces": {"receivers": ["otlp"], "processors": list(processors), "exporters": ["file/traces"]},
            },
        },
    }


def exporter_lines(exporter: ExporterProcess) -> dict[str, dict[str, Any]]:
    """The exporter's JSON log lines of transitions, by uid."""
    lines = {}
    for line in exporter.logs().splitlines():
        if line.startswith("{") and f'"event": "{TRANSITION}"' in line:
            fields = json.loads(line)
            lines[fields["log.record.uid"]] = fields
    return lines


def assert_unchanged(record: ReceivedLog, line: dict[str, Any]) -> None:
    """A record the Collector wrote is the exporter's log line of the same uid: every attribute, the event
    name, the severity and the body."""
    sent = {k: v for k, v in line.items() if k.startswith("scheduled_event.") or k == "log.record.uid"}
    received = {k: v for k, v in record.attributes.items() if k.startswith("scheduled_event.") or k == "log.record.uid"}
    assert received == sent, (received, sent)
    assert record.event_name == line["event"] == TRANSITION
    assert record.severity_text == line["level"].upper()
    assert record.body == line["msg"]


def has_record(path: Path, event_id: str) -> bool:
    return any(r["scheduled_event.id"] == event_id for r in file_logs(path))


def scenario(world: SimWorld) -> tuple[str, str]:
    """A Reboot scheduled, started and completed; a Freeze scheduled, rescheduled and cancelled: six records."""
    reboot = world.add_event(EventPlan("Reboot", event_source="User", notice=900, description="by the user"))
    freeze = world.add_event(EventPlan("Freeze", notice=600, duration=5, resources=("other-vm", VM.name)))
    return reboot, freeze


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_records_and_spans_arrive_unchanged_through_the_collector(
    protocol: str, tmp_path: Path, simulator: tuple[SimWorld, str], start_otel: StartOTel
) -> None:
    world, url = simulator
    collector = Collector(tmp_path, collector_config(tmp_path, protocol)).start()
    exporter = start_otel(
        url,
        None,
        "--log.format=json",
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint(),
            "OTEL_EXPORTER_OTLP_PROTOCOL": PROTOCOLS[protocol],
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
            "OTEL_SERVICE_NAME": "se-test",
        },
    )
    exporter.wait_ready()
    reboot, freeze = scenario(world)
    wait_for(lambda: len(file_logs(tmp_path / "logs.jsonl")) >= 2, 30, "two records through the Collector")
    world.start_event(reboot)
    world.reschedule(freeze, 1200)
    wait_for(lambda: len(file_logs(tmp_path / "logs.jsonl")) >= 4, 30, "four records")
    world.cancel_event(freeze)
    world.complete_event(reboot)
    wait_for(lambda: len(file_logs(tmp_path / "logs.jsonl")) >= 6, 30, "six records")
    lifecycles = "scheduled_event.lifecycle"
    wait_for(lambda: sum(s.name == lifecycles for s in file_spans(tmp_path / "spans.jsonl")) >= 2, 30, "two spans")
    assert exporter.stop() == 0

    records = file_logs(tmp_path / "logs.jsonl")
    lines = exporter_lines(exporter)
    assert sorted(str(r["log.record.uid"]) for r in records) == sorted(lines), "each record once, none other"
    for record in records:
        assert_unchanged(record, lines[str(record["log.record.uid"])])
    assert [r[TRANSITION] for r in records if r["scheduled_event.id"] == reboot] == [
        "scheduled",
        "started",
        "completed",
    ]
    resource = records[0].resource
    assert resource["service.name"] == "se-test" and resource["service.version"]
    assert resource["cloud.provider"] == "azure" and resource["cloud.platform"] == "azure.vm"
    assert resource["cloud.region"] == VM.location and resource["host.name"] == VM.name
    assert resource["host.id"] == VM.vm_id and resource["host.type"] == VM.vm_size
    assert resource["cloud.account.id"] == VM.subscription_id
    assert all(r.resource == resource for r in records)
    assert collector.counted("otelcol_receiver_accepted_log_records") == len(records)

    spans = file_spans(tmp_path / "spans.jsonl")
    by_id = {s.span_id: s for s in spans}
    (span,) = [s for s in spans if s.name == lifecycles and s["scheduled_event.id"] == reboot]
    reboot_records = [r for r in records if r["scheduled_event.id"] == reboot]
    assert [(e.name, e.time_unix_nano) for e in span.events] == [
        (r[TRANSITION], r.time_unix_nano) for r in reboot_records
    ]
    assert span.start_time_unix_nano == reboot_records[0].time_unix_nano
    assert span["scheduled_event.outcome"] == "completed" and span.resource == resource
    polls = [s for s in spans if s.name == "scheduled_events.poll"]  # a failed poll (a loaded machine) has none:
    changed = [s for s in polls if s.attributes.get("scheduled_event.changed") is True]
    gets = [s for s in spans if s.name == "GET" and s.parent_span_id in {p.span_id for p in changed}]
    assert gets and all(by_id[g.parent_span_id].trace_id == g.trace_id for g in gets), "the GET under its poll"
    assert all(g["http.response.status_code"] == 200 for g in gets)
    assert len({(s.trace_id, s.span_id) for s in spans}) == len(spans), "no span twice"
    assert collector.stop() == 0


# ----- when the Collector pushes back ---------------------------------------------------------------------


def forwarding_config(
    folder: Path, downstream: OTLPHttpReceiver, *, limit_mib: int = 256, queue: dict[str, Any] | None = None
) -> dict[str, Any]:
    """OTLP/HTTP in, memory_limiter, out to our receiver (``downstream``) by the Collector's OTLP/HTTP
    exporter: with no sending queue, the Collector answers a request only once ``downstream`` took it, so
    what it accepted and what arrived are the same records."""
    config = collector_config(folder, "http", processors=("memory_limiter",), limit_mib=limit_mib)
    config["exporters"] = {
        "otlp_http": {
            "endpoint": downstream.endpoint,
            "compression": "none",
            "sending_queue": queue or {"enabled": False},
            "retry_on_failure": {"enabled": True, "initial_interval": "100ms", "max_interval": "1s"},
        }
    }
    for pipeline in config["service"]["pipelines"].values():
        pipeline["exporters"] = ["otlp_http"]
    return config


def start_exporter_on(start_otel: StartOTel, url: str, collector: Collector, *args: str) -> ExporterProcess:
    exporter = start_otel(
        url,
        None,
        *args,
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint(),
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
            "NO_PROXY": "127.0.0.1",
        },
    )
    exporter.wait_ready()
    return exporter


def logged(exporter: ExporterProcess) -> int:
    """How many transitions the exporter logged (its logfmt or its JSON lines)."""
    return len(exporter.transitions()) + len(exporter_lines(exporter))


def add_events(world: SimWorld, exporter: ExporterProcess, count: int) -> None:
    """``count`` new events, each seen by the exporter (its transition logged) before the next."""
    for _ in range(count):
        seen = logged(exporter)
        world.add_event(EventPlan("Freeze", notice=600))
        wait_for(functools.partial(lambda before: logged(exporter) > before, seen), 30, "the exporter saw the event")


def delivered_by_exporter(exporter: ExporterProcess) -> float:
    """What the exporter counts as delivered: every record it made, less those waiting and those dropped."""
    text = exporter.metrics()
    made = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(TRANSITIONS))
    waiting = value(text, "azure_scheduled_events_log_spool_depth") or 0
    return made - waiting - (value(text, "azure_scheduled_events_log_spool_dropped_total") or 0)


TRANSITIONS = "azure_scheduled_events_transitions_total{"


def uids(receiver: OTLPHttpReceiver) -> list[str]:
    return [str(r["log.record.uid"]) for r in receiver.store.find_logs(event_name=TRANSITION)]


def all_delivered_once(exporter: ExporterProcess, downstream: OTLPHttpReceiver, made: int) -> list[str]:
    # The exporter backs off while refused (at most 2 minutes between attempts, docs/reliability.md).
    wait_for(lambda: len(set(uids(downstream))) >= made, 150, f"{made} records downstream")
    wait_for(lambda: value(exporter.metrics(), "azure_scheduled_events_log_spool_depth") == 0, 30, "an empty spool")
    got = uids(downstream)
    assert len(got) == len(set(got)) == made == len(exporter.transitions()), "each record once"
    assert delivered_by_exporter(exporter) == made
    return got


def test_a_collector_over_its_memory_limit_refuses_and_then_everything_arrives_once(
    tmp_path: Path, simulator: tuple[SimWorld, str], start_otel: StartOTel, otlp_http_receiver: OTLPHttpReceiver
) -> None:
    world, url = simulator
    # limit_mib 1: the Collector's own heap is over it from the start, so memory_limiter refuses everything.
    collector = Collector(tmp_path, forwarding_config(tmp_path, otlp_http_receiver, limit_mib=1)).start()
    exporter = start_exporter_on(start_otel, url, collector)
    add_events(world, exporter, 5)
    wait_for(lambda: collector.counted("otelcol_receiver_refused_log_records") >= 1, 30, "memory_limiter refusing")
    assert uids(otlp_http_receiver) == [] and collector.counted("otelcol_receiver_accepted_log_records") == 0
    assert (value(exporter.metrics(), "azure_scheduled_events_log_spool_depth") or 0) >= 1, "the records wait"
    assert collector.stop() == 0
    # The same Collector with room: what waited arrives, once.
    config = forwarding_config(tmp_path, otlp_http_receiver)
    roomy = Collector(tmp_path, config, receiver_port=collector.receiver_port).start()  # where the exporter sends
    add_events(world, exporter, 3)
    got = all_delivered_once(exporter, otlp_http_receiver, 8)
    assert roomy.counted("otelcol_receiver_accepted_log_records") == len(got)
    assert exporter.stop() == 0 and roomy.stop() == 0


def test_a_collector_killed_mid_stream_and_restarted_loses_nothing_and_doubles_nothing(
    tmp_path: Path, simulator: tuple[SimWorld, str], start_otel: StartOTel, otlp_http_receiver: OTLPHttpReceiver
) -> None:
    world, url = simulator
    collector = Collector(tmp_path, forwarding_config(tmp_path, otlp_http_receiver)).start()
    exporter = start_exporter_on(start_otel, url, collector)
    add_events(world, exporter, 4)
    wait_for(lambda: len(uids(otlp_http_receiver)) >= 4, 30, "the first records through")
    # Acknowledged too: a kill between the Collector forwarding a record and answering for it would have the
    # record sent again (at least once, the uid says so), which is not the case this test is about.
    wait_for(lambda: value(exporter.metrics(), "azure_scheduled_events_log_spool_depth") == 0, 30, "acknowledged")
    collector.kill()  # SIGKILL, mid-stream: the next records find nobody
    add_events(world, exporter, 4)
    collector.start()
    add_events(world, exporter, 4)
    got = all_delivered_once(exporter, otlp_http_receiver, 12)
    assert collector.counted("otelcol_receiver_accepted_log_records") == len(got) - 4, "since its restart"
    assert exporter.stop() == 0 and collector.stop() == 0


def test_a_collector_away_for_60_s_gets_every_record_once_when_it_is_back(
    tmp_path: Path, simulator: tuple[SimWorld, str], start_otel: StartOTel, otlp_http_receiver: OTLPHttpReceiver
) -> None:
    world, url = simulator
    collector = Collector(tmp_path, forwarding_config(tmp_path, otlp_http_receiver)).start()
    exporter = start_exporter_on(start_otel, url, collector)
    add_events(world, exporter, 2)
    wait_for(lambda: len(uids(otlp_http_receiver)) >= 2, 30, "the first records through")
    assert collector.stop() == 0
    away = time.monotonic()
    add_events(world, exporter, 5)
    wait_for(lambda: "OTLP log export failing" in exporter.logs(), 30, "the outage said")
    time.sleep(max(0.0, 60 - (time.monotonic() - away)))  # the outage this test is about: 60 s
    collector.start()
    got = all_delivered_once(exporter, otlp_http_receiver, 7)
    assert collector.counted("otelcol_receiver_accepted_log_records") == len(got) - 2
    assert exporter.stop() == 0 and collector.stop() == 0


def test_a_collector_whose_own_sending_queue_is_full_refuses_and_then_everything_arrives_once(
    tmp_path: Path, simulator: tuple[SimWorld, str], start_otel: StartOTel, otlp_http_receiver: OTLPHttpReceiver
) -> None:
    world, url = simulator
    otlp_http_receiver.set_unavailable()  # the backend behind the Collector is down: its queue fills
    queue = {"enabled": True, "queue_size": 1, "num_consumers": 1, "sizer": "requests"}
    collector = Collector(tmp_path, forwarding_config(tmp_path, otlp_http_receiver, queue=queue)).start()
    exporter = start_exporter_on(start_otel, url, collector)
    add_events(world, exporter, 6)
    wait_for(lambda: collector.counted("otelcol_exporter_enqueue_failed_log_records") >= 1, 60, "its queue full")
    assert (value(exporter.metrics(), "azure_scheduled_events_log_spool_depth") or 0) >= 1, "the records wait"
    otlp_http_receiver.set_unavailable(False)
    got = all_delivered_once(exporter, otlp_http_receiver, 6)
    assert collector.counted("otelcol_receiver_accepted_log_records") == len(got)
    assert exporter.stop() == 0 and collector.stop() == 0


# ----- auth and TLS, as deployed -----------------------------------------------------------------------------

TOKEN = "s3cret-token"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_bearer_token_from_otel_exporter_otlp_headers_and_a_wrong_one_said_once(
    protocol: str, tmp_path: Path, simulator: tuple[SimWorld, str], start_otel: StartOTel
) -> None:
    world, url = simulator
    config = collector_config(
        tmp_path,
        protocol,
        receiver={"auth": {"authenticator": "bearertokenauth"}},
        extensions={"bearertokenauth": {"token": TOKEN}},
    )
    collector = Collector(tmp_path, config).start()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint(), "OTEL_EXPORTER_OTLP_PROTOCOL": PROTOCOLS[protocol]}
    wrong = start_otel(url, None, env={**env, "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20wrong"})
    wrong.wait_ready()
    add_events(world, wrong, 2)
    wait_for(lambda: "OTLP log export refused" in wrong.logs(), 30, "the refusal said")
    add_events(world, wrong, 1)
    assert wrong.stop() == 0
    said = [line for line in wrong.logs().splitlines() if "OTLP log export refused" in line]
    assert len(said) == 1, said
    assert ("401" in said[0] or "UNAUTHENTICATED" in said[0]) and "not retried until the configuration" in said[0]
    assert file_logs(tmp_path / "logs.jsonl") == [], "nothing taken without the token"
    assert "stopping with 3 log record(s) not yet accepted" in wrong.logs(), "the records wait, on disk"

    right = start_otel(url, None, env={**env, "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{TOKEN}"})
    right.wait_ready()
    wait_for(lambda: len(file_logs(tmp_path / "logs.jsonl")) >= 3, 30, "the three waiting records")
    assert right.stop() == 0
    got = [str(r["log.record.uid"]) for r in file_logs(tmp_path / "logs.jsonl")]
    assert len(got) == len(set(got)) == 3
    assert collector.counted("otelcol_receiver_accepted_log_records") == 3
    assert collector.stop() == 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_server_tls_and_mutual_tls_from_the_otel_variables(
    protocol: str, tmp_path: Path, simulator: tuple[SimWorld, str], start_otel: StartOTel
) -> None:
    world, url = simulator
    pki = make_pki(tmp_path)
    for mutual in (False, True):
        folder = tmp_path / ("mutual" if mutual else "server")
        folder.mkdir()
        tls = {"cert_file": str(pki.path("server.crt")), "key_file": str(pki.path("server.key"))}
        env = {"OTEL_EXPORTER_OTLP_PROTOCOL": PROTOCOLS[protocol], "OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca_file)}
        if mutual:
            tls["client_ca_file"] = str(pki.ca_file)
            env |= {
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": str(pki.path("client.crt")),
                "OTEL_EXPORTER_OTLP_CLIENT_KEY": str(pki.path("client.key")),
            }
        collector = Collector(folder, collector_config(folder, protocol, receiver={"tls": tls})).start()
        exporter = start_otel(url, None, env={**env, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint("https")})
        exporter.wait_ready()
        event = world.add_event(EventPlan("Reboot", notice=900))
        written = folder / "logs.jsonl"
        arrived = functools.partial(
            lambda e, w: any(r["scheduled_event.id"] == e for r in file_logs(w)), event, written
        )
        wait_for(arrived, 30, "the record over TLS")
        assert collector.counted("otelcol_receiver_accepted_log_records") >= 1
        assert exporter.stop() == 0 and collector.stop() == 0


# ----- every Collector config we ship or print ----------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
COMPOSE_CONFIG = REPO / "deploy" / "compose" / "otel-collector.yaml"
# Its Alertmanager receiver (webhookevent) is the one component the Go module proxy does not serve here:
# the receiver and its pipeline are left out of what the Collector loads, and only they.
NOT_SERVED = {"receivers": ["webhookevent"], "pipelines": ["logs/alerts"]}


def without_unserved(config: dict[str, Any]) -> dict[str, Any]:
    config = json.loads(json.dumps(config))
    for name in NOT_SERVED["receivers"]:
        del config["receivers"][name]
    for name in NOT_SERVED["pipelines"]:
        del config["service"]["pipelines"][name]
    return config


def docs_configs() -> dict[str, str]:
    """Every Collector config block in docs/ (a YAML block with receivers and a pipeline or an operator)."""
    found = {}
    for page in sorted((REPO / "docs").glob("*.md")):
        for number, block in enumerate(re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S)):
            if re.search(r"^receivers:", block, re.M):
                found[f"{page.name}#{number}"] = block
    return found


def test_the_compose_files_collector_config_and_every_config_in_docs_pass_validate(tmp_path: Path) -> None:
    compose = yaml.safe_load(COMPOSE_CONFIG.read_text())
    assert sorted(compose["receivers"]) == ["otlp", "webhookevent"], "NOT_SERVED names what is left out"
    checked = {"compose": without_unserved(compose)}
    for name, block in docs_configs().items():
        config = yaml.safe_load(block)
        config.setdefault("exporters", {"debug": {}})
        config.setdefault(
            "service", {"pipelines": {"logs": {"receivers": list(config["receivers"]), "exporters": ["debug"]}}}
        )
        checked[name] = config
    assert "opentelemetry.md#0" in checked or any(n.startswith("opentelemetry.md") for n in checked), "filelog's block"
    for name, config in checked.items():
        path = tmp_path / f"{name.replace('#', '-')}.yaml"
        path.write_text(yaml.safe_dump(config))
        result = run_validate(path)
        assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr}"


def test_the_compose_files_collector_config_runs_and_our_records_arrive_through_it(
    tmp_path: Path, simulator: tuple[SimWorld, str], start_otel: StartOTel
) -> None:
    """As docker compose runs it (its listeners on loopback and port 0 here): the debug exporter prints each
    record in full, as `docker compose logs -f otel-collector` shows it."""
    world, url = simulator
    config = without_unserved(yaml.safe_load(COMPOSE_CONFIG.read_text()))
    for protocol in config["receivers"]["otlp"]["protocols"].values():
        protocol["endpoint"] = "127.0.0.1:0"
    config["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"] |= {
        "host": "127.0.0.1",
        "port": 0,
    }
    collector = Collector(tmp_path, config).start()
    assert collector.grpc_port, "both of its OTLP receivers listen"
    exporter = start_exporter_on(start_otel, url, collector, "--log.format=json")
    add_events(world, exporter, 2)
    wait_for(lambda: collector.counted("otelcol_receiver_accepted_log_records") >= 2, 30, "two records taken")
    assert exporter.stop() == 0
    uids_sent = list(exporter_lines(exporter))
    wait_for(lambda: all(uid in collector.logs() for uid in uids_sent), 30, "each record printed by debug/logs")
    assert len(uids_sent) == 2
    assert collector.stop() == 0


def test_filelog_over_the_exporters_json_lines_makes_the_records_otlp_carries(
    tmp_path: Path, simulator: tuple[SimWorld, str], start_otel: StartOTel
) -> None:
    """docs/opentelemetry.md's filelog config, as a node agent runs it over the container's log file (the
    runtime's CRI lines), beside the same exporter's OTLP records: each transition once, with the same uid
    and attributes."""
    world, url = simulator
    otlp = tmp_path / "otlp"
    otlp.mkdir()
    collector = Collector(otlp, collector_config(otlp, "http")).start()
    exporter = start_exporter_on(start_otel, url, collector, "--log.format=json")
    reboot, freeze = scenario(world)
    wait_for(lambda: len(file_logs(otlp / "logs.jsonl")) >= 2, 30, "two records over OTLP")
    world.start_event(reboot)
    world.cancel_event(freeze)
    wait_for(lambda: len(file_logs(otlp / "logs.jsonl")) >= 4, 30, "four records over OTLP")
    assert exporter.stop() == 0 and collector.stop() == 0
    pods = tmp_path / "var/log/pods/monitoring_se-exporter-x7k2p_0f4c/se-exporter"
    pods.mkdir(parents=True)
    with (pods / "0.log").open("w") as cri:  # as containerd writes the container's stderr
        for line in exporter.logs().splitlines():
            cri.write(f"2026-12-05T10:00:00.000000000Z stderr F {line}\n")

    block = re.search(r"<!-- filelog-config -->\n```yaml\n(.*?)```", (REPO / "docs/opentelemetry.md").read_text(), re.S)
    assert block is not None
    config = yaml.safe_load(block[1])
    receiver = config["receivers"]["filelog/se-exporter"]
    receiver["include"] = [str(tmp_path) + path for path in receiver["include"]]
    receiver["start_at"] = "beginning"
    agent = tmp_path / "agent"
    agent.mkdir()
    config |= collector_config(agent, "http") | {"receivers": config["receivers"] | {}}
    config["service"]["pipelines"] = {"logs": {"receivers": ["filelog/se-exporter"], "exporters": ["file/logs"]}}
    node = Collector(agent, config).start()
    wait_for(lambda: len(file_logs(agent / "logs.jsonl")) >= 4, 30, "four records from the log file")
    assert node.stop() == 0

    over_otlp = {str(r["log.record.uid"]): r for r in file_logs(otlp / "logs.jsonl")}
    from_file = {str(r["log.record.uid"]): r for r in file_logs(agent / "logs.jsonl")}
    assert len(file_logs(agent / "logs.jsonl")) == 4 and sorted(from_file) == sorted(over_otlp), "each once, same uids"
    for uid, record in from_file.items():
        sent = over_otlp[uid]
        assert {k: v for k, v in record.attributes.items() if k.startswith("scheduled_event.")} == {
            k: v for k, v in sent.attributes.items() if k.startswith("scheduled_event.")
        }
        assert record["event"] == sent.event_name and record.body == sent.body
        assert record.severity_number == sent.severity_number
