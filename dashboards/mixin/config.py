"""What the dashboards and rules share: names, selectors and identifiers, each defined once."""

from __future__ import annotations

from se_exporter.imds.impact import DISRUPTIVE_IMPACTS, PAUSE_IMPACTS, Impact
from se_exporter.metrics.names import PREFIX

# Matches the job of every se-exporter scrape config or PodMonitor/ServiceMonitor we ship and
# the common "<namespace>/se-exporter" job names of the Prometheus Operator.
DEFAULT_JOB_SELECTOR = 'job=~".*se-exporter.*"'
RUNBOOK_BASE = "https://github.com/se-exporter/se-exporter/blob/main/alerts/runbook.md"

# Impacts (se_exporter.imds.impact) after which the VM is not the same running machine: these page; and the
# pauses of seconds, worth a warning (pause) or a note (live_migration), never a page. As label regexes.
DISRUPTIVE = "|".join(DISRUPTIVE_IMPACTS)
PAUSES = "|".join(PAUSE_IMPACTS)
# What neither pages nor warns of itself as "impactful": the pauses and a Freeze of DurationInSeconds 0 (Azure:
# "won't interrupt the VM or impact its availability").
UNDISRUPTIVE = "|".join((*PAUSE_IMPACTS, Impact.NONE))
# A Spot eviction's 30 s notice is always "imminent": the impactful-scheduled alert already pages for it.
IMMINENT = "|".join(impact for impact in DISRUPTIVE_IMPACTS if impact != Impact.EVICTION)

FLEET_UID = "se-exporter-fleet"
VM_UID = "se-exporter-vm"
TAGS = ["se-exporter", "azure", "scheduled-events"]

DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'job=~"$job", instance=~"$instance"'
JOB = 'job=~"$job"'  # for job-level recording rules: they have no instance label


def m(name: str) -> str:
    """A metric's full name."""
    return PREFIX + name
