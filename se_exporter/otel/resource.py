"""What se-exporter knows of itself and of this VM, as OpenTelemetry resource attributes (no OpenTelemetry
import: the pipeline merges them under what the SDK reads from the environment)."""

from __future__ import annotations

from se_exporter.imds.identity import VMIdentity

DEFAULT_SERVICE_NAME = "se-exporter"


def resource_attributes(identity: VMIdentity | None, version: str) -> dict[str, str]:
    """What se-exporter knows of itself and this VM (compute metadata); ``OTEL_RESOURCE_ATTRIBUTES`` and
    ``OTEL_SERVICE_NAME``, read by the SDK, win over it. ``cloud.*`` only when compute metadata was read."""
    detected = {"service.name": DEFAULT_SERVICE_NAME, "service.version": version}
    if identity is not None:
        detected |= {"host.name": identity.name or "", "host.id": identity.vm_id, "host.type": identity.vm_size}
        if identity.vm_id:
            detected |= {
                "cloud.provider": "azure",
                "cloud.platform": "azure.vm",
                "cloud.region": identity.location,
                "cloud.account.id": identity.subscription_id,
                "cloud.resource_id": identity.resource_id,
                "azure.vm.scaleset.name": identity.vm_scale_set_name,
            }
    return {key: value for key, value in detected.items() if value}
