"""What the dashboards and rules share: names, selectors and identifiers, each defined once."""

from __future__ import annotations

from dataclasses import dataclass

from se_exporter.imds.impact import DISRUPTIVE_IMPACTS, PAUSE_IMPACTS, Impact
from se_exporter.metrics.counters import PREFIX

# Matches the job of every se-exporter scrape config or PodMonitor/ServiceMonitor we ship and
# the common "<namespace>/se-exporter" job names of the Prometheus Operator.
DEFAULT_JOB_SELECTOR = 'job=~".*se-exporter.*"'
# With --textfile.path the series come through node_exporter's scrape: the job Prometheus' guides give it.
TEXTFILE_JOB_SELECTOR = 'job="node"'
RUNBOOK_BASE = "https://github.com/se-exporter/se-exporter/blob/main/alerts/runbook.md"

# Impacts (se_exporter.imds.impact) after which the VM is not the same running machine, as a label regex.
DISRUPTIVE = "|".join(DISRUPTIVE_IMPACTS)
# What is never "impactful": the pauses of seconds and a Freeze of DurationInSeconds 0 (Azure: "won't
# interrupt the VM or impact its availability").
UNDISRUPTIVE = "|".join((*PAUSE_IMPACTS, Impact.NONE))
# What may page (alerts/runbook.md, "Paging policy"): the VM restarts or moves, for a reason nobody chose.
PAGED_IMPACTS = "|".join((Impact.REBOOT, Impact.REDEPLOY))
PAGED_CAUSES = "platform|failure"

# The target labels that name a group of machines, not one (docs/deploy.md tells users to add them): kept by
# every job-level aggregation so that routes, inhibitions and dashboard filters can use them. Per-machine
# rules aggregate "without" their own labels and keep every target label.
GROUP_LABELS = ("cluster", "region", "resource_group", "vmss")


@dataclass(frozen=True)
class Settings:
    """The mixin's settings: generate.py's flags."""

    job_selector: str = DEFAULT_JOB_SELECTOR
    # Paging policy (alerts/runbook.md): how long before NotBefore an unapproved platform Reboot or Redeploy
    # of this VM pages. Azure gives a Reboot about 15 minutes of notice, a Redeploy about 10.
    page_lead_seconds: int = 900
    # A maintenance wave: at least this many VMs of one job (and cluster) with disruptive maintenance Scheduled.
    wave_min_vms: int = 5
    # kube-state-metrics' daemonset label of the exporter's DaemonSets (the chart's and the kustomization's).
    daemonset_regex: str = ".*se-exporter.*"
    # The series come through node_exporter's textfile collector (--textfile.path): an exporter is up while the
    # node_exporter that serves its file is, counted only where its series were seen within a day.
    textfile: bool = False

    @property
    def lead_words(self) -> str:
        minutes, seconds = divmod(self.page_lead_seconds, 60)
        return f"{minutes} minutes" if not seconds else f"{self.page_lead_seconds} seconds"


FLEET_UID = "se-exporter-fleet"
VM_UID = "se-exporter-vm"
TAGS = ["se-exporter", "azure", "scheduled-events"]

DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'job=~"$job", instance=~"$instance"'
JOB = 'job=~"$job"'  # for job-level recording rules: they have no instance label


def m(name: str) -> str:
    """A metric's full name."""
    return PREFIX + name
