"""One schema library for every file an operator writes: the same strictness and messages for each kind.

Table-driven over the three kinds (approval policy, web config, simulator scenario): an unknown key,
a wrong type and a key given twice are each one line naming the file, the key path and the problem.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from se_exporter.approval.policy import load_policy, parse_policy
from se_exporter.config.schema import MAX_CHECKS, decode, field_problem
from se_exporter.config.strict_yaml import load_yaml
from se_exporter.errors import ConfigError
from se_exporter.simulator.scenario import ScenarioError
from se_exporter.simulator.scenario_file import load_scenario_file
from se_exporter.web.config import load_web_config

pytestmark = pytest.mark.pure

POLICY = "rules:\n  - name: r\n    event_sources: [User]\n"
SCENARIO = "events:\n  - {id: e, type: Reboot}\n"
HASH = "$2y$10$" + "a" * 53

Loader = Callable[[Path], object]
KINDS: dict[str, tuple[Loader, str, type[Exception]]] = {
    "policy": (load_policy, "approval config {path}", ConfigError),
    "web": (load_web_config, "web config {path}", ConfigError),
    "scenario": (load_scenario_file, "{path}", ScenarioError),
}

CASES = [
    # (kind, file text, expected "<key path>: <problem>")
    (
        "policy",
        POLICY + "dryrun: true\n",
        "dryrun: unknown key; expected one of: dry_run, leader, group_approvers, rules, hook",
    ),
    (
        "policy",
        POLICY.replace("[User]", "User"),
        'rules[0].event_sources: must be a non-empty list of strings (Platform, User), got "User"',
    ),
    (
        "policy",
        POLICY + "dry_run: true\ndry_run: false\n",
        'not valid YAML: key "dry_run" is given twice in one mapping at line 5',
    ),
    (
        "web",
        "tls_server_config:\n  certfile: x\n",
        "tls_server_config.certfile: unknown key; expected one of: cert_file,",
    ),
    (
        "web",
        "http_server_config:\n  http2: sometimes\n",
        'http_server_config.http2: must be true or false, got "sometimes"',
    ),
    (
        "web",
        "auth_excluded_paths: []\nauth_excluded_paths: []\n",
        'key "auth_excluded_paths" is given twice in one mapping at line 2',
    ),
    ("scenario", SCENARIO + "colour: red\n", "colour: unknown key; expected one of: name, description, events"),
    (
        "scenario",
        "events:\n  - {id: e, type: Reboot, started_for: long}\n",
        'events[0].started_for: must be a number >= 0, got "long"',
    ),
    (
        "scenario",
        "events:\n  - {id: e, type: Reboot, notice: 5, notice: 9}\n",
        'key "notice" is given twice in one mapping at line 2',
    ),
]


@pytest.mark.parametrize(("kind", "text", "expected"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_every_file_kind_names_the_key_path_and_the_problem(
    kind: str, text: str, expected: str, tmp_path: Path
) -> None:
    load, prefix, error = KINDS[kind]
    path = tmp_path / "file.yaml"
    path.write_text(text)
    with pytest.raises(error) as caught:
        load(path)
    message = str(caught.value)
    assert message.startswith(prefix.format(path=path) + ": "), message
    assert expected in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    "users",
    [
        {"alice": HASH[:-1]},
        {"alice": 12345},
        {"al:ice": HASH},
        {"alice": [HASH]},
        {"alice": {"hash": HASH}},
    ],
)
def test_a_bcrypt_hash_never_appears_in_an_error(users: dict[str, object], tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text(msgspec.yaml.encode({"basic_auth_users": users}).decode())
    with pytest.raises(ConfigError) as caught:
        load_web_config(path)
    assert "a" * 40 not in str(caught.value) and "12345" not in str(caught.value)


class _Sample(msgspec.Struct, forbid_unknown_fields=True):
    count: int = 0
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.count > len(self.names):
            raise field_problem("count", f"{self.count} is more than the {len(self.names)} names given")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"count": "2"}, 'x: count: must be an integer, got "2"'),
        ({"count": True}, "x: count: must be an integer, got true (a boolean)"),
        ({"names": ["a", 1]}, "x: names[1]: must be a string, got 1"),
        ({"count": 2, "names": ["a"]}, "x: count: 2 is more than the 1 names given"),
        ([1, 2], "x: (top level): must be a mapping, got [1, 2]"),
        ({"\ud800": 1}, "x: holds text that is not valid Unicode (a lone surrogate)"),
    ],
)
def test_decode_phrases_problems_from_the_schema(data: object, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        decode(data, _Sample, prefix="x")
    assert str(caught.value) == expected


def test_the_strict_loader_is_the_one_every_kind_uses() -> None:
    with pytest.raises(ConfigError, match="given twice"):
        load_yaml("x", "a: 1\na: 2\n")


def test_every_wrong_entry_is_said_and_a_structs_own_checks_at_most_max_checks_times() -> None:
    """A refused file with thousands of wrong rules says each (the schema's types are looked at once per
    struct), and a check of the file as a whole that blames one rule after another stops at ``MAX_CHECKS``
    (each time is a conversion of every rule left)."""
    wrong = {"rules": [{"name": f"r{i}", "event_types": ["Bogus"]} for i in range(5000)]}
    with pytest.raises(ConfigError) as refused:
        parse_policy(wrong, "p.yaml")
    lines = str(refused.value).splitlines()
    assert len(lines) == 5000 and lines[4999].startswith("approval config p.yaml: rules[4999].event_types[0]: must be")
    grouped = {"rules": [{"name": f"r{i}", "event_sources": ["Platform"], "scope": "group"} for i in range(500)]}
    with pytest.raises(ConfigError) as refused:
        parse_policy(grouped, "p.yaml")
    lines = str(refused.value).splitlines()
    assert len(lines) == MAX_CHECKS and all(f"rules[{i}].scope: group needs" in line for i, line in enumerate(lines))
