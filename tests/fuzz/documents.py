"""A seed corpus of real IMDS documents and a structure-aware mutator for the ``document`` fuzz target.

Random bytes are almost never a JSON object with a ``DocumentIncarnation``, so a byte-level fuzzer stays
in the decoder's first error path (7 edges after 3.5 million runs). The seeds are what the simulator
serves while it plays every built-in scenario, at each API version the exporter knows; the mutator
parses an input as JSON and changes one thing a real or broken IMDS could change (a field's value or
type, an event duplicated or dropped, a NotBefore in another format), falling back to libFuzzer's byte
mutations for inputs that are not JSON (and, now and then, for those that are).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from se_exporter.simulator import SimWorld, builtin_names, builtin_scenario
from se_exporter.simulator.clock import ManualClock
from se_exporter.simulator.imds import malformed_body, render_scheduled_events
from se_exporter.simulator.model import SimulatedVM

API_VERSIONS = ("2017-11-01", "2019-08-01", "2020-07-01")
STEP_SECONDS = 60.0
MAX_STEPS = 200
BROKEN = ("truncated", "wrong_types", "missing_event_id")

FIELD_VALUES: dict[str, list[Any]] = {
    "DocumentIncarnation": [0, 1, -1, 2**31, 2**63, 2**64, 1.5, True, "7", None],
    "EventType": ["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate", "LiveMigration", "", 3, None],
    "EventStatus": ["Scheduled", "Started", "Completed", "Canceled", "", None, []],
    "ResourceType": ["VirtualMachine", "", "Other", 1],
    "Resources": [[], ["vm-a"], ["vm-a", "vm-a"], ["x" * 600], "vm-a", [1], [None], None],
    "NotBefore": [
        "",
        "Mon, 19 Sep 2016 18:29:47 GMT",
        "Mon, 19 Sep 16 18:29:47 GMT",
        "2016-09-19T18:29:47Z",
        "2016-09-19T18:29:47.123+02:00",
        "9999-12-31T23:59:59Z",
        "Fri, 31 Dec 9999 23:59:59 GMT",
        "tomorrow",
        0,
        None,
    ],
    "EventSource": ["Platform", "User", "", "Other", 0],
    "Description": ["", "Host server is undergoing maintenance.", "\u2028\x00", 1],
    "DurationInSeconds": [-1, 0, 5, 9, 2**40, -(2**40), 1.5, "5", None],
    "EventId": ["", "x", "602d9444-d2cd-49c7-8624-8643e7171297", "a" * 600, "\x00", 1, None],
}


def simulator_documents() -> Iterator[bytes]:
    """Every distinct document the simulator serves while playing each built-in scenario, per API version,
    and a few broken variants of them (truncated, wrong types, an event without its id)."""
    seen: set[bytes] = set()
    for name in builtin_names():
        for version in API_VERSIONS:
            clock = ManualClock()
            world = SimWorld(vm=SimulatedVM(name="vm-a"), clock=clock)
            world.play(builtin_scenario(name))
            for _ in range(MAX_STEPS):
                world.tick()
                document = render_scheduled_events(world.snapshot(), version, clock)
                body = json.dumps(document).encode()
                if body not in seen:
                    seen.add(body)
                    yield body
                    for variant in BROKEN:
                        yield malformed_body(document, variant)[0]
                if not document["Events"] and len(seen) > 1:
                    break
                clock.advance(STEP_SECONDS)


def write_corpus(directory: Path) -> int:
    """The seed corpus as files in ``directory``; returns how many."""
    count = 0
    for count, body in enumerate(simulator_documents(), start=1):
        (directory / f"simulator-{count:04d}.json").write_bytes(body)
    return count


def mutate(data: bytes, max_size: int, seed: int, byte_mutation: Callable[[bytes, int], bytes]) -> bytes:
    """One structural change to a JSON document, or libFuzzer's byte mutation for anything else."""
    rng = random.Random(seed)
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        document = None
    if not isinstance(document, dict) or rng.random() < 0.1:
        return byte_mutation(data, max_size)
    _change(document, rng)
    mutated = json.dumps(document, ensure_ascii=rng.random() < 0.5).encode()
    return mutated if len(mutated) <= max_size else byte_mutation(data, max_size)


def _change(document: dict[str, Any], rng: random.Random) -> None:
    events = document.get("Events")
    if not isinstance(events, list) or not events or rng.random() < 0.2:
        _set_field(document, "DocumentIncarnation", rng)
        if rng.random() < 0.3:
            document["Events"] = rng.choice([[], {}, None, "x", [{}], events])
        return
    index = rng.randrange(len(events))
    action = rng.randrange(4)
    if action == 0 and isinstance(events[index], dict):
        _set_field(events[index], rng.choice(list(FIELD_VALUES)), rng)
    elif action == 1:
        events.insert(rng.randrange(len(events) + 1), json.loads(json.dumps(events[index])))  # a duplicate
    elif action == 2:
        del events[index]
    elif isinstance(events[index], dict) and events[index]:
        del events[index][rng.choice(list(events[index]))]  # a field missing


def _set_field(target: dict[str, Any], field: str, rng: random.Random) -> None:
    target[field] = rng.choice(FIELD_VALUES[field])


if __name__ == "__main__":
    import sys

    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    print(f"{write_corpus(folder)} seed documents in {folder}")
