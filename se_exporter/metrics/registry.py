"""The exporter's registry: a private ``CollectorRegistry``, never prometheus_client's global one.

It holds the snapshot collector (every ``azure_scheduled_events_*`` family) and client_python's own
process, platform and GC collectors (``process_*``, ``python_info``, ``python_gc_*``), which every
client_python exporter shows. ``process_*`` comes from ``/proc`` and is absent where there is none
(Windows).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.registry import Collector


def exporter_registry(collector: Collector) -> CollectorRegistry:
    # auto_describe=False: the snapshot collector describes itself (its names, for name[] filters), and
    # the registry must not collect it at registration, before the first poll.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
