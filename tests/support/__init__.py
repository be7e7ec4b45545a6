"""Shared test harness: the exporter as a subprocess, a scriptable IMDS, waiting with deadlines."""
