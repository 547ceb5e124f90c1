"""The keyword a transformers model takes its KV cache by: `cache` from transformers 5.24, `past_key_values` before.

5.24 renamed the argument of every model and attention forward (the old name
still works, with a FutureWarning, until 5.40). The project's calls pass the
installed version's own name (`cache_argument`), and its own forwards accept
either (`given_cache`), so the same code runs quietly on both sides of the change.
"""

from __future__ import annotations

import inspect
from typing import Any

from transformers.models.olmo2.modeling_olmo2 import Olmo2Model

#: The name the installed transformers' forwards take the cache by.
CACHE_KEYWORD = "cache" if "cache" in inspect.signature(Olmo2Model.forward).parameters else "past_key_values"


def cache_argument(cache: Any) -> dict[str, Any]:
    """`model(..., **cache_argument(cache))`: the cache under the installed version's keyword."""
    return {CACHE_KEYWORD: cache}


def given_cache(past_key_values: Any, kwargs: dict[str, Any]) -> Any:
    """The cache a forward received under either name; takes `cache` out of `kwargs`."""
    cache = kwargs.pop("cache", None)
    return past_key_values if past_key_values is not None else cache
