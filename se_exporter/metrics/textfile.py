"""``--textfile.path``: the exporter's series in a file for node_exporter's textfile collector.

prometheus_client's ``write_to_textfile`` does the writing: the text format into ``FILE.<pid>.<thread>``
beside FILE, then a rename over it, so node_exporter (which reads only ``*.prom``) never sees half a file.
We decide when: once at start (a directory where no file can be made is a start-up error) and after every poll,
on a thread of its own, so a slow disk never delays a poll; polls that end while a write is under way
are written once, by the next write, with the newest snapshot.

Only the ``azure_scheduled_events_*`` families go in the file: node_exporter serves its own ``process_*``
and Go series, and the same names from a textfile would clash with them.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from prometheus_client import CollectorRegistry, write_to_textfile

from se_exporter.errors import os_problem

log = logging.getLogger("se_exporter.textfile")
JOIN_SECONDS = 5.0  # at stop, how long a write under way may take before the last one is given up


class TextfileWriter:
    """Register the snapshot collector in ``registry`` (private: what is registered there is what is written)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.registry = CollectorRegistry(auto_describe=False)
        self.errors = 0  # failed writes, for azure_scheduled_events_persistence_errors_total{file="textfile"}
        self.writes = 0  # successful ones
        self._due = threading.Event()
        self._stopping = threading.Event()
        self._failing: str | None = None
        self._thread = threading.Thread(target=self._run, name="textfile", daemon=True)

    def probe(self) -> None:
        """Whether a file can be made where the writes make theirs (raises OSError): checked before anything
        starts, so the mistake is the only line printed, and without touching the file node_exporter reads."""
        probe = Path(f"{self.path}.{os.getpid()}.probe")
        probe.open("xb").close()
        probe.unlink()

    def start(self) -> None:
        """Write after every poll from now on."""
        self._thread.start()

    def poll_done(self) -> None:
        """A poll ended: write the file soon (never waits)."""
        self._due.set()

    def close(self) -> None:
        """Write the last snapshot and stop. The file stays: node_exporter keeps serving it, so the last
        successful poll's timestamp ages and AzureScheduledEventsExporterStale says the exporter is gone."""
        self._stopping.set()
        self._due.set()
        if self._thread.is_alive():
            self._thread.join(JOIN_SECONDS)
        if not self._thread.is_alive():
            self.write()

    def write(self) -> bool:
        try:
            write_to_textfile(str(self.path), self.registry)
        except OSError as error:
            self.errors += 1
            problem = os_problem(error)
            if problem != self._failing:  # one line per streak, not one per poll
                log.warning("cannot write the textfile %s (retried after every poll): %s", self.path, problem)
                self._failing = problem
            return False
        self.writes += 1
        if self._failing is not None:
            log.info("the textfile %s is written again", self.path)
            self._failing = None
        return True

    def _run(self) -> None:
        while True:
            self._due.wait()
            if self._stopping.is_set():
                return
            self._due.clear()
            self.write()
