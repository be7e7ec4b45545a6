"""Hostile input over real HTTP: huge, deep, broken and label-breaking IMDS answers."""
