"""Values as text: strict JSON whose non-finite numbers become ``null`` with their reasons
(:func:`strict_json`)."""
from __future__ import annotations

import json
import math
from typing import Any

# The key a dict written by :func:`strict_json` gains for its values that were not finite numbers.
NULL_REASONS = "null_reasons"


def strict_json(value: Any, indent: int | None = None) -> str:
    """``value`` as strict JSON (RFC 8259 has no NaN or Infinity, and strict parsers refuse
    them): a float that is not finite is written as ``null``, and the dict holding it gains
    ``"null_reasons": {key: "not a number" | "infinite"}``, so a reader can tell why it is missing."""
    return json.dumps(_finite(value), indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        out = {key: _finite(item) for key, item in value.items()}
        reasons = {key: "not a number" if math.isnan(item) else "infinite" for key, item in value.items()
                   if isinstance(item, float) and not math.isfinite(item)}
        if reasons:
            out[NULL_REASONS] = {**out.get(NULL_REASONS, {}), **reasons}
        return out
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
