"""Ships spooled records, oldest first, until the collector takes them, as the OTLP specification says.

A thread takes a batch from the spool, hands it to ``send`` (``otel/pipeline.py``: one ``export()`` of the
chosen exporter, sorted into an ``Outcome``), acknowledges it when the collector took it and otherwise
decides by the answer. Nothing leaves the spool unacknowledged but what the collector refuses for good, so
an outage of any length (or a restart in the middle of one) costs latency, not records.

- Taken, perhaps partly: acknowledged; what the collector rejected anyway (a partial success) is counted
  as dropped and said, with the collector's message (it is never sent again).
- Refused, retryable (an outage, 429, 503…): tried again after a pause growing to two minutes, never
  sooner than the collector asked (``Retry-After``). The batch is halved.
- Refused, not retryable (400…): that request is never sent again. A batch is halved at once; a record
  refused alone is tried against an empty request: if the collector takes that, the record is
  undeliverable (too large for this collector, say) and set aside, counted and logged; if it refuses
  even that (401, 403, 404: the configuration), the records wait and it is tried again every two
  minutes, each kind of refusal logged once as an error.

While export fails, every attempt starts with an empty request: an outage never costs the conversion of a
batch, and a collector that comes back between two attempts does not make a record look undeliverable. A
batch is bounded in bytes as well as in records (a collector refuses requests over its limit, 4 MiB for
gRPC by default). The first batch after a start is small (``FIRST_BATCH_SIZE``), and each batch taken
doubles the next up to ``OTEL_BLRP_MAX_EXPORT_BATCH_SIZE`` (512 records cost about 1.8 MiB of peak memory
as the SDK's records and protobuf's request): a collector that takes them has the full batch after five
requests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from se_exporter.audit.records import AuditRecord
from se_exporter.durable.spool import Spool
from se_exporter.imds.client import Backoff
from se_exporter.otel.answers import Outcome

log = logging.getLogger(__name__)
BATCH_SIZE = 512  # OTEL_BLRP_MAX_EXPORT_BATCH_SIZE's default
FIRST_BATCH_SIZE = 32
# Of records (their approximate size in a request): well under the collectors' request limits, and what a
# batch costs while the SDK and protobuf convert it is several times this (1 MiB held 5 MiB at a restart
# with the largest records waiting: tests/hostile/test_memory_bounds.py).
MAX_BATCH_BYTES = 256 << 10
RETRY_BASE_SECONDS = 1.0
# A dead collector costs one attempt every two minutes at most, however long the outage; a collector
# that comes back after a short outage is used within seconds.
RETRY_CAP_SECONDS = 120.0

Send = Callable[[Sequence[AuditRecord]], Outcome]  # an empty batch asks only whether it answers at all


class LogShipper:
    def __init__(
        self,
        spool: Spool[AuditRecord],
        send: Send,
        *,
        abort: Callable[[], None] = lambda: None,  # makes an in-flight send give up (shutdown)
        monotonic: Callable[[], float] = time.monotonic,
        batch_size: int = BATCH_SIZE,  # OTEL_BLRP_MAX_EXPORT_BATCH_SIZE
    ) -> None:
        self._spool = spool
        self._send = send
        self._abort = abort
        self._backoff = Backoff(base=RETRY_BASE_SECONDS, cap=RETRY_CAP_SECONDS)
        self._monotonic = monotonic
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="se-exporter-log-shipper", daemon=True)
        self._failing_since: float | None = None
        self._full_batch = batch_size
        # Halved while batches fail, doubled by each one taken: small after a start or an outage.
        self._batch_size = min(batch_size, FIRST_BATCH_SIZE)
        self._refused_alone = ""  # the uid of the record last refused (retryably) in a batch of its own
        self._said = ""  # the last refusal or partial success reported, so each kind is said once

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
                fate = f"; the spool {self._spool.path} could not be written (disk full?): those not written are lost"
            else:
                fate = "; they are sent after the next start"
            log.warning("stopping with %d log record(s) not yet accepted by the collector%s", left, fate)
        return left == 0

    def _run(self) -> None:
        while True:
            batch = self._next_batch()  # committed records only: a record is on disk before it is shipped
            if not batch:
                if self._stopping.is_set():
                    return
                self._spool.wait()  # append() and stop() wake it: an idle shipper costs nothing
                continue
            pause, tried = self._attempt(batch), len(batch)
            del batch  # held neither through a pause nor through the next sync: the spool keeps the records
            if pause is None:  # done with this batch
                self._batch_size = min(self._full_batch, self._batch_size * 2)
                continue
            self._batch_size = max(1, tried // 2)  # one record may be what the collector refuses
            if self._stopping.is_set():  # flushing at shutdown: the last attempt failed
                return
            if pause:
                self._stopping.wait(pause)

    def _next_batch(self) -> list[AuditRecord]:
        """The oldest records, at most ``_batch_size`` and ``MAX_BATCH_BYTES`` (at least one record)."""
        batch: list[AuditRecord] = []
        size = 0
        for record in self._spool.peek(self._batch_size, MAX_BATCH_BYTES):
            size += record.approximate_size
            if batch and size > MAX_BATCH_BYTES:
                break
            batch.append(record)
        return batch

    def _attempt(self, batch: list[AuditRecord]) -> float | None:
        """None when the batch is done with (taken, or its one record set aside), else the pause before the
        next attempt (0: at once, with a smaller batch)."""
        record, alone, probed = batch[0], len(batch) == 1, False
        # Failing (an outage, or this record refused alone last time): an empty request first, so that an
        # outage costs one small request, never the conversion of a batch (a 3.5 MB record is several copies).
        if self._failing_since is not None or (alone and record.uid == self._refused_alone):
            probe = self._send_safely([])
            if not probe.accepted:
                return self._not_taken(probe)
            probed = True
        outcome = self._send_safely(batch)
        if outcome.accepted:
            self._delivered(batch, outcome)
            return None
        if not alone:  # not the same request again: a smaller one (at once if this one is refused for good)
            return self._failed(outcome) if outcome.retryable else 0.0
        if outcome.retryable:  # the collector says "later" (a memory_limiter takes an empty request, not data)
            self._refused_alone = record.uid
            return self._failed(outcome)
        if not probed:  # refused for good: does the collector take anything at all?
            probe = self._send_safely([])
            if not probe.accepted:
                return self._not_taken(probe)
        self._set_aside(record, outcome)  # it takes requests, and refuses this record: it never will take it
        return None

    def _not_taken(self, probe: Outcome) -> float:
        """Even an empty request was refused: an outage (retryable), or the configuration (not)."""
        if probe.retryable:
            return self._failed(probe)
        self._say(
            log.error,
            f"OTLP log export refused, not retried until the configuration changes "
            f"({probe.problem}): records wait in the spool; tried again every {RETRY_CAP_SECONDS:.0f} s",
        )
        return RETRY_CAP_SECONDS

    def _send_safely(self, batch: Sequence[AuditRecord]) -> Outcome:
        try:
            return self._send(batch)
        except Exception as error:  # a bug in the conversion must not kill the thread: keep the records
            log.exception("exporting %d log record(s) failed unexpectedly", len(batch))
            return Outcome.refused(f"{type(error).__name__}: {error}", retryable=True)

    def _delivered(self, batch: Sequence[AuditRecord], outcome: Outcome) -> None:
        self._spool.ack([record.uid for record in batch])
        if outcome.rejected:  # never sent again (the specification says so): counted, and said
            self._spool.count_dropped(min(outcome.rejected, len(batch)))
            self._say(
                log.warning,
                f"OTLP log export: the collector took {len(batch)} record(s) but rejected "
                f"{outcome.rejected} ({outcome.problem}); counted as dropped",
            )
        self._backoff.reset()
        self._refused_alone = ""
        if self._failing_since is not None:
            log.info(
                "OTLP log export works again after %.0f s; %d record(s) left to send",
                self._monotonic() - self._failing_since,
                self._spool.depth,
            )
            self._failing_since = None

    def _failed(self, outcome: Outcome) -> float:
        if self._failing_since is None:
            self._failing_since = self._monotonic()
            log.warning(
                "OTLP log export failing (%s): %d record(s) kept in the spool and retried",
                outcome.problem,
                self._spool.depth,
            )
        return max(self._backoff.next_delay(), outcome.retry_after or 0.0)

    def _set_aside(self, record: AuditRecord, outcome: Outcome) -> None:
        self._spool.set_aside(record.uid)
        self._refused_alone = ""
        log.error(
            "OTLP log record %s (%s, about %d bytes) was refused by the collector while it answers "
            "other requests (%s): set aside as undeliverable (it is in this log: %s)",
            record.uid,
            record.event_name,
            record.approximate_size,
            outcome.problem,
            record.body[:200],
        )

    def _say(self, level: Callable[..., None], message: str) -> None:
        if message != self._said:
            level("%s", message)
            self._said = message
