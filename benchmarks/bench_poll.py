"""Cost per poll, fetch excluded: parse + reconcile + transitions, for 0..1000 events.

In-process, on synthetic documents as IMDS writes them (RFC 1123 NotBefore, every field):

- ``unchanged``: the same body again (the 1 Hz steady state). ``core``: parse, ``is_unchanged`` → skip;
  ``pipeline``: the client sees equal bytes and hands back the previous Document, which the store
  recognises (no parse).
- ``one change``: DocumentIncarnation + 1 and one event replaced by another (a cancelled and a
  scheduled transition): parse + full reconcile + 2 transitions.
- ``all new``: every event first seen (N scheduled transitions): the worst case.

``core`` times ``parse_document`` + ``EventStore.is_unchanged``/``reconcile``; ``pipeline`` times
``Poller.poll_once`` of the real ``Exporter`` wiring (OTel off) whose client's HTTP fetch is replaced
by a stub handing over the body (``IMDSClient.get_document`` itself runs): parse, reconcile,
transition metrics, every sink (transition log lines formatted into memory, lifecycle spans, ...),
health; i.e. everything but the HTTP fetch; with
``gc.freeze()`` after the wiring, as the CLI does after start-up (the ``core`` cells run before it). For
``all new`` an untimed poll of an empty document removes every event before each timed one.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import logging
import time
from collections.abc import Callable, Iterator
from email.utils import formatdate
from typing import Any, cast

from benchmarks.common import FedClient, Mode, Report, percentile, refusing_port

NAME = "poll"
SIZES = (0, 1, 10, 100, 500, 1000)  # up to MAX_EVENTS, the most a document may list (docs/reliability.md)
TYPES = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
BASE_TIME = 1_900_000_000


def make_body(size: int, incarnation: int, variant: int = 0) -> bytes:
    """A Scheduled Events document of ``size`` events; ``variant`` renames the last event."""
    events = []
    for index in range(size):
        suffix = f"v{variant}" if index == size - 1 else "v0"
        events.append(
            {
                "EventId": f"{index:08X}-1B2C-4D3E-8F40-{suffix}{index:010d}"[:36],
                "EventType": TYPES[index % len(TYPES)],
                "ResourceType": "VirtualMachine",
                "Resources": [f"vm-{index % 3}", "vm-self"],
                "EventStatus": "Scheduled",
                "NotBefore": formatdate(BASE_TIME + 900 + index, usegmt=True),
                "Description": "Host server is undergoing maintenance.",
                "EventSource": "Platform",
                "DurationInSeconds": 9,
            }
        )
    return json.dumps({"DocumentIncarnation": incarnation, "Events": events}).encode()


def _time(fn: Callable[[], Any], repeats: int) -> list[float]:
    samples = []
    clock = time.perf_counter_ns
    for _ in range(repeats):
        began = clock()
        fn()
        samples.append((clock() - began) / 1000.0)  # μs
    return samples


def _core_cases(size: int) -> dict[str, tuple[Callable[[], Any], Callable[[], None]]]:
    from se_exporter.imds.document import parse_document
    from se_exporter.lifecycle import EventStore

    steady = make_body(size, 1)
    bodies = [make_body(size, 2 + i, variant=i % 2) for i in range(2)]
    state: dict[str, Any] = {}

    def unchanged() -> None:
        document = parse_document(steady)
        if not state["store"].is_unchanged(document):
            state["store"].reconcile(document, 1.0)

    def setup_unchanged() -> None:
        state["store"] = EventStore()
        state["store"].reconcile(parse_document(steady), 0.0)

    def one_change() -> None:
        state["i"] += 1  # alternates two documents: incarnation and the last EventId differ
        document = parse_document(bodies[state["i"] % 2])
        if not state["store"].is_unchanged(document):
            state["store"].reconcile(document, 2.0)

    def setup_one_change() -> None:
        state["store"] = EventStore()
        state["store"].reconcile(parse_document(bodies[0]), 0.0)
        state["i"] = 0

    def all_new() -> None:
        store = EventStore()
        document = parse_document(steady)
        if not store.is_unchanged(document):
            store.reconcile(document, 1.0)

    return {
        "unchanged": (unchanged, setup_unchanged),
        "one change": (one_change, setup_one_change),
        "all new": (all_new, lambda: None),
    }


@contextlib.contextmanager
def wired_exporter(environ: dict[str, str] | None = None, **options: Any) -> Iterator[Any]:
    """The real ``Exporter`` wiring (every sink, logging to memory), its poller fed by a stub client;
    ``options`` are more ``ExporterConfig`` fields (``actions_config``, ``state_file``...)."""
    from se_exporter import logs
    from se_exporter.app import Exporter
    from se_exporter.config.options import ExporterConfig
    from se_exporter.imds.client import IMDSClient

    logs.configure("info", "logfmt", stream=io.StringIO())  # every line formatted in full, written nowhere

    imds = f"http://127.0.0.1:{refusing_port()}"  # nothing answers: the poller's client is fed below
    config = ExporterConfig(listen_host="127.0.0.1", listen_port=0, imds_url=imds, vm_name="vm-self", **options)
    exporter = Exporter(config, environ=environ)
    exporter.start()
    exporter.poller.client = cast(IMDSClient, FedClient(exporter.poller.client))
    gc.freeze()  # as cli.run_exporter does once the exporter is built: start-up objects out of full collections
    try:
        yield exporter
    finally:
        gc.unfreeze()
        exporter.close()


def _pipeline_cases(size: int, exporter: Any) -> dict[str, tuple[Callable[[], Any], Callable[[], None]]]:
    poller, client = exporter.poller, exporter.poller.client
    # Two equal but distinct bytes objects, alternated: as in production, where every response is a fresh
    # object, the client's "same body" check compares the bytes (memcmp) instead of hitting identity.
    steady_copies = [make_body(size, 1), make_body(size, 1)]
    steady = steady_copies[0]
    bodies = [make_body(size, 2 + i, variant=i % 2) for i in range(2)]
    empty = [make_body(0, 100 + i) for i in range(2)]
    state = {"i": 0}

    def poll(body: bytes) -> None:
        client.body = body
        if poller.poll_once() is not None:
            raise RuntimeError("poll failed")

    def unchanged() -> None:
        state["i"] += 1
        poll(steady_copies[state["i"] % 2])

    def one_change() -> None:
        state["i"] += 1  # alternates two documents: incarnation and the last EventId differ
        poll(bodies[state["i"] % 2])

    def all_new() -> None:
        state["i"] += 1
        poll(empty[state["i"] % 2])  # untimed below: every event removed, so the next poll sees all new

    return {
        "unchanged": (unchanged, lambda: poll(steady)),
        "one change": (one_change, lambda: poll(bodies[0])),
        "all new": (lambda: poll(steady), all_new),
    }


def _measure(
    fn: Callable[[], Any], setup: Callable[[], None], budget: float, minimum: int, setup_each: bool
) -> list[float]:
    setup()
    fn()  # warm
    if setup_each:
        setup()
    probe = []
    for _ in range(5):
        probe += _time(fn, 1)
        if setup_each:
            setup()
    repeats = int(min(20000, max(minimum, budget / max(percentile(probe, 50) / 1e6, 1e-7))))
    gc.collect()
    if not setup_each:
        setup()
        return _time(fn, repeats)
    samples = []
    for _ in range(repeats):
        setup()
        samples += _time(fn, 1)
    return samples


def run(mode: Mode) -> Report:
    report = Report(NAME)
    budget = mode.pick(2.0, 0.5, 0.02)  # seconds of timing per cell, roughly
    minimum = mode.pick(200, 50, 5)
    rows = []
    data: dict[str, Any] = {"unit": "microseconds", "cells": []}

    def record(layer: str, size: int, case: str, samples: list[float]) -> None:
        p50, p99 = percentile(samples, 50), percentile(samples, 99)
        rows.append([layer, size, case, round(p50, 1), round(p99, 1), len(samples)])
        data["cells"].append(
            {
                "layer": layer,
                "events": size,
                "case": case,
                "p50_us": p50,
                "p99_us": p99,
                "mean_us": sum(samples) / len(samples),
                "repeats": len(samples),
            }
        )

    sizes = SIZES if mode.name != "tiny" else SIZES[:4]
    for size in sizes:
        for case, (fn, setup) in _core_cases(size).items():
            record("core", size, case, _measure(fn, setup, budget, minimum, setup_each=False))
    try:
        with wired_exporter() as exporter:
            for size in sizes:
                for case, (fn, setup) in _pipeline_cases(size, exporter).items():
                    samples = _measure(fn, setup, budget, minimum, setup_each=case == "all new")
                    record("pipeline", size, case, samples)
    finally:
        logging.getLogger("se_exporter").handlers[:] = [logging.NullHandler()]
    report.table("Cost per poll, fetch excluded (μs)", ["layer", "events", "case", "p50 μs", "p99 μs", "repeats"], rows)
    report.data = data
    return report
