"""This VM's identity, from IMDS compute metadata (or ``--vm.name``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from se_exporter.errors import InvalidDocument


@dataclass(frozen=True, slots=True)
class VMIdentity:
    name: str | None = None  # as it appears in an event's Resources
    vm_id: str = ""
    location: str = ""
    subscription_id: str = ""
    resource_id: str = ""
    vm_size: str = ""
    vm_scale_set_name: str = ""

    def affects(self, resources: tuple[str, ...]) -> str:
        """``affects_this_vm`` label value: "true", "false", or "unknown" without a name."""
        if not self.name:
            return "unknown"
        return "true" if self.name.lower() in (r.lower() for r in resources) else "false"


def parse_compute(body: bytes) -> VMIdentity:
    """Parse ``/metadata/instance/compute``; unknown or missing fields are left empty."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise InvalidDocument(f"compute metadata is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        raise InvalidDocument("compute metadata has no VM name")
    return VMIdentity(
        name=data["name"],
        vm_id=_text(data, "vmId"),
        location=_text(data, "location"),
        subscription_id=_text(data, "subscriptionId"),
        resource_id=_text(data, "resourceId"),
        vm_size=_text(data, "vmSize"),
        vm_scale_set_name=_text(data, "vmScaleSetName"),
    )


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""
