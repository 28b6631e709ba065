"""The pipeline's per-record RDF work (spark_pipeline.rdf), without Spark: reject
attribution on the hard cases, canonical terms, blank node scoping, documents, the
fingerprint's 32-bit pieces."""

from __future__ import annotations

import gzip
import random

import pyoxigraph as ox
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdfcore.canonical import canonical_lines, canonical_quad
from rdfcore.fingerprint import MOD, line_hash
from spark_pipeline import rdf
from tests.rdf_samples import HARD

NT = ox.RdfFormat.N_TRIPLES
NQ = ox.RdfFormat.N_QUADS
XSD = "http://www.w3.org/2001/XMLSchema#"

def _parse(lines, fmt=NT, scope=None, graph=None):
    return rdf.parse_lines(lines, fmt, scope, rdf.Canonicaliser(graph))


def test_rejects_are_exactly_the_bad_lines():
    out = _parse([line for line, _ in HARD])
    bad = [i for i, (_, good) in enumerate(HARD) if not good]
    assert [i for i, _, _ in out.rejects] == bad
    assert [text for _, text, _ in out.rejects] == [
        "<http://e/a> <http://e/p> <http://e/b>",
        '<http://e/a> <http://e/p> "unterminated',
        '<http://e/a> <http://e/p> "bad \\q escape" .',
        "<relative> <http://e/p> <http://e/c> .",
        '<http://e/a> <http://e/p> "caf\\xe9" .',
        '"literal" <http://e/p> <http://e/c> .',
    ]
    messages = [m for _, _, m in out.rejects]
    for fragment, message in zip(["dot", "end of file", "escape", "IRI", "UTF-8",
                                  "subject"], messages, strict=True):
        assert fragment in message, message
    # No good line is lost with the bad ones.
    assert out.quads == [
        '<http://e/a> <http://e/p> "one" .',
        "<http://e/a> <http://e/p> <http://e/after-missing-dot> .",
        "<http://e/a> <http://e/p> <http://e/after-unterminated> .",
        '<http://e/a> <http://e/p> "last" .',
    ]
    assert out.lines == len(HARD)


def test_a_chunk_of_good_lines_gives_one_quad_per_line_in_order():
    lines = [f'<http://e/s{i}> <http://e/p> "{i}"^^<{XSD}integer> .'.encode()
             for i in range(500)]
    out = _parse(lines)
    assert out.rejects == []
    assert out.quads == [line.decode() for line in lines]


def test_few_bad_lines_in_a_large_chunk_are_found_by_halving():
    lines = [f"<http://e/s{i}> <http://e/p> <http://e/o> .".encode() for i in range(1000)]
    bad = [0, 1, 500, 998]
    for i in bad:
        lines[i] = lines[i][:-2]  # the dot is missing: blamed on the next line by a chunk
    out = _parse(lines)
    assert [i for i, _, _ in out.rejects] == bad
    assert len(out.quads) == 1000 - len(bad)
    assert out.quads[0] == "<http://e/s2> <http://e/p> <http://e/o> ."


def test_a_quad_in_an_n_triples_file_is_a_reject():
    out = _parse([b"<http://e/a> <http://e/p> <http://e/o> <http://e/g> ."])
    assert out.quads == [] and len(out.rejects) == 1


def test_terms_are_canonicalised_as_the_store_holds_them():
    lines = [
        f'<http://e/a> <http://e/p> "01"^^<{XSD}integer> .'.encode(),
        f'<http://e/a> <http://e/p> "1.50"^^<{XSD}decimal> .'.encode(),
        f'<http://e/a> <http://e/p> "1E3"^^<{XSD}double> .'.encode(),
        b'<http://e/a> <http://e/p> "Hallo"@DE-at .',
        f'<http://e/a> <http://e/p> "01"^^<{XSD}string> .'.encode(),
    ]
    out = _parse(lines)
    assert out.quads == [
        f'<http://e/a> <http://e/p> "1"^^<{XSD}integer> .',
        f'<http://e/a> <http://e/p> "1.5"^^<{XSD}decimal> .',
        f'<http://e/a> <http://e/p> "1000"^^<{XSD}double> .',
        '<http://e/a> <http://e/p> "Hallo"@de-at .',
        '<http://e/a> <http://e/p> "01" .',
    ]
    # ... which is exactly what a store gives back for them.
    store = ox.Store()
    store.extend(ox.parse(b"\n".join(lines), format=NT))
    assert sorted(f"{q} ." for q in store) == sorted(out.quads)


_IRI = st.sampled_from([ox.NamedNode("http://e/a"), ox.NamedNode("http://e/p"),
                        ox.NamedNode("http://e/1")])
_TEXT = st.sampled_from(["01", "+5", "1.50", "1E3", "true", "1", "0", "x", 'a"^^<b',
                         "2024-01-01T00:00:00Z", "-0", " 7"]) | st.text(max_size=8)
_LITERAL = st.one_of(
    _TEXT.map(ox.Literal),
    st.builds(lambda t, lang: ox.Literal(t, language=lang), _TEXT, st.sampled_from(["en"])),
    st.builds(lambda t, dt: ox.Literal(t, datatype=ox.NamedNode(XSD + dt)), _TEXT,
              st.sampled_from(["integer", "decimal", "double", "boolean", "dateTime",
                               "string", "int", "float"])))
_SUBJECT = _IRI | st.sampled_from([ox.BlankNode("b1"), ox.BlankNode("x_2")])
_OBJECT = _IRI | _SUBJECT | _LITERAL | st.builds(ox.Triple, _SUBJECT, _IRI, _LITERAL)
_GRAPH = st.just(ox.DefaultGraph()) | _IRI | st.just(ox.BlankNode("g"))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.builds(ox.Quad, _SUBJECT, _IRI, _OBJECT, _GRAPH), max_size=12))
def test_canonical_lines_in_one_call_are_canonical_quads_lines(quads):
    """The serialiser's lines with the non-canonical objects replaced in place are the
    lines ``canonical_quad`` gives one quad at a time (typed literals the store rewrites,
    texts holding a quote and ``"^^<``, triple terms, graphs of every kind)."""
    assert canonical_lines(quads) == [canonical_quad(q)[1] for q in quads]


def test_graph_option_puts_every_quad_in_that_graph():
    out = _parse([b"<http://e/a> <http://e/p> <http://e/o> <http://e/g1> .",
                  b"<http://e/a> <http://e/p> <http://e/o2> ."], NQ, graph="http://e/G")
    assert out.quads == ["<http://e/a> <http://e/p> <http://e/o> <http://e/G> .",
                         "<http://e/a> <http://e/p> <http://e/o2> <http://e/G> ."]
    assert out.graphs == ["<http://e/G>", "<http://e/G>"]


def test_blank_node_labels_get_the_files_scope_and_nothing_else_changes():
    line = b'_:b1 <http://e/_:x> "text _:b2 \\" _:b3" _:b1 .'
    scoped = rdf.scope_line(line, b"_:fSx")
    assert scoped == b'_:fSxb1 <http://e/_:x> "text _:b2 \\" _:b3" _:fSxb1 .'
    escaped = b"<http://e/\\u0041_:x> <http://e/p> _:b ."
    assert rdf.scope_line(escaped, b"_:fSx") == b"<http://e/\\u0041_:x> <http://e/p> _:fSxb ."
    out = _parse([line, b"_:b1 <http://e/p> _:other ."], NQ, scope="fSx")
    assert out.quads == ['_:fSxb1 <http://e/_:x> "text _:b2 \\" _:b3" _:fSxb1 .',
                         "_:fSxb1 <http://e/p> _:fSxother ."]


# Pieces that make the cases scope_line must tell apart: labels inside and outside IRIs
# and literals, escapes, unclosed IRIs and literals, comments.
_PIECES = [b"_:", b"_", b":", b"<", b">", b'"', b"\\", b'\\"', b" ", b"\t", b"a", b".", b"#",
           b"<http://e/", b"\\u0041", b"^^", b"@en"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=16))
def test_scope_line_rewrites_exactly_what_the_token_rule_does(pieces):
    """The fast path (a line without a literal or a label after an unclosed ``<``) gives
    what the token-by-token rule gives, on any line, valid or not."""
    line = b"".join(pieces)
    by_tokens = rdf._TOKENS.sub(lambda m: m.group(1) or b"_:fSx", line)
    assert rdf.scope_line(line, b"_:fSx") == by_tokens


def test_scopes_differ_between_files_and_are_stable():
    a, b = rdf.scope_of("/data/a.nt"), rdf.scope_of("/data/b.nt")
    assert a != b and a == rdf.scope_of("/data/a.nt")
    # A scoped label is a valid label, and never one pyoxigraph would mint (hex only).
    assert ox.BlankNode(a + "b1").value == a + "b1"


def test_reject_of_a_scoped_line_reports_the_text_as_written():
    out = _parse([b"_:b1 <http://e/p> _:b2"], NT, scope="fSx")
    [(index, text, message)] = out.rejects
    assert (index, text) == (0, "_:b1 <http://e/p> _:b2")
    assert "dot" in message


def test_detect_formats_and_compression():
    assert rdf.detect("a/b.nt") == ("nt", None)
    assert rdf.detect("x.NQ.gz") == ("nq", "gz")
    assert rdf.detect("x.ttl.bz2") == ("ttl", "bz2")
    assert rdf.detect("x.jsonld") == ("jsonld", None)
    assert rdf.detect("x.txt") is None
    assert rdf.detect("gz") is None and rdf.detect("x.gz") is None


# ---- documents ----


def _doc(tmp_path, name, text, compression=None):
    path = tmp_path / name
    data = text.encode()
    path.write_bytes(gzip.compress(data) if compression == "gz" else data)
    fmt, comp = rdf.detect(path)
    return rdf.InputFile(str(path), fmt, comp, path.stat().st_size)


TURTLE = """@prefix : <http://e/> .
:a :p [ :q 1 ] .
:a :p [ :q 2 ] .
_:n :r _:n .
"""


def test_document_blank_nodes_are_numbered_in_the_file_scope_deterministically(tmp_path):
    f = _doc(tmp_path, "d.ttl.gz", TURTLE, "gz")
    runs = [[q for p in rdf.parse_document(f, rdf.Canonicaliser()) for q in p.quads]
            for _ in range(2)]
    assert runs[0] == runs[1]  # anonymous nodes too: a re-run adds nothing
    s = rdf.scope_of(f.path)
    assert sorted(runs[0]) == sorted([
        f"<http://e/a> <http://e/p> _:{s}1 .",
        f'_:{s}1 <http://e/q> "1"^^<{XSD}integer> .',
        f"<http://e/a> <http://e/p> _:{s}2 .",
        f'_:{s}2 <http://e/q> "2"^^<{XSD}integer> .',
        f"_:{s}3 <http://e/r> _:{s}3 .",
    ])


def test_a_bad_document_is_rejected_whole_with_its_line(tmp_path):
    f = _doc(tmp_path, "bad.ttl", "@prefix : <http://e/> .\n:a :b :c .\n:a :b .\n:d :e :f .\n")
    parsed = list(rdf.parse_document(f, rdf.Canonicaliser()))
    [(index, text, message)] = parsed[-1].rejects
    assert (index + 1, text) == (3, ":a :b .")
    assert message.startswith("file rejected:")
    assert parsed[-1].lines == 4


@pytest.mark.parametrize("name,text", [
    ("d.jsonld", '{"@id": "http://e/a", "http://e/p": {"@id": "_:x"}}'),
    ("d.rdf", '<?xml version="1.0"?><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-'
              'syntax-ns#"><rdf:Description rdf:about="http://e/a"><rdf:value rdf:nodeID="x"'
              '/></rdf:Description></rdf:RDF>'),
])
def test_json_ld_and_rdf_xml_documents(tmp_path, name, text):
    f = _doc(tmp_path, name, text)
    [parsed] = list(rdf.parse_document(f, rdf.Canonicaliser()))
    assert len(parsed.quads) == 1 and parsed.rejects == []
    assert parsed.quads[0].endswith(f"_:{rdf.scope_of(f.path)}1 .")


# ---- relative IRIs, prefixes, files that cannot be read (issue 20, item 4) ----

RELATIVE = "@prefix r: <http://r/> .\n@base <http://own/> .\n<a> r:p <b> .\n"


@pytest.mark.parametrize("name,text,expected", [
    ("rel.ttl", "PREFIX r: <http://r/>\n\n<s> r:p <../o> .\n",
     "<http://base/dir/s> <http://r/p> <http://base/o> ."),
    ("rel.trig", "<g> { <s> <http://r/p> <o> }\n",
     "<http://base/dir/s> <http://r/p> <http://base/dir/o> <http://base/dir/g> ."),
    ("rel.rdf", '<?xml version="1.0"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-'
                'rdf-syntax-ns#" xmlns:r="http://r/">\n<rdf:Description rdf:about="s">'
                '<r:p rdf:resource="o"/></rdf:Description></rdf:RDF>\n',
     "<http://base/dir/s> <http://r/p> <http://base/dir/o> ."),
])
def test_relative_iris_resolve_against_the_base_or_reject_their_document(
        tmp_path, name, text, expected):
    f = _doc(tmp_path, name, text)
    [parsed] = rdf.parse_document(f, rdf.Canonicaliser(), base_iri="http://base/dir/")
    assert parsed.quads == [expected] and parsed.rejects == []
    [rejected] = rdf.parse_document(f, rdf.Canonicaliser())
    [(index, _, message)] = rejected.rejects
    assert rejected.quads == [] and "give --base-iri" in message
    if name == "rel.ttl":
        assert index + 1 == 3  # the line of the relative IRI


def test_a_documents_own_base_wins_and_its_prefixes_come_with_its_last_batch(tmp_path):
    f = _doc(tmp_path, "own.ttl", RELATIVE)
    parsed = list(rdf.parse_document(f, rdf.Canonicaliser(), base_iri="http://base/"))
    assert [q for p in parsed for q in p.quads] == [
        "<http://own/a> <http://r/p> <http://own/b> ."]
    assert parsed[-1].prefixes == {"r": "http://r/"}
    # A rejected document gives no prefixes.
    bad = _doc(tmp_path, "bad.ttl", "@prefix x: <http://x/> .\nx:a x:b .\n")
    assert [p.prefixes for p in rdf.parse_document(bad, rdf.Canonicaliser())] == [{}]


def test_a_relative_iri_in_n_triples_is_a_line_reject_that_says_why():
    parsed = rdf.parse_lines([b"<http://e/a> <http://e/p> <rel> ."], ox.RdfFormat.N_TRIPLES,
                             None, rdf.Canonicaliser())
    [(index, _, message)] = parsed.rejects
    assert index == 0 and "N-Triples and N-Quads allow only absolute IRIs" in message


def test_a_file_that_cannot_be_read_fails_instead_of_being_rejected(tmp_path):
    f = _doc(tmp_path, "gone.ttl", TURTLE)
    (tmp_path / "gone.ttl").unlink()
    with pytest.raises(FileNotFoundError):
        list(rdf.parse_document(f, rdf.Canonicaliser()))


# ---- the fingerprint in pieces ----


def test_pieces_summed_separately_recombine_to_the_fingerprint():
    rng = random.Random(7)
    hashes = [rng.getrandbits(128) for _ in range(1000)] + [MOD - 1] * 5
    sums = [sum(rdf.pieces(h)[i] for h in hashes) for i in range(rdf.PIECES)]
    assert rdf.combine(sums) == sum(hashes) % MOD
    assert rdf.combine([None] * 4) == 0
    assert all(0 <= p < 2**32 for p in rdf.pieces(MOD - 1))


def test_hashes_are_the_workers_line_hash():
    out = _parse([b"<http://e/a> <http://e/p> <http://e/o> ."])
    assert out.hashes() == [line_hash(b"<http://e/a> <http://e/p> <http://e/o> .")]
