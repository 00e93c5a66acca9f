"""Which node types an embedding (``--embedding-dim``) learns rows for, and so how wide the model's
input rows are: one rule on the graph's schema and its types' feature widths, read by ``train``,
``predict`` and the memory estimate.

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


def feature_widths(data, features: bool) -> list[int]:
    """``[T]`` the width of the features of each node type of ``data`` (a partitioned dataset: its
    ``schema`` and ``feature_width(t)``) that the model is fed: 0 for a type without features, and
    for every type when ``features`` is false (``--no-features``)."""
    return [data.feature_width(t) if features else 0 for t in range(data.schema.num_types)]


def input_width(schema: GraphSchema, feature_widths: Sequence[int], embedding_dim: int) -> int:
    """The width of the model's input rows of the target type of ``schema``: its features
    (``feature_widths[target]``) and, when the embedding (``embedding_dim`` wide, 0: none) learns
    rows for the target (:func:`learned_types`), those beside them: ``[x || emb]``."""
    target = schema.target_index
    return feature_widths[target] + (embedding_dim if target in learned_types(schema, feature_widths) else 0)
