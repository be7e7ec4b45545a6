"""End-to-end tests: simulator -> exporter -> real Prometheus (shipped rules) -> real Alertmanager -> webhook."""
