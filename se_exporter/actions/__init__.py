"""Actions on transitions (``--actions.config``): the operator's commands, run in the background."""
