"""The audit trail: a record per transition and approval decision, as stderr lines and through a
durable spool to OTLP."""
