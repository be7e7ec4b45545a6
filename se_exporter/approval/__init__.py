"""Auto-approval of Scheduled Events under an explicit, audited policy (``--approval.config``).

Off unless a policy file is given: ``policy`` reads it and gives a verdict on each event, ``approver`` decides on every
poll and hands its decisions to the sinks, ``hook`` runs the pre-approval command, ``poster`` sends the
POSTs, ``ledger`` remembers what was decided across restarts. See docs/approval.md for the safety model.
Nothing is imported here, so the decision types cost nothing when approval is off.
"""
