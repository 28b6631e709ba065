"""RDF the tests share: N-Triples lines that chunk parsers blame wrongly (the pipeline's
reject attribution), and quads with every kind of term and awkward text (the Binary RDF
codec, on its own and on the wire).
"""

from __future__ import annotations

import pyoxigraph as ox

XSD = "http://www.w3.org/2001/XMLSchema#"
EX = "http://example.org/"
N, B, L = ox.NamedNode, ox.BlankNode, ox.Literal


def ex(local: str) -> ox.NamedNode:
    return N(EX + local)


# Line, and whether it is good: each bad one is a classic way a chunk parse blames the
# wrong line (docs/design/dependencies.md#pyspark-43-in-local-mode-the-pipeline): the error of a
# missing dot is reported on the next line, an unterminated string swallows the next line.
HARD = [
    (b'<http://e/a> <http://e/p> "one" .', True),
    (b"<http://e/a> <http://e/p> <http://e/b>", False),  # missing dot
    (b"<http://e/a> <http://e/p> <http://e/after-missing-dot> .", True),
    (b'<http://e/a> <http://e/p> "unterminated', False),
    (b"<http://e/a> <http://e/p> <http://e/after-unterminated> .", True),
    (b'<http://e/a> <http://e/p> "bad \\q escape" .', False),
    (b"<relative> <http://e/p> <http://e/c> .", False),
    (b'<http://e/a> <http://e/p> "caf\xe9" .', False),  # latin-1, not UTF-8
    (b'"literal" <http://e/p> <http://e/c> .', False),  # literal as subject
    (b"", True),
    (b"# a comment", True),
    (b'<http://e/a> <http://e/p> "last" .', True),
]

AWKWARD_TEXTS = [
    "", "plain", "line one\nline two\r\nline three", "tab\there", 'a "quoted" word',
    "back\\slash \\n not a newline", "accents: àéîõü ÇÑ ß", "CJK: 漢字かなカナ한국어",
    "emoji outside the BMP: 😀🎉 𝄞 𠜎", "family ZWJ: 👨‍👩‍👧‍👦", "control \x01\x1f and \x7f",
    "mixed 😀\n\t\"\\é",
    "long " + "😀é漢 quite a long string, " * 4000,  # ~100k UTF-16 code units
]


def rich_quads() -> list[ox.Quad]:
    """Every kind of term, in named graphs (IRI and blank node) and the default graph."""
    g1, g2, bg = ex("graph/1"), N("http://example.org/graphé/😀"), B("graphnode")
    s1, s2, b1, b2 = ex("s1"), N("http://example.org/ĉu/漢字/😀#frag"), B("b1"), B("node2")
    quads = []
    for i, text in enumerate(AWKWARD_TEXTS):
        quads.append(ox.Quad(s1, ex(f"text{i}"), L(text), g1))
        quads.append(ox.Quad(b1, ex("label"), L(text, language="en"), ox.DefaultGraph()))
    quads += [
        ox.Quad(s1, ex("lang"), L("colour", language="en-GB"), g1),
        ox.Quad(s1, ex("lang"), L("中文", language="zh-Hant-TW"), g2),
        ox.Quad(s2, ex("int"), L("01", datatype=N(XSD + "integer")), g2),
        ox.Quad(s2, ex("double"), L("1.5E3", datatype=N(XSD + "double")), bg),
        ox.Quad(s2, ex("custom"), L("x y", datatype=ex("datatype/😀")), bg),
        ox.Quad(s2, ex("string"), L("typed string", datatype=N(XSD + "string")),
                ox.DefaultGraph()),
        ox.Quad(b1, ex("knows"), b2, g1),
        ox.Quad(b2, ex("knows"), b1, bg),
        ox.Quad(b2, ex("self"), b2, ox.DefaultGraph()),
        ox.Quad(bg, ex("about"), s2, ox.DefaultGraph()),
        ox.Quad(s1, ex("iri"), s2, g1),
    ]
    return quads


# Updates every parser must refuse (the worker's changeset computation, the master's check
# before logging): syntax errors, blank nodes where SPARQL forbids them, a prefix declared
# between operations, operations we do not run, and messages that mention "load" or
# "service" inside strings.
P = f"PREFIX ex: <http://example.org/>\nPREFIX xsd: <{XSD}>\n"
MALFORMED_UPDATES = [
    "INSERT DATA { <http://a> <http://b> \"x }",
    "INSERT DATA { <a> <b> <c> }",  # relative IRI without base
    P + "INSERT DATA { ex:a ex:b ?x }",
    P + "DELETE DATA { _:a ex:p ex:o }",
    P + "DELETE { _:a ex:p ?o } WHERE { ?s ex:p ?o }",
    P + "DELETE WHERE { _:a ex:p ?o }",
    P + "INSERT DATA { _:a ex:p 1 } ; INSERT DATA { _:a ex:p 2 }",
    P + "INSERT DATA { ex:a ex:b ex:c } ; PREFIX ex2: <http://x/> INSERT DATA { ex2:a ex:b 1 }",
    P + "INSERT { ?s ex:p ?o } WHERE { ?s ex:p ?o ",
    P + "INSERT { ?s ex:p ?o } { ?s ex:p ?o }",
    P + "WITH ex:g DELETE WHERE { ?s ?p ?o }",
    "garbage",
    P + "\n\nINSERT DATA {\n ex:a ex:b ex:c ,\n }",
    P + "CLEAR GRAPH",
    P + "ADD ex:g1 ex:g2",
    P + "INSERT DATA { ex:a ex:b und:c }",
    P + "INSERT { ?s ex:p ?o } WHERE { SERVICE <http://127.0.0.1:9/sparql> { ?s ex:p ?o } ",
    # mentions "load"/"service": the message comes from the probe, positions mapped back
    P + "INSERT DATA { ex:a ex:b 'download' } ; INSERT DATA { ex:a ex:b ex:c } garbage",
    "INSERT DATA { <http://a> <http://b> 'service' } oops",
    P + "DELETE { ?s ?p 'load' } WHERE { ?s ?p ?o FILTER(?o = ) }",
]
