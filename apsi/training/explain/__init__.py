"""Explanations above the solving: why a plan came out as it did, and what would move it.

Owns every sentence and what-if figure that explains a plan, for the reference arithmetic and
the frameworks alike; nothing here changes which layout a plan takes:
- apsi.training.explain.reference: the reference plan's Why line, from its binding rule and the what-if
  solves that dropped one rule (apsi.training.reference.planning);
- apsi.training.explain.frameworks: a framework plan's binding rule and Why line (what the target alone
  would need, which cost dominates a step), the runner-up on another GPU type, the Note's words;
- apsi.training.explain.levers: the nearby changes that would move the answer, each solved again as a full
  plan, under every framework.
"""
