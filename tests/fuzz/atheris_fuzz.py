"""Coverage-guided fuzzing with atheris (libFuzzer for Python), when it is installed.

    python -m tests.fuzz.documents /tmp/corpus      # the document target's seeds, from the simulator
    python -m tests.fuzz.atheris_fuzz document -runs=100000 -artifact_prefix=/tmp/ /tmp/corpus
    python -m tests.fuzz.atheris_fuzz policy -max_total_time=600

Targets: ``document`` (the IMDS parser and everything downstream of it; its inputs are mutated as
JSON documents, see :mod:`tests.fuzz.documents`), ``policy`` (the approval
policy file), ``web_config`` (``--web.config.file``), ``state`` (the state file's event store). Only
the typed errors may escape (``InvalidDocument``, ``ConfigError``); anything else is a crash, written
by libFuzzer as ``crash-<sha1>`` under ``-artifact_prefix``. ``test_atheris.py`` runs each target for
a bounded number of inputs in the normal suite.
"""

from __future__ import annotations

import functools
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from se_exporter.approval.policy import parse_policy
    from se_exporter.audit.records import encode_record, transition_record
    from se_exporter.config.strict_yaml import load_yaml
    from se_exporter.durable.persistence import Persistence
    from se_exporter.errors import ConfigError, InvalidDocument
    from se_exporter.imds.document import VMIdentity, parse_document
    from se_exporter.lifecycle import EventStore
    from se_exporter.lifecycle.machine import TABLES
    from se_exporter.poller import PollStatus
    from se_exporter.web.config import parse_web_config
    from tests.fuzz.documents import mutate
    from tests.support.exposition import render

IDENTITY = VMIdentity(name="vm-a")


@functools.cache
def _state_file() -> Path:
    """The state target's file, in a directory of its own under ``TMPDIR`` (test_atheris.py gives its tmp_path)."""
    return Path(tempfile.mkdtemp(prefix="atheris-state-")) / "state.db"


def _render(store: EventStore) -> None:
    render(store, status=PollStatus(identity=IDENTITY))


def document(data: bytes) -> None:
    try:
        parsed = parse_document(data)
    except InvalidDocument:
        return
    store = EventStore()
    for transition in store.reconcile(parsed, 1_700_000_000.0):
        encode_record(transition_record(transition, IDENTITY))
    _render(store)


def _text(data: bytes) -> str:
    return str(atheris.FuzzedDataProvider(data).ConsumeUnicodeNoSurrogates(len(data)))


def policy(data: bytes) -> None:
    try:
        parse_policy(load_yaml("approval config fuzz.yaml", _text(data)), "fuzz.yaml")
    except ConfigError:
        return


def web_config(data: bytes) -> None:
    try:
        parse_web_config(_text(data), source="fuzz-web.yml", base_dir=Path("/nonexistent"))
    except ConfigError:
        return


def state(data: bytes) -> None:
    """Any JSON as the store's section of a state file: restoring never raises, and what is kept renders."""
    try:
        section = json.loads(data)
    except (ValueError, RecursionError):
        return
    try:
        _state_file().write_text(json.dumps({"version": 1, "sections": {"store": section}}))
    except (ValueError, RecursionError):  # nested deeper than json.dumps goes: not a file we could have written
        return
    persistence = Persistence(_state_file())
    store = persistence.restore("store", TABLES, EventStore.from_rows, EventStore)
    persistence.close()
    _render(store)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "document": document,
    "policy": policy,
    "web_config": web_config,
    "state": state,
}


def document_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    return mutate(data, max_size, seed, atheris.Mutate)


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        sys.exit(f"usage: python -m tests.fuzz.atheris_fuzz {{{','.join(TARGETS)}}} [libFuzzer flags]")
    name = argv[1]
    if name == "document" and "--bytes-only" not in argv:  # --bytes-only: libFuzzer's mutations alone
        atheris.Setup([argv[0], *argv[2:]], TARGETS[name], custom_mutator=document_mutator)
    else:
        atheris.Setup([argv[0], *(a for a in argv[2:] if a != "--bytes-only")], TARGETS[name])
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
