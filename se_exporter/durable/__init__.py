"""Surviving restarts: the state database (``--state.file``), a row per item of every stateful component and
the OTLP log spool's table; the only package that opens, migrates, reads or writes it."""
