"""se-exporter: Prometheus metrics and OTLP logs for Azure Scheduled Events."""

# The one place the version is written: pyproject.toml reads it ([tool.setuptools.dynamic]), the
# release workflow tags and labels the image with it, and `se-exporter --version` prints it without
# reading installed metadata (importlib.metadata alone would double the command's start-up time).
__version__ = "0.2.0"
