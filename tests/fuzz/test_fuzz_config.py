"""Fuzzing the configuration loaders and the state file decoder.

The approval policy and the web config are operator input: anything wrong must be a ``ConfigError``
naming the problem (a start-up error), never a traceback. A state file is our own output but may be
damaged: restoring the store from it never raises, and what it keeps is safe to keep working with.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from se_exporter.approval.policy import Policy, load_policy, parse_policy
from se_exporter.durable.persistence import Persistence
from se_exporter.errors import ConfigError
from se_exporter.imds.document import Document, ScheduledEvent, VMIdentity
from se_exporter.lifecycle import EventStore
from se_exporter.lifecycle.machine import TABLES
from se_exporter.poller import PollStatus
from se_exporter.web.config import parse_web_config
from tests.fuzz.strategies import config_values, json_values, nasty_text
from tests.support.exposition import render
from tests.support.state_file import encoded, saved_rows

pytestmark = pytest.mark.pure

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MATCH_KEYS = [
    "event_types",
    "event_sources",
    "min_duration_seconds",
    "max_duration_seconds",
    "not_before_within_seconds",
    "max_resources",
    "description_pattern",
    "name",
]
REGEXES = st.sampled_from(
    ["(" * 2000 + ")" * 2000, "a{99999999999}", "[", "(?P<", "a**", "\\", "(?<=a+)b", "x" * 10_000]
) | st.text(max_size=20)
rule_values = st.one_of(
    config_values,
    st.lists(st.sampled_from(["Freeze", "Reboot", "User", "Platform", "X"])),
    st.integers(min_value=-3, max_value=2**65),
    REGEXES,
)
rules = st.dictionaries(st.sampled_from(MATCH_KEYS), rule_values, max_size=5)
hooks = st.dictionaries(
    st.sampled_from(["command", "timeout_seconds", "inherit_env", "other"]),
    st.one_of(config_values, st.lists(nasty_text, max_size=3), st.floats()),
    max_size=3,
)
policies = st.fixed_dictionaries(
    {},
    optional={
        "rules": st.one_of(st.lists(rules, max_size=3), config_values),
        "dry_run": config_values,
        "leader": st.sampled_from(["first_resource", "any_listed", "x"]) | config_values,
        "hook": st.one_of(hooks, config_values),
    },
)


def deep(depth: int) -> object:
    value: object = []
    for _ in range(depth):
        value = [value]
    return value


def policy_or_config_error(data: object) -> None:
    try:
        policy = parse_policy(data, "fuzz.yaml")
    except ConfigError as error:
        assert str(error).startswith("approval config fuzz.yaml"), error
        return
    assert isinstance(policy, Policy) and policy.rules
    assert policy.fingerprint
    event = ScheduledEvent("E1", "Freeze", "Scheduled", resources=("vm-a",), description="x" * 100)
    policy.decide(event, "vm-a", time.time())


@FUZZ
@given(policies)
def test_policy_structures(data: object) -> None:
    policy_or_config_error(data)


@FUZZ
@given(config_values)
def test_policy_any_value(data: object) -> None:
    policy_or_config_error(data)


def test_policy_deeply_nested_value() -> None:
    policy_or_config_error({"rules": deep(5000)})
    policy_or_config_error({"rules": [{"name": "a", "event_types": deep(5000)}]})


def _load_policy_text(text: str | bytes) -> None:
    fd, name = tempfile.mkstemp(suffix=".yaml")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
        try:
            load_policy(name)
        except ConfigError as error:
            assert name in str(error)
    finally:
        Path(name).unlink()


HOSTILE_YAML = [
    "[" * 10_000,
    "{a: " * 3000,
    "rules: " + "[" * 3000 + "]" * 3000,
    'rules:\n  - name: a\n    description_pattern: "' + "(" * 2000 + ")" * 2000 + '"',
    'rules:\n  - name: a\n    description_pattern: "a{99999999999}"',
    'rules:\n  - name: a\n    event_types: [Freeze]\nhook:\n  command: ["a\\0b"]',
    "&a [*a]",
    "rules: !!python/object:os.system x",
    "rules: *nope",
    "\x00",
    "\ufeffrules: 1",
    "rules:\n  - &r {name: a, event_types: [Freeze]}\n  - *r",
    "a: &a [*a, *a]\nb: &b [*a, *a, *a]\nc: &c [*b, *b, *b]\nrules: [*c, *c, *c]",
]
YAML_TEXT = st.text(max_size=200) | st.binary(max_size=200)


@pytest.mark.parametrize("text", HOSTILE_YAML, ids=range(len(HOSTILE_YAML)))
def test_policy_file_hostile_text(text: str) -> None:
    _load_policy_text(text)


@pytest.mark.parametrize("text", HOSTILE_YAML, ids=range(len(HOSTILE_YAML)))
def test_web_config_hostile_text(text: str) -> None:
    try:
        parse_web_config(text, source="fuzz-web.yml", base_dir=Path(tempfile.gettempdir()))
    except ConfigError as error:
        assert str(error).startswith("web config fuzz-web.yml"), error


@FUZZ
@given(YAML_TEXT)
def test_policy_file_text(text: str | bytes) -> None:
    _load_policy_text(text)


@FUZZ
@given(YAML_TEXT)
def test_web_config_text(text: str | bytes) -> None:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        parse_web_config(text, source="fuzz-web.yml", base_dir=Path(tempfile.gettempdir()))
    except ConfigError as error:
        assert str(error).startswith("web config fuzz-web.yml"), error


web_structures = st.fixed_dictionaries(
    {},
    optional={
        "tls_server_config": st.dictionaries(
            st.sampled_from(
                [
                    "cert_file",
                    "key_file",
                    "client_auth_type",
                    "client_ca_file",
                    "min_version",
                    "cipher_suites",
                    "client_allowed_sans",
                    "curve_preferences",
                ]
            ),
            config_values | nasty_text,
            max_size=4,
        )
        | config_values,
        "http_server_config": config_values,
        "basic_auth_users": config_values,
        "auth_excluded_paths": config_values,
    },
)


@FUZZ
@given(web_structures)
def test_web_config_structures(data: object) -> None:
    text = json.dumps(data, default=str)  # JSON is YAML
    try:
        parse_web_config(text, source="fuzz-web.yml", base_dir=Path(tempfile.gettempdir()))
    except ConfigError as error:
        assert str(error).startswith("web config fuzz-web.yml"), error


state_events = st.fixed_dictionaries(
    {},
    optional={
        "event": st.fixed_dictionaries(
            {},
            optional={
                k: json_values
                for k in (
                    "event_id",
                    "event_type",
                    "event_status",
                    "resource_type",
                    "resources",
                    "not_before",
                    "description",
                    "event_source",
                    "duration_seconds",
                    "bogus",
                )
            },
        )
        | json_values,
        "first_seen": json_values,
        "first_seen_status": json_values,
        "started_at": json_values,
        "not_before_history": json_values,
        "life": json_values,
    },
)
store_sections = (
    st.fixed_dictionaries(
        {},
        optional={
            "incarnation": json_values,
            "events": st.lists(state_events, max_size=3) | json_values,
            "removed": st.dictionaries(nasty_text, json_values, max_size=3) | json_values,
        },
    )
    | json_values
)


def _valid_section() -> dict[str, Any]:
    store = EventStore()
    store.reconcile(
        Document(
            3,
            (
                ScheduledEvent(
                    "E1", "Freeze", "Scheduled", resources=("vm-a",), not_before=datetime(2030, 1, 1, tzinfo=UTC)
                ),
                ScheduledEvent("E2", "Reboot", "Started"),
            ),
        ),
        1_700_000_000.0,
    )
    store.reconcile(Document(4, (ScheduledEvent("E1", "Freeze", "Scheduled"),)), 1_700_000_001.0)
    return earlier_section(store)


def earlier_section(store: EventStore) -> dict[str, Any]:
    """The store as an earlier release saved it: one JSON section (its events in a list)."""
    return {
        "incarnation": store.incarnation,
        "events": [msgspec.to_builtins(state) for state in store.events.values()],
        "removed": {key: removal.life for key, removal in store.removed.items()},
        "last_look": store.last_look,
    }


EVENT_KEYS = [
    "event_id",
    "event_type",
    "event_status",
    "resource_type",
    "resources",
    "not_before",
    "description",
    "event_source",
    "duration_seconds",
]
STATE_KEYS = ["event", "first_seen", "first_seen_status", "started_at", "not_before_history", "life"]


@st.composite
def damaged_sections(draw: st.DrawFn) -> dict[str, Any]:
    """A state section we wrote, with one to three values replaced by anything JSON can hold."""
    section = _valid_section()
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "state", "event"]))
        if where == "top":
            section[draw(st.sampled_from(["incarnation", "events", "removed"]))] = draw(json_values)
        elif isinstance(section.get("events"), list) and section["events"]:
            state = section["events"][0]
            if where == "state" and isinstance(state, dict):
                state[draw(st.sampled_from(STATE_KEYS))] = draw(json_values)
            elif isinstance(state, dict) and isinstance(state.get("event"), dict):
                state["event"][draw(st.sampled_from(EVENT_KEYS))] = draw(json_values)
    return section


def restore(section: object) -> EventStore:
    """The store as the exporter restores it from a state file holding ``section`` (maybe damaged)."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "state.db"
        path.write_text(json.dumps({"version": 1, "sections": {"store": section}}))  # NaN, lone surrogates...
        persistence = Persistence(path)
        try:
            return persistence.restore("store", TABLES, EventStore.from_rows, EventStore)
        finally:
            persistence.close()


@FUZZ
@given(store_sections | damaged_sections())
def test_restoring_a_damaged_store_never_raises(section: object) -> None:
    store = restore(section)
    assert isinstance(store, EventStore)
    # Whatever it kept is usable: saved again, and reconciled against a document.
    encoded(store)
    render(store, status=PollStatus(identity=VMIdentity(name="vm-a")))
    store.reconcile(Document(1, (ScheduledEvent("E1", "Freeze", "Scheduled"),)), time.time())
    render(store)


@pytest.mark.parametrize("life", [float("inf"), float("-inf"), float("nan"), 1e308, "x", None, [1]])
def test_restoring_a_bad_life(life: object) -> None:
    assert restore({"events": [], "incarnation": 1, "removed": {"E1": life}}).removed == {}


@pytest.mark.parametrize("incarnation", ['"1"', "1e999", "-1.5"])
def test_a_damaged_section_is_lost_alone_and_counted(tmp_path: Path, incarnation: str) -> None:
    path = tmp_path / "state.db"
    store = '{"incarnation": ' + incarnation + ', "events": []}'
    lifecycle = '{"E1": {"first_seen": 1700000000.0, "life": 1, "steps": []}}'
    path.write_text('{"version": 1, "sections": {"store": ' + store + ', "lifecycle": ' + lifecycle + "}}")
    persistence = Persistence(path)
    assert persistence.restore("store", TABLES, EventStore.from_rows, EventStore).incarnation is None
    assert persistence.errors == 1
    persistence.close()
    assert list(saved_rows(path)["open_spans"]) == ["E1"], "the other section's rows imported all the same"


@pytest.mark.parametrize(
    "text",
    [
        '{"version": 1, "sections": {"store": {"x": NaN}}}',
        '{"version": 1, "sections": {"store": {"x": "\\ud800"}}}',
        '{"version": 1, "sect',
        "[]",
        '{"version": 2, "sections": {}}',
    ],
)
def test_a_file_we_could_not_have_written_is_set_aside_and_counted(tmp_path: Path, text: str) -> None:
    path = tmp_path / "state.db"
    path.write_text(text)
    persistence = Persistence(path)
    assert persistence.restore("store", TABLES, EventStore.from_rows, EventStore).events == {}
    assert persistence.errors == 1
    assert (tmp_path / "state.db.discarded").read_text(encoding="utf-8") == text
    persistence.close()
    assert path.read_bytes().startswith(b"SQLite format 3"), "a new database in its place"
    assert saved_rows(path) == {}
