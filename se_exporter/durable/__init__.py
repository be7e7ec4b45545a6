"""Surviving restarts: atomic file writes and the state file with one section per stateful component."""
