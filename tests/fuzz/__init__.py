"""Fuzzing with hypothesis (and atheris when installed): only typed errors escape."""
