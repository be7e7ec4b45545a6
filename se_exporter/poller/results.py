"""What the poll loop hands on and what it needs: its status (and the poll errors' reasons, and what to check
when IMDS cannot be reached), one poll's result, and the protocols of the sinks, the approver and the
actions runner (so that none of them imports the loop)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from se_exporter.actions.runs import ActionOutcome
from se_exporter.approval.ledger import ApprovalDecision
from se_exporter.imds.document import Document
from se_exporter.imds.identity import VMIdentity
from se_exporter.lifecycle.transitions import EventState, Transition

_NAMELESS = VMIdentity()
POLL_ERROR_REASONS = ("timeout", "connection", "http_4xx", "http_5xx", "throttled", "invalid_document")
UNREACHABLE = (
    "IMDS cannot be reached: is this an Azure VM? On AKS, the IMDS restriction (an agent pool with "
    "podLinkLocalAccess: None) blocks pods without host networking (the Helm chart's hostNetwork: true); "
    "IMDS must not be reached through a proxy, nor blocked by a firewall or a NetworkPolicy"
)


@dataclass(frozen=True, slots=True)
class PollStatus:
    """What the poll loop last achieved; replaced as a whole, so readers need no lock."""

    up: bool = False  # the last poll succeeded
    last_success: float | None = None  # Unix time of the last good poll
    identity: VMIdentity = _NAMELESS
    errors: Mapping[str, int] = field(default_factory=lambda: MappingProxyType(dict.fromkeys(POLL_ERROR_REASONS, 0)))
    api_version: str = ""  # the Scheduled Events api-version of the last good poll ("" before the first)

    @property
    def ready(self) -> bool:
        return self.last_success is not None

    @property
    def unreachable(self) -> bool:
        """IMDS never answered at all: no poll succeeded, and every one failed to connect or timed out."""
        answered = any(self.errors[reason] for reason in ("http_4xx", "http_5xx", "throttled", "invalid_document"))
        tried = self.errors["connection"] or self.errors["timeout"]
        return self.last_success is None and not answered and bool(tried)

    @property
    def readiness(self) -> bool | str:
        """True once IMDS answered; else why not, with what to check when IMDS was never reached at all."""
        if self.last_success is not None:
            return True
        if self.unreachable:
            return f"Not ready: {UNREACHABLE}"
        return "Not ready: no successful IMDS poll yet"


@dataclass(frozen=True, slots=True)
class PollResult:
    """What one poll found, for every sink: facts in the order they happened."""

    document: Document
    transitions: Sequence[Transition]
    decisions: Sequence[ApprovalDecision]  # made on this document: after its transitions
    changed: bool  # the document differed from the previous one
    identity: VMIdentity
    now: float
    settled: Sequence[ApprovalDecision] = ()  # work that ended before the document was read: before them
    actions: Sequence[ActionOutcome] = ()  # actions that ended (or were refused) since the last poll

    @property
    def all_decisions(self) -> Sequence[ApprovalDecision]:
        return [*self.settled, *self.decisions] if self.settled else self.decisions


class PollSink(Protocol):
    def on_poll(self, result: PollResult) -> None: ...


class Decider(Protocol):
    """The approver, seen from the loop: it decides on every good poll and never blocks it. It returns
    (work settled before the document was read, decisions made on it)."""

    def on_poll(
        self, events: Sequence[EventState], vm_name: str | None
    ) -> tuple[Sequence[ApprovalDecision], Sequence[ApprovalDecision]]: ...

    def close(self) -> Sequence[ApprovalDecision]: ...


class Reactor(Protocol):
    """The actions, seen from the loop: runs queued per poll, started once the state is saved, never blocking."""

    def on_poll(self, transitions: Sequence[Transition], identity: VMIdentity) -> Sequence[ActionOutcome]: ...

    def release(self) -> None: ...

    def waiting(self) -> bool: ...

    def startable(self) -> bool: ...

    def close(self) -> Sequence[ActionOutcome]: ...
