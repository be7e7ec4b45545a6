"""Fuzzing the IMDS document parser: only ``InvalidDocument`` may escape, and whatever it accepts flows
through the store, the metrics exposition, the audit records and the log formatters without an error."""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from se_exporter.audit.records import encode_record, transition_record
from se_exporter.durable.opening import open_memory_database
from se_exporter.errors import InvalidDocument
from se_exporter.imds.document import Document, VMIdentity, parse_document, parse_not_before
from se_exporter.lifecycle import EventStore
from se_exporter.logs import JSONFormatter, LogfmtFormatter
from se_exporter.metrics.counters import MAX_LABEL_LENGTH, Counters, label
from se_exporter.poller import PollResult, PollStatus
from tests.fuzz.strategies import documents, encoded, json_values, nested, not_before
from tests.support.exposition import render
from tests.support.state_file import audit_spool, commit

pytestmark = pytest.mark.pure

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parse_or_typed(body: bytes | str) -> Document | None:
    try:
        document = parse_document(body)
    except InvalidDocument as error:
        assert str(error), "a typed error must say what is wrong"
        return None
    assert isinstance(document, Document)
    return document


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes(body: bytes) -> None:
    parse_or_typed(body)


@FUZZ
@given(json_values)
def test_any_json_value(value: object) -> None:
    parse_or_typed(encoded(value))


@FUZZ
@given(documents)
def test_document_shaped_values_with_wrong_types(value: dict[str, object]) -> None:
    document = parse_or_typed(encoded(value))
    if document is not None:
        exercise(document)


@FUZZ
@given(not_before)
def test_not_before(text: object) -> None:
    if not isinstance(text, str):
        return
    try:
        moment = parse_not_before(text)
    except InvalidDocument:
        return
    assert moment is None or (isinstance(moment, datetime) and moment.utcoffset() is not None)


@pytest.mark.parametrize(
    "body",
    [
        nested(100_000),
        nested(100_000, "{"),
        nested(2_000),
        b"9" * 10_000,
        b'{"DocumentIncarnation": ' + b"9" * 5000 + b"}",
        b"\xff\xfe\x00",
        b"",
        '{"DocumentIncarnation": 1}'.encode("utf-16"),
        b'{"DocumentIncarnation": NaN}',
    ],
    ids=[
        "deep-array",
        "deep-object",
        "array-2000",
        "huge-number",
        "huge-incarnation",
        "not-utf8",
        "empty",
        "utf-16",
        "nan",
    ],
)
def test_hostile_bodies(body: bytes) -> None:
    parse_or_typed(body)


def test_lone_surrogates_are_rejected_not_crashing_later() -> None:
    """``"\\ud800"`` is valid JSON but cannot be UTF-8: it once crashed the uid, the spool and the scrape."""
    for field in ("EventId", "EventType", "Description", "EventSource", "ResourceType", "NotBefore"):
        event = {"EventId": "E1", "EventType": "Freeze", "EventStatus": "Scheduled", field: "x\ud800y"}
        with pytest.raises(InvalidDocument, match="Unicode"):
            parse_document(encoded({"DocumentIncarnation": 1, "Events": [event]}))
    with pytest.raises(InvalidDocument, match="Unicode"):
        parse_document(
            encoded(
                {
                    "DocumentIncarnation": 1,
                    "Events": [
                        {"EventId": "E1", "EventType": "Freeze", "EventStatus": "Scheduled", "Resources": ["\udfff"]}
                    ],
                }
            )
        )


def test_date_overflow_is_a_typed_error() -> None:
    for text in ("9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00", "Fri, 31 Dec 9999 23:59:59 -0100"):
        with pytest.raises(InvalidDocument, match="NotBefore"):
            parse_not_before(text)


def exercise(document: Document) -> None:
    """Everything downstream of the parser, on an accepted document: no exception, nothing mangled."""
    store = EventStore()
    now = time.time()
    transitions = [*store.reconcile(document, now), *store.reconcile(Document(document.incarnation + 1), now + 1)]
    counters = Counters()
    counters.on_poll(PollResult(document, transitions, (), True, VMIdentity(name="vm-a"), now))
    store.reconcile(document, now + 2)
    text = render(store, counters, PollStatus(up=True, last_success=now, identity=VMIdentity(name="vm-a")))
    families = {family.name: family for family in text_string_to_metric_families(text)}
    info = families.get("azure_scheduled_events_event_info")
    ids = sorted(sample.labels["event_id"] for sample in (info.samples if info else []))
    assert ids == sorted(_label(event.event_id) for event in document.events)
    assert len(set(ids)) == len(ids), "two events share one event_info series"
    database = open_memory_database()
    spool = audit_spool(database)
    identity = VMIdentity(name="vm-a")
    records = [transition_record(t, identity) for t in transitions]
    assert spool.append(records) == len({r.uid for r in records})
    commit(database)
    assert {r.uid for r in spool.peek(len(records) or 1)} == {r.uid for r in records}, "each one through the table"
    database.close(10)
    for record in records:
        assert record.attributes["scheduled_event.id"] in {e.event_id for e in document.events}
        assert json.loads(encode_record(record))["uid"] == record.uid
        log = logging.makeLogRecord({"msg": record.body, "levelname": "INFO", **dict(record.attributes)})
        LogfmtFormatter().format(log).encode("utf-8")
        assert json.loads(JSONFormatter().format(log))["scheduled_event.id"] == record.attributes["scheduled_event.id"]


def _label(value: str) -> str:
    assert len(label(value)) <= MAX_LABEL_LENGTH + 10
    return label(value)
