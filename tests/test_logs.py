"""stderr lines: logfmt values are bare only when a logfmt reader can take them back as they are."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from se_exporter.logs import LogfmtFormatter


def logfmt_line(**extra: object) -> str:
    """What ``log.info("hello world", extra=extra)`` writes (without touching the process's loggers)."""
    record = logging.LogRecord("se_exporter.test", logging.INFO, __file__, 1, "hello world", None, None)
    record.__dict__.update(extra)
    return LogfmtFormatter().format(record)


def value_of(line: str, key: str) -> str:
    rest = line.split(f" {key}=", 1)[1]
    if rest.startswith('"'):
        decoded, _ = json.JSONDecoder().raw_decode(rest)
        return str(decoded)
    return rest.split(" ", 1)[0]


@pytest.mark.parametrize(("value", "shown"), [
    ("Reboot", "Reboot"),
    ("vm-a,vm-b", "vm-a,vm-b"),
    ("Überwartung", "Überwartung"),
    ("two words", '"two words"'),
    ("a=b", '"a=b"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("back\\slash", '"back\\\\slash"'),
    ("line\nbreak", '"line\\nbreak"'),
    ("tab\there", '"tab\\there"'),
    ("bell\x07", '"bell\\u0007"'),
    ("", '""'),
    (True, "true"),
    (("vm-a", "vm-b"), "vm-a,vm-b"),
    (42, "42"),
])
def test_logfmt_values(value: object, shown: str) -> None:
    line = logfmt_line(field=value)
    assert f" field={shown}" in line, line
    assert line.split(" ", 3)[1:3] == ["level=info", "logger=se_exporter.test"]
    assert ' msg="hello world" ' in line


@given(st.text())
def test_any_text_reads_back_unchanged(text: str) -> None:
    line = logfmt_line(field=text, after="end")
    assert "\n" not in line
    assert value_of(line, "field") == text
    assert line.endswith(" after=end")
