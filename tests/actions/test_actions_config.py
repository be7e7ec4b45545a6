"""The actions file: what a valid one holds, and one line naming the key path for every mistake."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from se_exporter.actions.config import DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT_SECONDS, load_actions, parse_actions
from se_exporter.errors import ConfigError
from se_exporter.lifecycle.transitions import TransitionKind
from tests.support.readme import DOCS, code_blocks

TESTDATA = Path(__file__).resolve().parents[1] / "testdata" / "actions"
PREFIX = "actions config <actions>: "
MINIMAL = {"name": "a", "transitions": ["scheduled"], "command": ["true"]}


@pytest.mark.posix
def test_the_docs_example_loads_with_its_defaults() -> None:
    actions = load_actions(TESTDATA / "notify.yaml")
    (notify,) = actions.actions
    assert (notify.name, notify.timeout_seconds, actions.concurrency) == ("notify-team", 30.0, 4)
    assert notify.transitions[-1] is TransitionKind.CANCELLED and notify.affects_this_vm is True


def documented_actions() -> list[tuple[str, dict[str, object]]]:
    """Every action docs/actions.md and docs/design.md show: the YAML files and the one-line configurations in
    the scripts' headers."""
    found = []
    for path in (DOCS / "actions.md", DOCS / "design.md"):
        text = path.read_text(encoding="utf-8")
        for block in code_blocks(text, "yaml"):
            if isinstance(data := yaml.safe_load(block), dict) and isinstance(data.get("actions"), list):
                found += [(path.name, action) for action in data["actions"]]
        for block in code_blocks(text, "sh"):
            header = "".join(line.lstrip("#").strip() + " " for line in block.splitlines()[1:4] if line.startswith("#"))
            if (start := header.find("actions: [")) >= 0:
                config = header[start : header.index("}]", start) + 2]
                found += [(path.name, action) for action in yaml.safe_load(config)["actions"]]
    return found


def test_every_documented_action_speaks_only_for_this_vm() -> None:
    """Azure's docs: events of an availability set or a placement group go to every VM of it; check Resources.
    The issue's case: the Slack example on WestNO_1 posted "WestNO_1: Reboot scheduled" for WestNO_0's Reboot."""
    actions = documented_actions()
    assert {name for _, action in actions for name in [action["name"]]} >= {"notify-team", "slack", "cordon"}
    assert [(doc, action["name"]) for doc, action in actions if action.get("affects_this_vm") is not True] == []


@pytest.mark.posix
def test_every_key_loads() -> None:
    actions = load_actions(TESTDATA / "every-key.yaml")
    cordon, updates = actions.actions
    assert (
        cordon.affects_this_vm is True
        and cordon.inherit_env == ("NODE_NAME",)
        and cordon.causes == ("platform", "user")
    )
    assert (updates.timeout_seconds, actions.concurrency) == (DEFAULT_TIMEOUT_SECONDS, 2)
    assert parse_actions({"actions": [MINIMAL]}).concurrency == DEFAULT_CONCURRENCY


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "actions: is required"),
        ({"actions": []}, "actions: must be a non-empty list of actions"),
        ({"actions": [MINIMAL], "extra": 1}, "extra: unknown key; expected one of: actions, concurrency"),
        ({"actions": [MINIMAL], "concurrency": 0}, "concurrency: must be an integer >= 1 and <= 64, got 0"),
        ({"actions": [{**MINIMAL, "transitions": ["rebooted"]}]}, "actions[0].transitions[0]: must be one of"),
        ({"actions": [{**MINIMAL, "transitions": []}]}, "actions[0].transitions: must be"),
        ({"actions": [{**MINIMAL, "impacts": ["outage"]}]}, "actions[0].impacts[0]: must be one of"),
        ({"actions": [{**MINIMAL, "causes": ["bad luck"]}]}, "actions[0].causes[0]: must be one of"),
        ({"actions": [{**MINIMAL, "affects_this_vm": "yes"}]}, "actions[0].affects_this_vm: must be"),
        ({"actions": [{**MINIMAL, "timeout_seconds": 0}]}, "actions[0].timeout_seconds: must be a number of seconds"),
        ({"actions": [{**MINIMAL, "timeout_seconds": "30"}]}, "actions[0].timeout_seconds: must be"),
        ({"actions": [{**MINIMAL, "command": []}]}, "actions[0].command: must be"),
        ({"actions": [{**MINIMAL, "name": "two words"}]}, "actions[0].name: must be"),
        ({"actions": [{**MINIMAL, "colour": "red"}]}, "actions[0].colour: unknown key"),
        (
            {"actions": [{**MINIMAL, "transitions": ["started", "started"]}]},
            'actions[0].transitions[1]: "started" is listed twice',
        ),
        ({"actions": [MINIMAL, MINIMAL]}, 'actions[1].name: "a" is used by an earlier action; names must be unique'),
        (
            {"actions": [{**MINIMAL, "inherit_env": ["SE_EVENT_ID"]}]},
            'actions[0].inherit_env[0]: "SE_EVENT_ID" is set by',
        ),
        (
            {"actions": [{**MINIMAL, "command": ["/nonexistent/notify"]}]},
            'actions[0].command[0]: "/nonexistent/notify" is not an executable',
        ),
    ],
)
def test_a_mistake_is_one_line_naming_the_key(data: object, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_actions(data)
    assert str(caught.value).startswith(PREFIX + message), str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_empty_file_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "actions.yaml"
    empty.write_text("# nothing yet\n")
    with pytest.raises(ConfigError, match="the file is empty; it needs at least one action"):
        load_actions(empty)
