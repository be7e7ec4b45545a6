"""What became of one OTLP request, as the OTLP specification sorts answers (both protocols).

- Accepted: the collector took the request; ``rejected`` items of it it refused anyway (a partial
  success): those are never sent again, only counted and reported with the collector's message.
- Refused and ``retryable`` (HTTP 429, 502, 503, 504; gRPC UNAVAILABLE and its kin; a connection that
  failed or timed out): the same data may be sent again later, not before ``retry_after`` (the
  collector's ``Retry-After``, or gRPC ``RetryInfo``) when it gave one.
- Refused and not retryable (any other 4xx or 5xx; gRPC INVALID_ARGUMENT and the like): the same
  request must not be sent again.

``problem`` says why, in words, for the warning an operator reads.
"""

from __future__ import annotations

from dataclasses import dataclass

# Per the OTLP specification; every other 4xx and 5xx must not be retried.
RETRYABLE_HTTP_STATUSES = frozenset({429, 502, 503, 504})
# A collector asking for a longer wait (Retry-After, RetryInfo) is asked again after this, and the warning
# says so: what the spool holds is maintenance happening now, worth little in an hour, and a gateway's
# blanket "Retry-After: 3600" (a rate limit shared with other clients, a maintenance page) should not stop
# delivery for an hour when the collector behind it may be back in minutes. Each attempt is one request.
RETRY_AFTER_CAP_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Outcome:
    accepted: bool
    retryable: bool = True
    retry_after: float | None = None
    rejected: int = 0
    problem: str = ""

    @classmethod
    def taken(cls, rejected: int = 0, message: str = "") -> Outcome:
        problem = f"the collector rejected {rejected} of them: {message or 'no reason given'}" if rejected else ""
        return cls(True, rejected=rejected, problem=problem)

    @classmethod
    def refused(cls, problem: str, *, retryable: bool, retry_after: float | None = None) -> Outcome:
        after = None if retry_after is None else min(max(0.0, retry_after), RETRY_AFTER_CAP_SECONDS)
        if retry_after is not None and retry_after > RETRY_AFTER_CAP_SECONDS:
            problem += f"; it asked to wait {retry_after:.0f} s: asked again after {RETRY_AFTER_CAP_SECONDS:.0f} s"
        return cls(False, retryable=retryable, retry_after=after, problem=problem)


ACCEPTED = Outcome(True)
