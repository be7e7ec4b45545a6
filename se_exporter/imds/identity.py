"""This VM's identity, from IMDS compute metadata (or ``--vm.name``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import msgspec

from se_exporter.errors import InvalidDocument


class VMIdentity(msgspec.Struct, frozen=True):
    name: str | None = None  # as it appears in an event's Resources
    vm_id: str = ""
    location: str = ""
    subscription_id: str = ""
    resource_id: str = ""
    vm_size: str = ""
    vm_scale_set_name: str = ""

    def affects(self, resources: Sequence[str]) -> bool | None:
        """Whether an event listing ``resources`` affects this VM; None while this VM's name is unknown.

        Azure resource names are case-insensitive, so the comparison is too.
        """
        if not self.name:
            return None
        name = self.name.casefold()
        return any(resource.casefold() == name for resource in resources)


class _Compute(msgspec.Struct, rename="camel"):
    """The fields of ``/metadata/instance/compute`` we use; others are ignored, odd types are blanked."""

    name: Annotated[str, msgspec.Meta(min_length=1)]
    vm_id: object = ""
    location: object = ""
    subscription_id: object = ""
    resource_id: object = ""
    vm_size: object = ""
    vm_scale_set_name: object = ""


def parse_compute(body: bytes) -> VMIdentity:
    """Parse ``/metadata/instance/compute``; unknown or missing fields are left empty."""
    try:
        data = msgspec.json.decode(body, type=_Compute)
    except msgspec.ValidationError:
        raise InvalidDocument("compute metadata has no VM name") from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidDocument(f"compute metadata is not JSON: {exc}") from None
    return VMIdentity(
        name=data.name,
        vm_id=_text(data.vm_id),
        location=_text(data.location),
        subscription_id=_text(data.subscription_id),
        resource_id=_text(data.resource_id),
        vm_size=_text(data.vm_size),
        vm_scale_set_name=_text(data.vm_scale_set_name),
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
