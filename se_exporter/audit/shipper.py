"""Ships spooled records, oldest first, until the collector accepts them.

A thread takes a batch from the spool, hands it to ``send`` (telemetry.py: an OTLP exporter's
``export()`` called directly, so no SDK queue can drop anything), acknowledges it on success and
retries it with a backoff growing to two minutes on failure. Nothing leaves the spool unacknowledged, so an outage
of any length (or a restart in the middle of one) costs latency, not records; only the spool's
bound can drop, and it counts what it drops.

A batch is bounded in bytes as well as in records (a collector refuses requests over its limit, 4 MiB
for gRPC by default, and would refuse the same batch for ever). A failing batch is halved at each
attempt. A record refused alone is tried next time after an empty request: if the collector takes that
and still refuses the record right after, the record is undeliverable (too large for this collector,
say): it is set aside, counted as dropped and logged, never a stuck queue. Three details matter, each
caught by a test: the probe carries no record, so no record ever overtakes an older one (probing with
the next record delivered it first when the collector came back in between); the record is tried
again after the probe, so a collector that comes back between two attempts does not make it look
undeliverable (the soak lost one so); and during an outage an attempt is still one request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from se_exporter.audit.records import AuditRecord
from se_exporter.audit.spool import Spool
from se_exporter.imds.pacing import Backoff

log = logging.getLogger(__name__)
BATCH_SIZE = 256
MAX_BATCH_BYTES = 1 << 20  # well under the collectors' request limits, however long the descriptions
RETRY_BASE_SECONDS = 1.0
# A dead collector costs one attempt every two minutes at most, however long the outage; a collector
# that comes back after a short outage is used within seconds.
RETRY_CAP_SECONDS = 120.0

# True once the collector accepted the whole batch; an empty batch asks only whether it answers at all.
Send = Callable[[Sequence[AuditRecord]], bool]


class LogShipper:
    def __init__(
        self,
        spool: Spool,
        send: Send,
        *,
        abort: Callable[[], None] = lambda: None,  # makes an in-flight send give up (shutdown)
        backoff: Backoff | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._spool = spool
        self._send = send
        self._abort = abort
        self._backoff = backoff or Backoff(base=RETRY_BASE_SECONDS, cap=RETRY_CAP_SECONDS)
        self._monotonic = monotonic
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="se-exporter-log-shipper", daemon=True)
        self._failing_since: float | None = None
        self._batch_size = BATCH_SIZE  # halved while batches fail, back to BATCH_SIZE after a success
        self._refused_alone = ""  # the uid of the record last refused in a batch of its own

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float) -> bool:
        """Send what is pending for up to ``timeout`` seconds, then stop; True if the spool is empty.

        One last attempt is made even while the collector is failing (it may just have come back);
        records it cannot send stay in the spool (on disk with ``--state.file``) for the next start.
        """
        deadline = self._monotonic() + timeout
        self._stopping.set()
        self._spool.wake()
        self._thread.join(max(0.0, deadline - self._monotonic()))
        if self._thread.is_alive():  # a send is stuck on a dead collector: make it give up
            self._abort()
            self._thread.join(1.0)
        self._spool.close()
        left = self._spool.depth
        if left:
            if self._spool.path is None:
                fate = " (lost: no --state.file)"
            elif not self._spool.synced:  # the truth, not a promise the disk did not keep
                fate = f"; the spool {self._spool.path} could not be written (disk full?): they are lost"
            else:
                fate = "; they are sent after the next start"
            log.warning("stopping with %d log record(s) not yet accepted by the collector%s", left, fate)
        return left == 0

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if not batch:
                if self._stopping.is_set():
                    return
                self._spool.wait()  # append() and stop() wake it: an idle shipper costs nothing
                continue
            if self._attempt(batch):
                self._batch_size = BATCH_SIZE
                continue
            self._batch_size = max(1, len(batch) // 2)  # one record may be what the collector refuses
            if self._stopping.is_set():  # flushing at shutdown: the last attempt failed
                return
            self._stopping.wait(self._backoff.next_delay())

    def _next_batch(self) -> list[AuditRecord]:
        """The oldest records, at most ``_batch_size`` and ``MAX_BATCH_BYTES`` (at least one record)."""
        batch: list[AuditRecord] = []
        size = 0
        for record in self._spool.peek(self._batch_size):
            size += record.approximate_size
            if batch and size > MAX_BATCH_BYTES:
                break
            batch.append(record)
        return batch

    def _attempt(self, batch: list[AuditRecord]) -> bool:
        """True when the batch is done with: accepted, or one record set aside as undeliverable."""
        record = batch[0]
        if len(batch) > 1 or record.uid != self._refused_alone:
            if self._ship(batch):
                return True
            if len(batch) == 1:
                self._refused_alone = record.uid
            return False
        # It was refused alone last time. An empty request tells an outage (refused too: one request
        # per attempt, as before) from a record this collector will never take (the request is taken).
        if not self._send_safely([]):
            return False
        if self._ship(batch):  # the collector just came back (an outage ending): not the record's fault
            return True
        self._spool.set_aside(record.uid)
        log.error("OTLP log record %s (%s, about %d bytes) was refused by the collector while it answers "
                  "other requests: set aside as undeliverable (it is in this log: %s)", record.uid,
                  record.event_name, record.approximate_size, record.body[:200])
        return True

    def _send_safely(self, batch: Sequence[AuditRecord]) -> bool:
        try:
            return self._send(batch)
        except Exception:  # a bug in the conversion must not kill the thread: keep the records
            log.exception("exporting %d log record(s) failed unexpectedly", len(batch))
            return False

    def _ship(self, batch: Sequence[AuditRecord]) -> bool:
        if not self._send_safely(batch):
            if self._failing_since is None:
                self._failing_since = self._monotonic()
                log.warning("OTLP log export failing: %d record(s) kept in the spool and retried",
                            self._spool.depth)
            return False
        self._spool.ack([record.uid for record in batch])
        self._backoff.reset()
        if self._failing_since is not None:
            log.info("OTLP log export works again after %.0f s; %d record(s) left to send",
                     self._monotonic() - self._failing_since, self._spool.depth)
            self._failing_since = None
        return True
