"""The policy file: strict validation (one fixture per mistake) and the matching table."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

import se_exporter.approval.policy as policy_module
from se_exporter.approval.policy import (
    LEADER_ANY_LISTED,
    NO_RULE,
    NOT_LEADER,
    NOT_SCHEDULED,
    NOT_THIS_VM,
    VM_NAME_UNKNOWN,
    Policy,
    Rule,
    Verdict,
    load_policy,
    parse_policy,
)
from se_exporter.errors import ConfigError
from se_exporter.imds.impact import Cause, Classification, Impact
from tests.approval.helpers import T0, TESTDATA, VM, event
from tests.support.readme import DOCS

pytestmark = pytest.mark.pure

INVALID = sorted((TESTDATA / "invalid").glob("*.yaml"))
VALID = sorted((TESTDATA / "valid").glob("*.yaml"))
PACKAGE = Path(policy_module.__file__).parent


def expected_message(path: Path) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: <message>'"
    return first.removeprefix("# expect: ")


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_policy_is_a_startup_error_naming_key_and_problem(path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_policy(path)
    message = str(info.value)
    assert message.startswith(f"approval config {path}: ")
    assert expected_message(path) in message


def test_there_is_one_fixture_per_mistake() -> None:
    assert len(INVALID) >= 35
    assert len({expected_message(p) for p in INVALID}) == len(INVALID)


def test_the_brief_example_message_verbatim() -> None:
    path = TESTDATA / "invalid" / "duration_string.yaml"
    with pytest.raises(
        ConfigError,
        match=re.escape(f'approval config {path}: rules[1].max_duration_seconds: must be an integer >= 0, got "eight"'),
    ):
        load_policy(path)


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        (lambda p: None, "cannot read the file: No such file or directory"),
        (lambda p: p.mkdir(), "cannot read the file: it is a directory, not a regular file"),
        (lambda p: p.write_bytes(b"rules:\n  - name: caf\xe9\n"), "the file is not UTF-8 text"),
    ],
    ids=["missing", "directory", "not-utf8"],
)
def test_unreadable_file(tmp_path: Path, setup: object, expected: str) -> None:
    path = tmp_path / "policy.yaml"
    setup(path)  # type: ignore[operator]
    with pytest.raises(ConfigError, match=re.escape(f"approval config {path}: {expected}")):
        load_policy(path)


@pytest.mark.posix
@pytest.mark.parametrize("path", VALID, ids=[p.stem for p in VALID])
def test_valid_policies_load(path: Path) -> None:
    policy = load_policy(path)
    assert policy.rules
    assert policy.source == str(path)


@pytest.mark.posix
def test_all_keys_are_parsed() -> None:
    policy = load_policy(TESTDATA / "valid" / "all-keys.yaml")
    assert policy.dry_run is True
    assert policy.leader == LEADER_ANY_LISTED
    (rule,) = policy.rules
    assert rule == Rule(
        name="late-single-vm-reboot",
        event_types=("Reboot", "Redeploy"),
        event_sources=("Platform", "User"),
        impacts=(Impact.REBOOT, Impact.REDEPLOY),
        causes=(Cause.PLATFORM, Cause.USER),
        min_duration_seconds=0,
        max_duration_seconds=600,
        not_before_within_seconds=120,
        max_resources=1,
        description_pattern="(?i)host server",
        scope="group",
    )
    assert policy.group_approvers == ("WestNO_0", "WestNO_1")
    assert policy.hook is not None
    assert policy.hook.command == ("sh", "-c", "exit 0")
    assert policy.hook.timeout_seconds == 2.5
    assert policy.hook.inherit_env == ("NODE_NAME", "HTTPS_PROXY")


def test_defaults() -> None:
    policy = load_policy(TESTDATA / "valid" / "minimal.yaml")
    assert (policy.dry_run, policy.leader, policy.hook) == (False, "first_resource", None)


GROUP = Policy(
    rules=(
        Rule("mine", event_sources=("Platform",)),
        Rule("the-sets-user-events", event_sources=("User",), scope="group"),
    ),
    group_approvers=("WestNO_0", "westno_1"),
)


@pytest.mark.parametrize(
    ("vm", "resources", "source", "reason", "rule"),
    [
        pytest.param("WestNO_1", ("WestNO_0",), "User", "", "the-sets-user-events", id="approver, not listed: group"),
        pytest.param("WESTNO_1", ("WestNO_0",), "User", "", "the-sets-user-events", id="names are case-insensitive"),
        pytest.param("WestNO_1", ("WestNO_0",), "Platform", NO_RULE, "", id="approver: only group rules for others"),
        pytest.param("WestNO_2", ("WestNO_0",), "User", NOT_THIS_VM, "", id="not a group approver"),
        pytest.param("WestNO_1", ("WestNO_0", "WestNO_1"), "User", NOT_LEADER, "", id="listed: the leader rule"),
        pytest.param("WestNO_0", ("WestNO_0", "WestNO_1"), "Platform", "", "mine", id="listed leader: every rule"),
    ],
)
def test_scope_group_approves_the_sets_events_on_the_named_approvers_only(
    vm: str, resources: tuple[str, ...], source: str, reason: str, rule: str
) -> None:
    """Azure's docs: events of an availability set or a placement group reach every VM of it, and "a primary
    and secondary VM" should approve user-initiated events in case the primary is unresponsive."""
    verdict = GROUP.decide(event(resources=resources, event_source=source), vm, T0)
    assert (verdict.candidate, verdict.reason, verdict.rule) == (not reason, reason, rule), verdict.detail
    if rule == "the-sets-user-events":
        assert verdict.detail == (
            f"rule the-sets-user-events matched for the group: {vm} is a group approver, not in Resources [WestNO_0]"
        )


def test_a_rule_of_scope_self_never_approves_an_event_that_does_not_list_this_vm() -> None:
    """The default: the issue's reproduction, leader any_listed on WestNO_1 and a Reboot of WestNO_0."""
    policy = Policy(rules=(Rule("user", event_sources=("User",)),), leader=LEADER_ANY_LISTED)
    verdict = policy.decide(event(resources=("WestNO_0",)), "WestNO_1", T0)
    assert (verdict.candidate, verdict.reason) == (False, NOT_THIS_VM)


def test_demo_policy_approves_live_migrations_user_events_and_short_freezes() -> None:
    policy = load_policy(PACKAGE / "demo-policy.yaml")
    assert [r.name for r in policy.rules] == ["live-migrations", "user-initiated", "short-freeze"]
    assert not policy.dry_run and policy.hook is None
    assert policy.decide(event(event_source="User"), VM, T0).candidate
    paused = "Virtual machine is being paused because of a memory-preserving Live Migration operation."
    migration = event(event_type="Freeze", event_source="Platform", duration_seconds=30, description=paused)
    assert policy.decide(migration, VM, T0).rule == "live-migrations"
    user_after_failure = Classification(Impact.REBOOT, Cause.FAILURE)  # first seen Started: not the owner's
    assert not policy.decide(event(event_source="User"), VM, T0, user_after_failure).candidate
    assert policy.decide(event(event_type="Freeze", event_source="Platform", duration_seconds=8), VM, T0).candidate
    assert not policy.decide(event(event_type="Freeze", event_source="Platform", duration_seconds=9), VM, T0).candidate


def test_the_documented_policies_are_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every policy file docs/approval.md shows loads (hook paths need not exist here)."""
    monkeypatch.setattr("se_exporter.approval.policy.shutil.which", lambda command: "/found")
    text = (DOCS / "approval.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(# /etc/se-exporter/approval.yaml\n.*?)```", text, flags=re.DOTALL)
    assert len(blocks) == 4
    for block in blocks:
        parse_policy(yaml.safe_load(block), "docs/approval.md")


def test_fingerprint_tracks_what_the_policy_does() -> None:
    base = load_policy(TESTDATA / "valid" / "minimal.yaml")
    assert base.fingerprint == replace(base, source="/elsewhere.yaml").fingerprint
    assert base.fingerprint != replace(base, dry_run=True).fingerprint
    assert base.fingerprint != replace(base, rules=(Rule("user", event_sources=("Platform",)),)).fingerprint


# ---- matching ------------------------------------------------------------------------------------

NB = datetime.fromtimestamp(T0 + 900, UTC)  # the default event's NotBefore: 15 min after "now"


def rules(**keys: object) -> tuple[Rule, ...]:
    return (Rule(name="r", **keys),)  # type: ignore[arg-type]


MATCH_TABLE = [
    # (id, rule keys, event overrides, vm name, leader, expected: rule name or skip reason)
    ("type-match", {"event_types": ("Reboot",)}, {}, VM, "first_resource", "r"),
    ("type-mismatch", {"event_types": ("Freeze",)}, {}, VM, "first_resource", NO_RULE),
    ("source-user", {"event_sources": ("User",)}, {}, VM, "first_resource", "r"),
    ("source-platform", {"event_sources": ("User",)}, {"event_source": "Platform"}, VM, "first_resource", NO_RULE),
    ("source-missing-old-api", {"event_sources": ("User",)}, {"event_source": ""}, VM, "first_resource", NO_RULE),
    ("max-equal", {"max_duration_seconds": 8}, {"duration_seconds": 8}, VM, "first_resource", "r"),
    ("max-above", {"max_duration_seconds": 8}, {"duration_seconds": 9}, VM, "first_resource", NO_RULE),
    ("max-zero-impact", {"max_duration_seconds": 8}, {"duration_seconds": 0}, VM, "first_resource", "r"),
    ("max-unknown", {"max_duration_seconds": 8}, {"duration_seconds": -1}, VM, "first_resource", NO_RULE),
    ("min-equal", {"min_duration_seconds": 5}, {"duration_seconds": 5}, VM, "first_resource", "r"),
    ("min-below", {"min_duration_seconds": 5}, {"duration_seconds": 4}, VM, "first_resource", NO_RULE),
    ("min-zero-unknown", {"min_duration_seconds": 0}, {"duration_seconds": -1}, VM, "first_resource", NO_RULE),
    (
        "range-inside",
        {"min_duration_seconds": 1, "max_duration_seconds": 9},
        {"duration_seconds": 5},
        VM,
        "first_resource",
        "r",
    ),
    (
        "and-one-key-fails",
        {"event_types": ("Freeze",), "max_duration_seconds": 8},
        {"event_type": "Reboot", "duration_seconds": 5},
        VM,
        "first_resource",
        NO_RULE,
    ),
    ("within-too-early", {"not_before_within_seconds": 600}, {}, VM, "first_resource", NO_RULE),
    ("within-exactly", {"not_before_within_seconds": 900}, {}, VM, "first_resource", "r"),
    (
        "within-passed",
        {"not_before_within_seconds": 0},
        {"not_before": datetime.fromtimestamp(T0 - 5, UTC)},
        VM,
        "first_resource",
        "r",
    ),
    ("within-no-not-before", {"not_before_within_seconds": 900}, {"not_before": None}, VM, "first_resource", NO_RULE),
    ("max-resources-ok", {"max_resources": 2}, {}, VM, "first_resource", "r"),
    ("max-resources-fleet", {"max_resources": 1}, {}, VM, "first_resource", NO_RULE),
    ("description", {"description_pattern": "requested by authorized user"}, {}, VM, "first_resource", "r"),
    ("description-no", {"description_pattern": "^Host"}, {}, VM, "first_resource", NO_RULE),
    (
        "started",
        {"event_sources": ("User",)},
        {"event_status": "Started", "not_before": None},
        VM,
        "first_resource",
        NOT_SCHEDULED,
    ),
    (
        "unknown-status",
        {"event_sources": ("User",)},
        {"event_status": "Completed"},
        VM,
        "first_resource",
        NOT_SCHEDULED,
    ),
    ("vm-unknown", {"event_sources": ("User",)}, {}, None, "first_resource", VM_NAME_UNKNOWN),
    ("vm-empty", {"event_sources": ("User",)}, {}, "", "first_resource", VM_NAME_UNKNOWN),
    ("not-this-vm", {"event_sources": ("User",)}, {"resources": ("vm-b", "vm-c")}, VM, "first_resource", NOT_THIS_VM),
    ("no-resources", {"event_sources": ("User",)}, {"resources": ()}, VM, "first_resource", NOT_THIS_VM),
    ("not-leader", {"event_sources": ("User",)}, {"resources": ("vm-b", VM)}, VM, "first_resource", NOT_LEADER),
    ("any-listed", {"event_sources": ("User",)}, {"resources": ("vm-b", VM)}, VM, "any_listed", "r"),
    ("any-listed-not-this-vm", {"event_sources": ("User",)}, {"resources": ("vm-b",)}, VM, "any_listed", NOT_THIS_VM),
    ("name-case-insensitive", {"event_sources": ("User",)}, {"resources": ("VM-A",)}, VM, "first_resource", "r"),
    ("unknown-type-kept", {"event_sources": ("User",)}, {"event_type": "Hibernate"}, VM, "first_resource", "r"),
]


@pytest.mark.parametrize(
    ("rule_keys", "overrides", "vm_name", "leader", "expected"),
    [row[1:] for row in MATCH_TABLE],
    ids=[row[0] for row in MATCH_TABLE],
)
def test_decide(
    rule_keys: dict[str, object], overrides: dict[str, object], vm_name: str | None, leader: str, expected: str
) -> None:
    policy = Policy(rules=rules(**rule_keys), leader=leader)
    decision = policy.decide(event(**overrides), vm_name, now=T0)  # type: ignore[arg-type]
    if expected == "r":
        assert decision == Verdict(True, rule="r", detail="rule r matched")
    else:
        assert (decision.candidate, decision.rule, decision.reason) == (False, "", expected)
        assert decision.detail


def test_rules_are_ored_first_match_names_the_rule() -> None:
    policy = Policy(
        rules=(
            Rule("freeze", event_types=("Freeze",)),
            Rule("user", event_sources=("User",)),
            Rule("any-reboot", event_types=("Reboot",)),
        )
    )
    assert policy.decide(event(), VM, T0).rule == "user"
    assert policy.decide(event(event_source="Platform"), VM, T0).rule == "any-reboot"
    assert policy.decide(event(event_type="Freeze"), VM, T0).rule == "freeze"
    assert policy.decide(event(event_type="Preempt", event_source="Platform"), VM, T0).reason == NO_RULE


def test_not_before_within_follows_the_clock() -> None:
    policy = Policy(rules=rules(event_types=("Reboot",), not_before_within_seconds=300))
    assert policy.decide(event(), VM, T0).reason == NO_RULE
    assert policy.decide(event(), VM, T0 + 599).reason == NO_RULE
    assert policy.decide(event(), VM, T0 + 600).candidate
