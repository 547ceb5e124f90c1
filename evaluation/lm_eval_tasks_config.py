"""The options of `python -m evaluation lm-eval tasks` (light: read to parse and check them, before any data)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: The task families the command writes, by the project's task names.
FAMILIES = ("mdqa", "mdqa_release", "kv")
#: A task or group name lm-eval accepts and a file name can hold.
NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass
class LitmTasks:
    """Lost in the Middle as lm-eval tasks: one task per gold position, a group per family, one group of all."""

    out: str
    """folder to write the task YAMLs, their data and the scoring module into (lm-eval's --include_path)"""
    data_dir: str | None = None
    """folder of the release's files: nq-open-oracle*.jsonl(.gz) (mdqa), nq-open-{k}_total_documents_gold_at_{i}
    .jsonl(.gz) anywhere under it (mdqa_release), kv-retrieval-{num_keys}_keys.jsonl(.gz) (kv); none = the small
    sample shipped with the package (mdqa and kv only)"""
    families: str = "auto"
    """comma-separated task families (mdqa, mdqa_release, kv), or 'auto': every one whose file is in the folder"""
    num_documents: int = 20
    """k of mdqa and mdqa_release: documents per prompt (the release's files: 10, 20, 30)"""
    num_keys: int = 75
    """pairs per kv prompt (the release's files: 75, 140, 300)"""
    gold_positions: str = "ends-20-50-80"
    """gold positions of mdqa and kv: a grid (ends-20-50-80, quartiles, all) or comma-separated 0-based ints;
    mdqa_release has one task per release file found for k (its positions are the release's)"""
    num_examples: int | None = None
    """source questions (examples) per task; none = all"""
    example_offset: int = 0
    """source examples skipped first (e.g. those an LPES search used)"""
    seed: int = 0
    """seed of mdqa's distractor draws (as `evaluation run --seed`)"""
    prefix: str = "litm"
    """first part of every task and group name: the group of all is PREFIX, a family's PREFIX_mdqa_k20 etc."""

    def __post_init__(self) -> None:
        """The values judged before any file is read (a ValueError is the one-line refusal)."""
        if not self.out:
            raise ValueError("--out is empty: pass the folder to write the task files into")
        if self.data_dir is not None and not Path(self.data_dir).is_dir():
            raise ValueError(f"--data_dir {self.data_dir}: no such folder; pass the folder holding the release's files")
        names = [name.strip() for name in self.families.split(",") if name.strip()]
        unknown = [name for name in names if name not in (*FAMILIES, "auto")]
        if unknown or not names or ("auto" in names and len(names) > 1):
            raise ValueError(f"--families {self.families!r}: give 'auto' or some of {', '.join(FAMILIES)}")
        self.family_list = list(FAMILIES) if names == ["auto"] else list(dict.fromkeys(names))
        self.auto = names == ["auto"]
        for option in ("num_documents", "num_keys"):
            value = getattr(self, option)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"--{option} must be an int >= 1, got {value!r}")
        if self.num_examples is not None and self.num_examples < 1:
            raise ValueError(f"--num_examples must be >= 1 (or none for all), got {self.num_examples}")
        if self.example_offset < 0:
            raise ValueError(f"--example_offset must be >= 0, got {self.example_offset}")
        if not NAME.fullmatch(self.prefix):
            raise ValueError(
                f"--prefix {self.prefix!r}: use lower-case letters, digits and '_', starting with a letter"
            )
        self.position_spec = positions_spec(self.gold_positions)


def positions_spec(text: str) -> str | list[int]:
    """'--gold_positions' as the tasks take it: a grid name, or the list of ints it lists."""
    if re.fullmatch(r"[0-9]+(,[0-9]+)*", text.replace(" ", "")):
        return [int(part) for part in text.replace(" ", "").split(",")]
    if not re.fullmatch(r"[a-z0-9-]+", text):
        raise ValueError(f"--gold_positions {text!r}: give a grid (ends-20-50-80, quartiles, all) or 0-based ints")
    return text
