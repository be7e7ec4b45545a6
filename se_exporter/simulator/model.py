"""Plain data shared by the simulator modules: event plans, live events and the VM identity."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

SPOT_NOTICE = "SpotRebalanceRecommendation"  # a Spot eviction-risk notice, listed Advisory
EVENT_TYPES = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate", SPOT_NOTICE)
EventSourceName = Literal["Platform", "User"]
EVENT_SOURCES: tuple[str, ...] = get_args(EventSourceName)
SCHEDULED = "Scheduled"
STARTED = "Started"
ADVISORY = "Advisory"  # a Spot eviction-risk notice: listed, never started; acknowledging it does nothing

#: Placeholder in ``resources`` replaced by the simulated VM's name when an event appears.
SELF = "self"


@dataclass(frozen=True)
class EventPlan:
    """How one event looks and behaves; durations are simulated seconds.

    ``notice=None`` makes the event appear directly as Started (hardware failure). Otherwise it
    appears Scheduled with ``NotBefore = appearance + notice`` and starts at NotBefore unless it
    is approved, started or cancelled first. It disappears ``started_for`` seconds after starting.

    ``status`` other than Scheduled (``Advisory``: a Spot eviction-risk notice) makes it appear in that
    status, with no NotBefore; it never starts (an approval does nothing to it) and disappears
    ``listed_for`` seconds later.
    """

    event_type: str
    event_source: str = "Platform"
    notice: float | None = 900.0
    duration: int = -1
    started_for: float = 60.0
    resources: tuple[str, ...] = (SELF,)
    description: str = ""
    resource_type: str = "VirtualMachine"
    status: str = SCHEDULED
    listed_for: float = 300.0


@dataclass
class SimEvent:
    """An event currently in the document (mutable; owned and locked by the world)."""

    event_id: str
    plan: EventPlan
    resources: tuple[str, ...]
    status: str
    not_before: float | None  # simulated Unix time; None once Started
    appeared_at: float
    started_at: float | None = None

    def copy(self) -> SimEvent:
        return replace(self)  # every field, also one added later


@dataclass(frozen=True)
class Snapshot:
    """A consistent view of the world at one simulated instant."""

    sim_time: float
    incarnation: int
    events: tuple[SimEvent, ...]


@dataclass(frozen=True)
class SimulatedVM:
    """The simulated VM, as ``/metadata/instance/compute`` describes it."""

    name: str = "sim-vm-0"
    vm_id: str = "00000000-0000-4000-8000-000000000000"
    location: str = "westeurope"
    subscription_id: str = "11111111-2222-4333-8444-555555555555"
    resource_group_name: str = "sim-rg"
    vm_size: str = "Standard_D2s_v5"
    vm_scale_set_name: str = ""
    os_type: str = "Linux"
    zone: str = "1"
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def resource_id(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group_name}"
            f"/providers/Microsoft.Compute/virtualMachines/{self.name}"
        )

    def compute_document(self) -> dict[str, Any]:
        """The subset of IMDS compute metadata clients use, with IMDS's key spelling."""
        return {
            "azEnvironment": "AzurePublicCloud",
            "location": self.location,
            "name": self.name,
            "osType": self.os_type,
            "provider": "Microsoft.Compute",
            "resourceGroupName": self.resource_group_name,
            "resourceId": self.resource_id,
            "subscriptionId": self.subscription_id,
            "tags": ";".join(f"{k}:{v}" for k, v in sorted(self.tags.items())),
            "tagsList": [{"name": k, "value": v} for k, v in sorted(self.tags.items())],
            "vmId": self.vm_id,
            "vmScaleSetName": self.vm_scale_set_name,
            "vmSize": self.vm_size,
            "zone": self.zone,
        }


def new_guid(bits: int) -> str:
    """A version-4 GUID from 128 random bits (the caller owns the random source)."""
    return str(uuid.UUID(int=bits, version=4))
