"""se-exporter: Prometheus metrics and OTLP logs for Azure Scheduled Events."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("se-exporter")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"
