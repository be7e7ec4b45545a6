"""Prometheus metrics: counters fed by the poll results, and the collector that renders a snapshot at scrape time."""
