"""Auto-approval of Scheduled Events under an explicit, audited policy (``--approval.config``).

Off unless a policy file is given. ``load_policy`` validates it at start-up; ``Approver.on_poll`` is
called after every successful poll. See README-approval.md for the policy and the safety model.
"""

from se_exporter.approval.approver import ApprovalDecision, Approver
from se_exporter.approval.hook import HookResult, HookRunner
from se_exporter.approval.policy import Decision, Hook, Policy, Rule, load_policy, parse_policy
from se_exporter.approval.poster import PostStartRequests
from se_exporter.approval.state import COUNTED_RESULTS

__all__ = [
    "COUNTED_RESULTS",
    "ApprovalDecision",
    "Approver",
    "Decision",
    "Hook",
    "HookResult",
    "HookRunner",
    "Policy",
    "PostStartRequests",
    "Rule",
    "load_policy",
    "parse_policy",
]
