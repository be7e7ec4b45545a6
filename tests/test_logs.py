"""stderr lines: logfmt values are bare only when a logfmt reader can take them back as they are."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from se_exporter.logs import JSONFormatter, LogfmtFormatter, visible


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


@pytest.mark.parametrize(
    ("value", "shown"),
    [
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
        ("next\x85line", '"next\\u0085line"'),  # NEL: a line break to some readers
        ("para\u2029graph", '"para\\u2029graph"'),
        ("evil\u202etxt.exe", '"evil\\u202etxt.exe"'),  # a right-to-left override turns what follows around
        ("\ufeffbom", '"\\ufeffbom"'),
        ("", '""'),
        (True, "true"),
        (("vm-a", "vm-b"), "vm-a,vm-b"),
        (42, "42"),
    ],
)
def test_logfmt_values(value: object, shown: str) -> None:
    line = logfmt_line(field=value)
    assert f" field={shown}" in line, line
    assert line.split(" ", 3)[1:3] == ["level=info", "logger=se_exporter.test"]
    assert ' msg="hello world" ' in line


@given(st.text())
def test_any_text_reads_back_unchanged_on_one_visible_line(text: str) -> None:
    line = logfmt_line(field=text, after="end")
    assert line.isprintable(), "no control, separator, override or BOM character reaches the terminal"
    assert value_of(line, "field") == text
    assert line.endswith(" after=end")


@given(st.text())
def test_json_lines_are_visible_and_read_back_unchanged(text: str) -> None:
    record = logging.LogRecord("se_exporter.test", logging.INFO, "", 0, "m", (), None)
    record.field = text
    line = JSONFormatter().format(record)
    assert line.isprintable() and json.loads(line)["field"] == text


def general_rule(text: str) -> str:
    """The rule the formatter's short paths must agree with: bare when a reader takes it back as it is."""
    if text and text.isprintable() and not any(c in text for c in ' ="\\'):
        return text
    return visible(json.dumps(text, ensure_ascii=False))


@given(st.text() | st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126)))
def test_the_short_paths_write_what_the_general_rule_writes(text: str) -> None:
    assert value_of(logfmt_line(field=text, after="end"), "field") == text
    assert f" field={general_rule(text)} after=end" in logfmt_line(field=text, after="end")


@given(st.floats(min_value=0, max_value=4e9))
def test_timestamps_are_utc_milliseconds_as_isoformat_writes_them(created: float) -> None:
    record = logging.LogRecord("se_exporter.test", logging.INFO, __file__, 1, "m", None, None)
    record.created = created
    expected = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert LogfmtFormatter().format(record).startswith(f"ts={expected} ")
