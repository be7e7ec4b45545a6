"""Tests and helpers for se-exporter's Prometheus rules, Alertmanager example and Grafana dashboards."""
