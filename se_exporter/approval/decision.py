"""An approval decision: the fact the approver hands to the sinks (metrics, audit trail)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from se_exporter.imds.document import ScheduledEvent


class ApprovalResult(StrEnum):
    APPROVED = "approved"  # POST StartRequests succeeded
    DRY_RUN = "dry_run"  # would have been approved; dry_run is on
    FAILED = "failed"  # the POST failed
    HOOK_FAILED = "hook_failed"  # the pre-approval hook failed or timed out
    EXPIRED = "expired"  # NotBefore passed before the approval could be carried out: nothing was POSTed
    UNKNOWN = "unknown"  # the exporter died while the POST was sent (or about to be): never sent again
    SKIPPED = "skipped"  # not approvable (logged once, never counted)


COUNTED_RESULTS = (
    ApprovalResult.APPROVED,
    ApprovalResult.DRY_RUN,
    ApprovalResult.FAILED,
    ApprovalResult.HOOK_FAILED,
    ApprovalResult.EXPIRED,
    ApprovalResult.UNKNOWN,
)


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    event: ScheduledEvent
    result: ApprovalResult
    rule: str  # the matching rule ("" for most skips)
    reason: str  # "<code or what happened>: <details>"
    post_latency_seconds: float | None  # approved/failed: the POST call, including the client's retries
    at: float  # Unix time of the decision

    @property
    def counted(self) -> bool:
        """True when it counts in approvals_total (everything but ``skipped``)."""
        return self.result is not ApprovalResult.SKIPPED
