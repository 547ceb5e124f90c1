"""Refuse to score a searched method on the examples its search was fitted on.

An LPES scale file is the result of a search on some examples of a task
(its fitness set) and was checked on others (its held-out set). Scoring it on
any of them gives a contaminated number: the LPES paper's own Table 1 is
measured on held-out questions. The search records the examples it used as
content fingerprints (`search.examples_used` in the scale file;
`evaluation.tasks.base.source_fingerprint`: the question and answers, or the
items), which do not depend on offsets, distractor seeds or file names. Before
any prompt runs, `check_disjoint` compares them with every task of the run:
an overlap is a one-line refusal naming how many examples, which ranges the
search used and the fix (`--example_offset`), unless the run allows it
(`--allow_search_overlap`), in which case the summary and report say so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class SearchOverlapError(ValueError):
    """A searched method would be scored on examples its search used."""


@dataclass(frozen=True)
class FittedExamples:
    """The examples a method's parameters were searched or fitted on."""

    source: str
    """Where the record is, e.g. `scales/x.json`."""
    task: str
    """The task the search ran (its examples may also appear under another task name, e.g. mdqa_release)."""
    ranges: str
    """The searched ranges as a reader wants them, e.g. 'fitness 0-199 (seed 0), held-out 200-699 (seed 0)'."""
    fingerprints: frozenset[str]

    @classmethod
    def from_record(cls, source: str, record: Mapping[str, Any]) -> FittedExamples:
        """From a scale file's `search.examples_used`."""
        parts = []
        for name, label in (("fitness", "fitness"), ("held_out", "held-out")):
            part = record.get(name)
            if part:
                first, count = int(part["example_offset"]), int(part["num_examples"])
                parts.append(f"{label} {first}-{first + count - 1} (seed {part.get('seed')})")
        return cls(source, str(record["task"]), ", ".join(parts), frozenset(record["fingerprints"]))


def check_disjoint(
    tasks: Sequence[tuple[str, Callable[[], set[str]]]],
    stacks: Sequence[tuple[str, Sequence[Any]]],
    allow: bool = False,
) -> dict[str, dict[str, Any]]:
    """Per method label and task: what its search used and how many of this run's examples it shares.

    `tasks` are (name, a function giving its examples' fingerprints: read only when a method needs
    them), `stacks` (label, methods); a method takes part when it has `fitted_examples()` (LPES: the
    scale file's record). Raises `SearchOverlapError` on any shared example unless `allow`. Methods
    whose file records no examples (hand-made or older) appear with `checked: False`.
    """
    fingerprints: dict[str, set[str]] = {}
    report: dict[str, dict[str, Any]] = {}
    for label, methods in stacks:
        for method in methods:
            hook = getattr(method, "fitted_examples", None)
            if hook is None:
                continue
            fitted = hook()
            entry = report.setdefault(label, {})
            for name, read in tasks:
                if fitted is None:
                    entry[name] = {"checked": False, "reason": "its file records no examples: older or hand-made"}
                    continue
                if name not in fingerprints:  # read once per task, and only when a method needs them
                    fingerprints[name] = read()
                own = fingerprints[name]
                shared = len(own & fitted.fingerprints)
                entry[name] = {
                    "checked": True,
                    "search": f"{fitted.task} {fitted.ranges} ({fitted.source})",
                    "shared_examples": shared,
                    "examples": len(own),
                    "allowed": bool(shared and allow),
                }
                if shared and not allow:
                    raise SearchOverlapError(
                        f"{label}: {shared} of the {len(own)} {name} examples of this run were used by its search "
                        f"({fitted.task} {fitted.ranges} in {fitted.source}); evaluate on others (--example_offset "
                        "past the search's examples, or another --seed for generated tasks), or pass "
                        "--allow_search_overlap to score it anyway"
                    )
    return report


def overlap_lines(report: Mapping[str, Mapping[str, Any]], task: str) -> list[str]:
    """Report sentences for one task: what each searched method's search used, and whether it overlaps."""
    lines = []
    for label, tasks in report.items():
        entry = tasks.get(task)
        if entry is None:
            continue
        if not entry["checked"]:
            lines.append(f"- {label}: not checked for overlap with its search's examples ({entry['reason']}).")
        elif entry["shared_examples"]:
            lines.append(
                f"- {label}: **{entry['shared_examples']} of these {entry['examples']} examples were used by its "
                f"search** ({entry['search']}); scored anyway (--allow_search_overlap): not a held-out number."
            )
        else:
            lines.append(f"- {label}: its search used {entry['search']}; none of these examples (checked).")
    return lines
