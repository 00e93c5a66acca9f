"""Which node types an embedding (``--embedding-dim``) learns rows for: one rule on the graph's
schema and its types' feature widths, read by ``train``, ``predict`` and the memory estimate.

The types without features learn rows in place of features. A graph whose every type has
features (a homogeneous graph's one type) learns rows for its target type, fed to the model
beside its features (``[x || emb]``); ``train`` refuses that on a typed graph, whose typed models
read one input per type.
"""
from __future__ import annotations

from typing import Sequence

from .schema import GraphSchema


def learned_types(schema: GraphSchema, feature_widths: Sequence[int]) -> tuple[int, ...]:
    """The indices (ascending) of the node types of ``schema`` whose nodes an embedding learns
    rows for, from ``feature_widths`` (``[T]``, each type's features fed to the model, 0 for none:
    every type's 0 when the features are left out): the types without features; when every type
    has features, the target type, whose rows are fed beside its features."""
    featureless = tuple(t for t, width in enumerate(feature_widths) if not width)
    return featureless or (schema.target_index,)
