"""Formats and helpers every stage shares: times, stable ids, bounded HTTP answers, send outcomes."""
