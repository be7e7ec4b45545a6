"""se-exporter: Prometheus metrics and OTLP logs for Azure Scheduled Events."""

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "azure-scheduled-events-exporter"  # what pip installs; the import name stays se_exporter

try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"
