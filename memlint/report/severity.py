"""How much a finding matters, for the tools that show a level beside it (SARIF, GitHub
annotations, the language server). It follows from what the rule says of the code, not from
a table kept apart from the rules:

- error: the program computes something wrong: the rule's fix is verified by the gradients
  coming out right (missing or misplaced `zero_grad`, fp16 without a `GradScaler`);
- warning: it costs memory or time, or uses an API that is going away (every other default rule);
- note: an opt-in rule, whose harm depends on the context (the verifier decides).
"""

from __future__ import annotations

import enum
from typing import Type

from memlint.rule import Claim, Rule


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


def severity(rule: Type[Rule]) -> Severity:
    if not rule.DEFAULT_ON:
        return Severity.NOTE
    if rule.CLAIM is Claim.GRADIENTS_FIXED:
        return Severity.ERROR
    return Severity.WARNING
