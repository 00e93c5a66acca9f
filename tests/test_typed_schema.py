"""The schema of a typed graph (node types, relations and their reverses) and its symmetric CSR."""
from __future__ import annotations

import re

import numpy as np
import pytest

from salientpp.data.csr import build_csr, build_typed_csr
from salientpp.data.schema import GraphSchema, Relation
from salientpp.errors import InputError


def bibliographic() -> GraphSchema:
    """paper 0..4, author 5..7, institute 8..9; cites, writes, affiliated_with and the reverses."""
    return GraphSchema.with_reverses(["paper", "author", "institute"], [5, 3, 2],
                                     [("paper", "cites", "paper"), ("author", "writes", "paper"),
                                      ("author", "affiliated_with", "institute")], "paper")


def test_each_relation_between_two_types_gets_a_reverse_and_a_same_type_one_is_its_own():
    schema = bibliographic()
    assert [str(r) for r in schema.relations] == [
        "paper__cites__paper", "author__writes__paper", "paper__rev_writes__author",
        "author__affiliated_with__institute", "institute__rev_affiliated_with__author"]
    assert schema.reverse == (0, 2, 1, 4, 3)
    for r, back in enumerate(schema.reverse):
        assert schema.reverse[back] == r
        assert (schema.relations[back].src, schema.relations[back].dst) == (schema.relations[r].dst,
                                                                           schema.relations[r].src)


def test_a_reverse_given_explicitly_as_after_to_undirected_is_not_added_twice():
    given = [("author", "writes", "paper"), ("paper", "rev_writes", "author")]
    schema = GraphSchema.with_reverses(["paper", "author"], [2, 2], given, "paper")
    assert [r.key for r in schema.relations] == given
    assert schema.reverse == (1, 0)


def test_a_reverse_given_before_its_relation_is_paired_with_it():
    given = [("paper", "rev_writes", "author"), ("author", "writes", "paper")]
    schema = GraphSchema.with_reverses(["paper", "author"], [2, 2], given, "paper")
    assert [r.key for r in schema.relations] == given and schema.reverse == (1, 0)


def test_node_types_hold_contiguous_id_ranges_in_their_order():
    schema = bibliographic()
    assert schema.offsets.tolist() == [0, 5, 8, 10]
    assert schema.type_of(np.array([0, 4, 5, 7, 8, 9])).tolist() == [0, 0, 1, 1, 2, 2]
    assert schema.target_range == (0, 5)


def test_a_relation_is_found_by_triple_joined_name_or_unique_name_and_an_unknown_one_is_named():
    schema = bibliographic()
    assert schema.relation_index(("author", "writes", "paper")) == 1
    assert schema.relation_index("author__writes__paper") == 1
    assert schema.relation_index("writes") == 1
    assert schema.relation_index(Relation("paper", "rev_writes", "author")) == 2
    with pytest.raises(InputError, match="unknown relation wrote; the graph's relations are paper__cites__paper"):
        schema.relation_index("wrote")


def test_a_name_shared_by_two_relations_must_be_given_as_a_triple():
    schema = GraphSchema.with_reverses(["a", "b"], [1, 1], [("a", "to", "b"), ("b", "to", "a")], "a")
    with pytest.raises(InputError, match="used by several relations; name it as src__name__dst"):
        schema.relation_index("to")


@pytest.mark.parametrize("change, message", [
    (dict(node_types=("paper", "paper", "institute")), "repeat a name"),
    (dict(num_nodes=(5, -1, 2)), "one node count >= 0 per node type"),
    (dict(target="venue"), "target node type venue is not one of the graph's"),
    (dict(reverse=(0, 1, 2, 4, 3)), "must join paper to author"),
])
def test_an_inconsistent_schema_is_refused_in_one_sentence(change, message):
    schema = bibliographic()
    fields = dict(node_types=schema.node_types, num_nodes=schema.num_nodes, relations=schema.relations,
                  reverse=schema.reverse, target=schema.target)
    with pytest.raises(InputError, match=message):
        GraphSchema(**{**fields, **change})


def test_a_reverse_named_rev_within_one_type_is_paired_with_its_relation_not_made_a_symmetric_copy():
    given = [("paper", "cites", "paper"), ("paper", "rev_cites", "paper")]
    schema = GraphSchema.with_reverses(["paper"], [3], given, "paper")
    assert [r.key for r in schema.relations] == given and schema.reverse == (1, 0)


def test_a_relation_holding_another_s_edges_reversed_is_its_reverse_whatever_its_name():
    writes = np.array([[0, 1, 1], [2, 0, 2]])               # author -> paper
    given = [("author", "writes", "paper"), ("paper", "cites", "paper"), ("paper", "written_by", "author")]
    schema = GraphSchema.with_reverses(["paper", "author"], [3, 2], given, "paper",
                                       [writes, np.array([[0], [1]]), writes[::-1, [2, 0, 1, 1]]])
    assert [str(r) for r in schema.relations] == ["author__writes__paper", "paper__written_by__author",
                                                  "paper__cites__paper"]
    assert schema.reverse == (1, 0, 2)
    partial = GraphSchema.with_reverses(["paper", "author"], [3, 2], given, "paper",
                                        [writes, np.array([[0], [1]]), writes[::-1, :2]])
    assert partial.num_relations == 5 and Relation("author", "rev_written_by", "paper") in partial.relations


def test_a_schema_of_more_nodes_than_int64_ids_is_refused():
    with pytest.raises(InputError, match=r"count 1180591620717411303426 nodes in all, more than int64 ids can number"):
        GraphSchema.with_reverses(["paper", "author"], [2, 2**70], [("author", "writes", "paper")], "paper")


@pytest.mark.parametrize("node_types, relation, wrong", [
    (["paper", "author"], ("author", "a__b", "paper"), "relation name a__b holds '__'"),
    (["paper", "author"], ("author", "_writes", "paper"), "relation name _writes begins or ends with '_'"),
    (["paper", "author__x"], ("author__x", "writes", "paper"), "node type name author__x holds '__'"),
    (["paper", "author_"], ("author_", "writes", "paper"), "node type name author_ begins or ends with '_'"),
])
def test_a_name_that_would_not_read_back_from_src__name__dst_is_refused_where_a_schema_is_made_or_read(
        node_types, relation, wrong):
    expected = re.escape(wrong) + r", so a relation written src__name__dst .* would not read back; rename it"
    with pytest.raises(InputError, match=expected):
        GraphSchema.with_reverses(node_types, [2, 2], [relation], "paper")
    fine = GraphSchema.with_reverses(["paper", "author"], [2, 2], [("author", "writes", "paper")], "paper")
    meta = fine.to_meta()
    meta["node_types"][1]["name"] = node_types[1]
    meta["relations"][0].update(src=relation[0], name=relation[1])
    meta["relations"][1].update(dst=relation[0], name="rev_" + relation[1])
    with pytest.raises(InputError, match="meta.json records an inconsistent schema: the .*" + expected):
        GraphSchema.from_meta(meta, 4, "meta.json")


@pytest.mark.parametrize("text", ["a__b", "a__b__c__d", "", None, 5, ("a", "b", "c")])
def test_parsing_a_relation_refuses_anything_but_three_names_in_one_sentence(text):
    with pytest.raises(InputError, match=r"is not a relation written src__name__dst; give it as its three names"):
        Relation.parse(text)


def test_a_relation_of_four_parts_is_unknown_not_a_traceback():
    with pytest.raises(InputError, match="unknown relation paper__a__b__paper; the graph's relations are "):
        bibliographic().relation_index("paper__a__b__paper")
    assert Relation.parse("author__writes__paper") == Relation("author", "writes", "paper")


def test_a_relation_joining_an_unknown_type_is_refused():
    with pytest.raises(InputError, match="joins the node type venue, which is not one of the graph's"):
        GraphSchema.with_reverses(["paper"], [3], [("paper", "in", "venue")], "paper")


def test_the_schema_survives_meta_json_and_a_directory_without_one_is_homogeneous():
    schema = bibliographic()
    assert GraphSchema.from_meta(schema.to_meta(), 10, "meta.json") == schema
    assert GraphSchema.from_meta({}, 7, "meta.json") == GraphSchema.homogeneous(7)
    with pytest.raises(InputError, match="count 10 nodes but the graph has 11"):
        GraphSchema.from_meta(schema.to_meta(), 11, "meta.json")
    broken = {**schema.to_meta(), "relations": [{"src": "paper"}]}
    with pytest.raises(InputError, match="malformed"):
        GraphSchema.from_meta(broken, 10, "meta.json")


def test_the_homogeneous_schema_is_one_type_and_one_symmetric_relation():
    schema = GraphSchema.homogeneous(4)
    assert schema.is_homogeneous and schema.reverse == (0,) and schema.target_range == (0, 4)
    assert not bibliographic().is_homogeneous


def typed_entries(rowptr, col, edge_rel) -> set[tuple[int, int, int]]:
    rows = np.repeat(np.arange(rowptr.shape[0] - 1), np.diff(rowptr))
    return set(zip(rows.tolist(), edge_rel.tolist(), col.tolist()))


def test_the_typed_csr_holds_each_edge_in_its_relation_and_its_reverse_in_the_other_row():
    schema = bibliographic()
    rng = np.random.default_rng(0)
    edges = [np.stack([rng.integers(0, 5, 12), rng.integers(0, 5, 12)]),   # cites
             np.stack([rng.integers(5, 8, 9), rng.integers(0, 5, 9)]),     # writes
             np.stack([rng.integers(0, 5, 2), rng.integers(5, 8, 2)]),     # rev_writes, given too
             np.stack([rng.integers(5, 8, 4), rng.integers(8, 10, 4)]),    # affiliated_with
             np.zeros((2, 0), dtype=np.int64)]
    rowptr, col, edge_rel = build_typed_csr(edges, schema.reverse, 10)
    expected = set()
    for r, e in enumerate(edges):
        for u, v in e.T.tolist():
            if u != v:
                expected |= {(v, r, u), (u, schema.reverse[r], v)}
    assert typed_entries(rowptr, col, edge_rel) == expected
    assert len(expected) == col.shape[0]  # no repeats
    assert edge_rel.dtype == np.int8
    for v in range(10):
        row = slice(rowptr[v], rowptr[v + 1])
        keys = edge_rel[row].astype(np.int64) * 10 + col[row]
        assert np.all(np.diff(keys) > 0), f"row {v} is not grouped by relation and sorted within"
        types = schema.type_of(col[row])
        for r, t in zip(edge_rel[row], types):
            assert schema.relations[r].dst == schema.node_types[schema.type_of(np.array([v]))[0]]
            assert schema.relations[r].src == schema.node_types[t]


def test_with_one_relation_the_typed_csr_is_the_homogeneous_one():
    rng = np.random.default_rng(1)
    edges = rng.integers(0, 30, (2, 100))
    rowptr, col, edge_rel = build_typed_csr([edges], [0], 30)
    plain_rowptr, plain_col = build_csr(edges, 30)
    assert np.array_equal(rowptr, plain_rowptr) and np.array_equal(col, plain_col)
    assert not edge_rel.any()


def test_typed_edges_outside_the_graph_are_refused():
    with pytest.raises(InputError, match=r"edge ids of relation 0 must lie in \[0, 3\)"):
        build_typed_csr([np.array([[0], [3]])], [0], 3)
