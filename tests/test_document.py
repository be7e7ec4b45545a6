"""Parsing IMDS documents: the docs' example, older api-versions, time formats, malformed bodies."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from se_exporter.errors import InvalidDocument
from se_exporter.imds.document import ScheduledEvent, parse_document, parse_not_before

pytestmark = pytest.mark.pure

IMDS = Path(__file__).parent / "testdata" / "imds"
FREEZE_ID = "C7061BAC-AFDC-4513-B24B-AA5F13A16123"


def load(name: str) -> bytes:
    return (IMDS / name).read_bytes()


def test_docs_example_scheduled_freeze() -> None:
    document = parse_document(load("docs-example-2-scheduled.json"))
    assert document.incarnation == 2
    assert document.events == (
        ScheduledEvent(
            event_id=FREEZE_ID,
            event_type="Freeze",
            event_status="Scheduled",
            resource_type="VirtualMachine",
            resources=("WestNO_0", "WestNO_1"),
            not_before=datetime(2022, 4, 11, 22, 26, 58, tzinfo=UTC),
            description="Virtual machine is being paused because of a memory-preserving Live Migration operation.",
            event_source="Platform",
            duration_seconds=5,
        ),
    )


@pytest.mark.parametrize(
    ("fixture", "incarnation", "statuses"),
    [
        ("docs-example-1-before.json", 1, []),
        ("docs-example-2-scheduled.json", 2, ["Scheduled"]),
        ("docs-example-3-started.json", 3, ["Started"]),
        ("docs-example-4-after.json", 4, []),
    ],
)
def test_docs_example_sequence(fixture: str, incarnation: int, statuses: list[str]) -> None:
    document = parse_document(load(fixture))
    assert document.incarnation == incarnation
    assert [e.event_status for e in document.events] == statuses


def test_started_event_has_no_not_before() -> None:
    (event,) = parse_document(load("docs-example-3-started.json")).events
    assert event.not_before is None


def test_old_api_version_lacks_newer_fields() -> None:
    (event,) = parse_document(load("api-2017-11-01.json")).events
    assert (event.description, event.event_source, event.duration_seconds) == ("", "", -1)
    assert event.not_before == datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC)


def test_iso_8601_from_microsofts_mock_server() -> None:
    (event,) = parse_document(load("iso-8601-mock-server.json")).events
    assert event.not_before == datetime(2022, 4, 11, 22, 26, 58, tzinfo=UTC)
    assert event.duration_seconds == -1


def test_unknown_type_and_status_are_kept() -> None:
    (event,) = parse_document(load("unknown-type-and-status.json")).events
    assert (event.event_type, event.event_status) == ("LiveUpgrade", "Pending")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mon, 11 Apr 2022 22:26:58 GMT", datetime(2022, 4, 11, 22, 26, 58, tzinfo=UTC)),
        ("2022-04-11T22:26:58Z", datetime(2022, 4, 11, 22, 26, 58, tzinfo=UTC)),
        ("2022-04-11T23:26:58+01:00", datetime(2022, 4, 11, 22, 26, 58, tzinfo=UTC)),
        ("2022-04-11T22:26:58", datetime(2022, 4, 11, 22, 26, 58, tzinfo=UTC)),
        ("11 Apr 2022 22:26:58 GMT", datetime(2022, 4, 11, 22, 26, 58, tzinfo=UTC)),
        ("", None),
        ("   ", None),
    ],
)
def test_not_before_formats(text: str, expected: datetime | None) -> None:
    assert parse_not_before(text) == expected


@pytest.mark.parametrize("text", ["Mon, 11 Apr 22 22:26:58 GMT", "11 Apr 99 22:26:58 GMT", "Mon, 11 Apr 022 22:26 GMT"])
def test_a_year_not_written_with_four_digits_is_refused_not_guessed(text: str) -> None:
    """email.utils reads "99" as 1999: an event whose NotBefore has passed long ago."""
    with pytest.raises(InvalidDocument, match="neither RFC 1123 nor ISO 8601"):
        parse_not_before(text)


MALFORMED = {
    "truncated.json": "body is not JSON",
    "empty.json": "body is not JSON",
    "not-utf8.json": "body is not JSON",
    "not-an-object.json": "Expected `object`, got `array`",
    "missing-incarnation.json": "Object missing required field `DocumentIncarnation`",
    "incarnation-string.json": "Expected `int`, got `str` - at `$.DocumentIncarnation`",
    "incarnation-bool.json": "Expected `int`, got `bool` - at `$.DocumentIncarnation`",
    "events-not-list.json": "Expected `array`, got `object` - at `$.Events`",
    "event-not-object.json": "Expected `object`, got `str` - at `$.Events[0]`",
    "missing-event-id.json": "Object missing required field `EventId` - at `$.Events[0]`",
    "event-id-number.json": "Expected `str`, got `int` - at `$.Events[0].EventId`",
    "resources-string.json": "Expected `array`, got `str` - at `$.Events[0].Resources`",
    "bad-not-before.json": "NotBefore is neither RFC 1123 nor ISO 8601: 'tomorrow-ish'",
    "duration-string.json": "Expected `int`, got `str` - at `$.Events[0].DurationInSeconds`",
    "duplicate-event-id.json": "EventId 'x' is listed twice",
}
"""Each malformed fixture (testdata) and the words its error must hold."""


@pytest.mark.parametrize(("fixture", "message"), sorted(MALFORMED.items()))
def test_malformed_documents_name_the_problem(fixture: str, message: str) -> None:
    with pytest.raises(InvalidDocument) as caught:
        parse_document(load(f"malformed/{fixture}"))
    assert message in str(caught.value)
    assert caught.value.reason == "invalid_document"


def test_every_malformed_fixture_is_covered() -> None:
    assert set(MALFORMED) == {p.name for p in (IMDS / "malformed").iterdir()}


def test_deeply_nested_json_is_invalid_not_a_crash() -> None:
    with pytest.raises(InvalidDocument):
        parse_document(b"[" * 100_000 + b"]" * 100_000)
