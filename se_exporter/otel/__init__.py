"""OpenTelemetry: configuration from OTEL_* variables, the SDK pipeline (the only SDK importer), lifecycle spans."""
