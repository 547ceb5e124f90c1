"""`PolicyMethod`: a method that swaps the per-layer position policies while attached (PI, LPES, Ms-PoE).

Its own module because it needs the model core (torch): `evaluation.methods.base` stays importable by a
command that only parses its options.
"""

from __future__ import annotations

from dataclasses import dataclass

from evaluation.methods.base import Method
from repo_train.modeling import PositionPolicy
from repo_train.modeling.swapping import current_policies, restore_policies, swap_policies


@dataclass
class PolicyMethod(Method):
    """A method that swaps the per-layer position policies while attached (PI, LPES): subclasses build them.

    A new training-free position method is a dataclass subclass defining
    `layer_policies`, plus `@register_method`; attach/detach swap and restore
    through `repo_train.modeling.swapping`.
    """

    def layer_policies(self, model, current: list[PositionPolicy]) -> list[PositionPolicy]:
        """The policy of each layer while attached, given the installed ones (`current`, one per layer)."""
        raise NotImplementedError

    def attach(self, model, tokenizer) -> None:
        self._saved = swap_policies(model, self.layer_policies(model, current_policies(model)))

    def detach(self, model) -> None:
        restore_policies(model, self._saved)
        del self._saved
