"""Configuration files are read as YAML 1.2's core schema: a number means what it looks like (issue 22,
Lows: ``max_duration_seconds: 010`` was 8 and ``1:30`` was 90 under PyYAML's YAML 1.1 rules)."""

from __future__ import annotations

import math

import pytest

from se_exporter.approval.policy import parse_policy
from se_exporter.config.strict_yaml import load_yaml
from se_exporter.errors import ConfigError

pytestmark = pytest.mark.pure

SCALARS = [
    ("010", 10),
    ("0o17", 15),
    ("0x1e", 30),
    ("-3", -3),
    ("+4", 4),
    ("8.5", 8.5),
    ("1e3", 1000.0),
    ("1:30", "1:30"),
    ("1_000", "1_000"),
    ("2024-01-01", "2024-01-01"),
    ("0b101", "0b101"),
    ("on", "on"),
    ("off", "off"),
    ("yes", "yes"),
    ("no", "no"),
    ("y", "y"),
    ("true", True),
    ("False", False),
    ("~", None),
    ("null", None),
    ("", None),
    ('"010"', "010"),
]


@pytest.mark.parametrize(("text", "value"), SCALARS)
def test_plain_scalars_follow_the_yaml_1_2_core_schema(text: str, value: object) -> None:
    assert load_yaml("test", f"key: {text}\n") == {"key": value}


def test_infinity_and_nan_are_floats() -> None:
    loaded = load_yaml("test", "a: .inf\nb: -.Inf\nc: .nan\n")
    assert loaded["a"] == math.inf and loaded["b"] == -math.inf and math.isnan(loaded["c"])  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("1:30", 'must be an integer >= 0, got "1:30"'),
        ("yes", 'must be an integer >= 0, got "yes"'),
    ],
)
def test_a_policy_number_written_the_yaml_1_1_way_is_refused_not_reinterpreted(text: str, problem: str) -> None:
    data = load_yaml("test", f"rules:\n  - name: r\n    max_duration_seconds: {text}\n")
    with pytest.raises(ConfigError, match=rf"rules\[0\]\.max_duration_seconds: {problem}"):
        parse_policy(data)
