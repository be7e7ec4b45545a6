"""se-exporter's own footprint, measured side by side with Microsoft's plain polling loop.

Run ``python -m benchmarks`` (``--quick`` for ~2 minutes, ``--only NAME`` for one); see BENCHMARKS.md.
"""
