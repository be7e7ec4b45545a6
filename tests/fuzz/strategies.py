"""Hypothesis strategies for hostile inputs: JSON-ish values, IMDS-shaped documents with wrong types,
dates at the edges of the calendar, YAML-shaped configuration values."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

# Text that exercises escaping: quotes, backslashes, braces, newlines, NUL, non-BMP, lone surrogates.
NASTY_CHARS = st.sampled_from(
    [
        '"',
        "\\",
        "{",
        "}",
        "\n",
        "\r",
        "\t",
        "\x00",
        "=",
        ",",
        " ",
        "…",
        "\U0001f600",
        "\ud800",
        "\u2028",
        "a",
        "Z",
        "9",
        "-",
    ]
)
nasty_text = st.lists(NASTY_CHARS, max_size=12).map("".join) | st.text(max_size=40)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | nasty_text
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(nasty_text, children, max_size=4),
    max_leaves=20,
)

_ISO = st.datetimes().map(lambda d: d.isoformat())
_RFC = st.datetimes().map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT"))
_OFFSETS = st.sampled_from(["", "Z", "+00:00", "-01:00", "+14:00", "-23:59", " +0100", " -0100", "+99:99"])
edge_dates = st.sampled_from(
    [
        "0001-01-01T00:00:00",
        "9999-12-31T23:59:59",
        "Mon, 01 Jan 0001 00:00:00",
        "Fri, 31 Dec 9999 23:59:59",
        "2024-02-30T00:00:00",
        "Mon, 32 Jan 2024 00:00:00",
    ]
)
not_before = st.tuples(_ISO | _RFC | edge_dates, _OFFSETS).map("".join) | nasty_text | st.just("") | json_values


def _maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the right type, sometimes anything at all."""
    return st.one_of(valid, valid, valid, json_values)


events = st.fixed_dictionaries(
    {},
    optional={
        "EventId": _maybe(nasty_text.filter(bool)),
        "EventType": _maybe(st.sampled_from(["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate", "Live"])),
        "EventStatus": _maybe(st.sampled_from(["Scheduled", "Started", "Completed"])),
        "ResourceType": _maybe(st.just("VirtualMachine")),
        "Resources": _maybe(st.lists(nasty_text, max_size=3)),
        "NotBefore": not_before,
        "Description": _maybe(nasty_text),
        "EventSource": _maybe(st.sampled_from(["Platform", "User", ""])),
        "DurationInSeconds": _maybe(st.integers(min_value=-2, max_value=2**40)),
    },
)
documents = st.fixed_dictionaries(
    {},
    optional={"DocumentIncarnation": _maybe(st.integers()), "Events": _maybe(st.lists(events, max_size=5))},
)


def encoded(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")


def nested(depth: int, opener: str = "[") -> bytes:
    closer = {"[": "]", "{": "}"}[opener]
    if opener == "{":
        return ('{"a":' * depth + "1" + "}" * depth).encode()
    return (opener * depth + closer * depth).encode()


# YAML-ish configuration values: what a policy or web config file may parse into.
config_scalars = st.none() | st.booleans() | st.integers() | st.floats() | nasty_text
config_values = st.recursive(
    config_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12) | st.integers(), children, max_size=4)
    ),
    max_leaves=20,
)
