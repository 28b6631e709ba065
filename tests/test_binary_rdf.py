"""rdf4j_protocol.binary_rdf and .binary_results: RDF4J's binary formats, against RDF4J's Rio.

Interop: tests/java/BinaryRdfInterop.java (compiled here by javac against Debian's
librdf4j-java, RDF4J 3.7) converts N-Quads <-> Binary RDF and SPARQL JSON results <->
binary results table with RDF4J's own writers and parsers. What Rio writes we read to the
same quads (namespaces, comments), what we write Rio reads to the same quads, for data
with every kind of term and awkward text (newlines, tabs, quotes, backslashes, accents,
CJK, emoji outside the BMP, long strings) and more statements than Rio's 8192-statement
buffer; the same for tuple results with unbound values and empty rows.

Without RDF4J: Hypothesis round trips of the codec (write then read gives the same
quads / rows), version 2 documents (RDF4J 4.3+), and malformed input (bad magic, wrong
version, every truncation, unknown record and value types, bad references, bad UTF-16)
raising BinaryRdfError with a message saying what is wrong.
"""

from __future__ import annotations

import struct
import subprocess

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rdf4j_protocol import binary_rdf, binary_results
from rdf4j_protocol.binary_rdf import BinaryRdfError
from rdf4j_protocol.binary_results import BinaryResultsQueryError
from rdf4j_protocol.results import serialize_table
from tests.rdf4j_java import JAVA_DIR, compile_java
from tests.rdf_samples import rich_quads


def unescape(text: str) -> str:
    """The escaping of BinaryRdfInterop's '# ns' and '# comment' lines, undone."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append({"n": "\n", "r": "\r", "t": "\t"}.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Rio:
    """RDF4J's Rio, one JVM per conversion (BinaryRdfInterop)."""

    def __init__(self, classpath: str) -> None:
        self.classpath = classpath

    def run(self, *args: str, data: bytes) -> bytes:
        r = subprocess.run(["java", "-cp", self.classpath, "BinaryRdfInterop", *args],
                           input=data, capture_output=True, timeout=180)
        assert r.returncode == 0, f"Rio failed ({r.returncode}): {r.stderr.decode()}"
        return r.stdout

    def write_brdf(self, quads: list[ox.Quad], namespaces: dict[str, str] = {},  # noqa: B006
                   comments: list[str] = []) -> bytes:  # noqa: B006
        extra = [f"ns:{p}={iri}" for p, iri in namespaces.items()]
        extra += [f"comment:{c}" for c in comments]
        return self.run("nquads-to-brdf", *extra,
                        data=ox.serialize(quads, format=ox.RdfFormat.N_QUADS))

    def read_brdf(self, data: bytes) -> tuple[list[ox.Quad], dict[str, str], list[str]]:
        text = self.run("brdf-to-nquads", data=data).decode("utf-8")
        namespaces, comments = {}, []
        for line in text.splitlines():
            if line.startswith("# ns\t"):
                _, prefix, iri = line.split("\t")
                namespaces[unescape(prefix)] = unescape(iri)
            elif line.startswith("# comment\t"):
                comments.append(unescape(line.split("\t", 1)[1]))
        return list(ox.parse(text, format=ox.RdfFormat.N_QUADS)), namespaces, comments

    def write_brtr(self, variables: list[str], rows: list[tuple]) -> bytes:
        return self.run("json-to-brtr",
                        data=serialize_table(variables, rows, ox.QueryResultsFormat.JSON))

    def read_brtr(self, data: bytes) -> tuple[list[str], list[tuple]]:
        result = ox.parse_query_results(self.run("brtr-to-json", data=data),
                                        format=ox.QueryResultsFormat.JSON)
        return [v.value for v in result.variables], [tuple(s) for s in result]


@pytest.fixture(scope="module")
def rio(tmp_path_factory) -> Rio:
    return Rio(compile_java(JAVA_DIR / "BinaryRdfInterop.java",
                            tmp_path_factory.mktemp("java-interop")))


# ---- data ----

XSD = "http://www.w3.org/2001/XMLSchema#"
EX = "http://example.org/"
N, B, L = ox.NamedNode, ox.BlankNode, ox.Literal


def ex(local: str) -> ox.NamedNode:
    return N(EX + local)


def many_quads(n: int = 20_000) -> list[ox.Quad]:
    """More statements than Rio's writer buffers (8192), with values repeated near and far
    (its value table), in several graphs."""
    return [ox.Quad(ex(f"s{i % 997}"), ex(f"p{i % 13}"),
                    L(f"value {i % 3001} é😀", language="fr") if i % 3 else ex(f"o{i}"),
                    ex(f"g{i % 5}") if i % 4 else ox.DefaultGraph())
            for i in range(n)]


NAMESPACES = {"ex": EX, "xsd": XSD, "": "http://example.org/default#", "é": EX + "é/"}
COMMENTS = ["a comment", "with a newline\nand 😀", ""]


# ---- Binary RDF against Rio ----


@pytest.mark.parametrize("dataset", ["rich", "many"])
@pytest.mark.processes
def test_rio_written_binary_rdf_is_read_to_the_same_quads(rio, dataset):
    quads = rich_quads() if dataset == "rich" else many_quads()
    data = rio.write_brdf(quads, NAMESPACES, COMMENTS)
    assert data[:8] == b"BRDF\x00\x00\x00\x01"
    if dataset == "many":
        assert b"\x06\x00\x00" in data  # Rio used its value table (VALUE_REF records)
    doc = binary_rdf.read_rdf(data)
    assert doc.quads == quads  # same quads, same order
    assert doc.namespaces == NAMESPACES
    assert doc.comments == COMMENTS
    assert doc.version == 1


@pytest.mark.parametrize("dataset", ["rich", "many"])
@pytest.mark.processes
def test_binary_rdf_we_write_is_read_by_rio_to_the_same_quads(rio, dataset):
    quads = rich_quads() if dataset == "rich" else many_quads()
    data = binary_rdf.write_rdf(quads, NAMESPACES, COMMENTS)
    back, namespaces, comments = rio.read_brdf(data)
    assert back == quads
    assert namespaces == NAMESPACES
    assert comments == COMMENTS


@pytest.mark.processes
def test_triples_and_strings_lengths_in_utf16_code_units(rio):
    """Triples (from a CONSTRUCT) have no context; a non-BMP character counts two code
    units in a version 1 string length, as Java's String.length() does."""
    triples = [ox.Triple(ex("s"), ex("p"), L("😀")), ox.Triple(ex("s"), ex("p"), L("é"))]
    data = binary_rdf.write_rdf(triples)
    assert struct.pack(">i", 2) + "😀".encode("utf-16-be") in data
    back, _, _ = rio.read_brdf(data)
    assert back == [ox.Quad(t.subject, t.predicate, t.object) for t in triples]


# ---- binary results table against Rio ----

VARIABLES = ["s", "label", "other", "n"]


def result_rows() -> list[tuple]:
    rows = [
        (ex("s1"), L("plain"), None, L("1", datatype=N(XSD + "integer"))),
        (ex("s1"), L("plain"), None, L("2", datatype=N(XSD + "integer"))),  # repeats
        (None, None, None, None),  # nothing bound: an EMPTY_ROW
        (ex("s1"), L("plain"), B("b1"), None),  # repeats the row before the empty one
        (B("b1"), L("colour", language="en-GB"), ex("ĉu/漢字/😀#frag"), None),
        (N("urn:isbn:0451450523"), L("quote \" backslash \\ tab \t newline \n"), None,
         L("x", datatype=ex("datatype#hash/then/slashes:colon"))),
        (ex("no-slash-local"), L("emoji 😀🎉 𝄞 CJK 漢字 accents àé"), None,
         L("typed string", datatype=N(XSD + "string"))),
        (N("http://example.org/"), L("long " + "😀é漢" * 30000), None, None),
    ] + [(ex(f"s{i % 7}"), L(f"row {i}", language="de"), None, ex("shared"))
         for i in range(300)]
    return rows


@pytest.mark.processes
def test_rio_written_results_table_is_read_to_the_same_rows(rio):
    rows = result_rows()
    data = rio.write_brtr(VARIABLES, rows)
    assert data[:8] == b"BRTR\x00\x00\x00\x04"
    result = binary_results.read_results(data)
    assert result.variables == VARIABLES
    assert result.rows == rows


@pytest.mark.processes
def test_results_table_we_write_is_read_by_rio_to_the_same_rows(rio):
    rows = result_rows()
    data = binary_results.write_results(VARIABLES, rows)
    assert rio.read_brtr(data) == (VARIABLES, rows)


@pytest.mark.processes
def test_results_table_without_rows_or_columns(rio):
    for variables, rows in [(["a", "b"], []), ([], [()]), ([], [])]:
        data = binary_results.write_results(variables, rows)
        assert binary_results.read_results(data) == binary_results.BinaryResults(variables, rows)
        assert rio.read_brtr(data) == (variables, rows)
        ours = binary_results.read_results(rio.write_brtr(variables, rows))
        assert (ours.variables, ours.rows) == (variables, rows)


# ---- Hypothesis: our own round trips ----

_iri_chars = st.characters(whitelist_categories=("Lu", "Ll", "Lo", "Nd"),
                           whitelist_characters="-._~!$&'()*+,;=:@/😀🎉𝄞")
iris = st.builds(lambda a, b: N(f"http://example.org/{a}#{b}"),
                 st.text(_iri_chars, max_size=12), st.text(_iri_chars, max_size=6)) | \
    st.sampled_from([N("urn:x:a"), N(XSD + "string"), N("http://a")])
bnodes = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_\-]{0,10}", fullmatch=True).map(B)
texts = st.text(max_size=40)  # any Unicode, outside the BMP included (no lone surrogates)
literals = st.one_of(
    texts.map(L),
    st.builds(lambda t, lang: L(t, language=lang), texts,
              st.sampled_from(["en", "en-gb", "fr-be", "zh-hant-tw", "x-private"])),
    st.builds(lambda t, dt: L(t, datatype=dt), texts, iris),
    st.builds(lambda t, d: L(t, language="ar", direction=d), texts,
              st.sampled_from([ox.BaseDirection.LTR, ox.BaseDirection.RTL])),
)
subjects = iris | bnodes
objects = st.one_of(iris, bnodes, literals,
                    st.builds(ox.Triple, subjects, iris, iris | bnodes | literals))
graphs = st.one_of(st.just(ox.DefaultGraph()), iris, bnodes)
quad_lists = st.lists(st.builds(ox.Quad, subjects, iris, objects, graphs), max_size=40)
# Repetition: draw from a small pool so that values recur (the value table).
pooled = st.lists(st.builds(ox.Quad, subjects, iris, objects, graphs), min_size=1,
                  max_size=6).flatmap(lambda pool: st.lists(st.sampled_from(pool),
                                                            max_size=30))
HYPOTHESIS = settings(max_examples=200, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow])


@HYPOTHESIS
@given(quads=quad_lists | pooled,
       namespaces=st.dictionaries(st.text(max_size=5), st.text(max_size=20), max_size=3),
       comments=st.lists(texts, max_size=3))
def test_write_then_read_gives_the_same_document(quads, namespaces, comments):
    doc = binary_rdf.read_rdf(binary_rdf.write_rdf(quads, namespaces, comments))
    assert doc.quads == quads
    assert doc.namespaces == namespaces
    assert doc.comments == comments


@HYPOTHESIS
@given(st.integers(0, 4).flatmap(lambda n: st.tuples(
    st.lists(st.text(min_size=1, max_size=8), min_size=n, max_size=n, unique=True),
    st.lists(st.lists(st.none() | objects, min_size=n, max_size=n).map(tuple), max_size=20))))
def test_results_write_then_read_gives_the_same_rows(table):
    variables, rows = table
    result = binary_results.read_results(binary_results.write_results(variables, rows))
    assert result.variables == variables
    assert result.rows == rows


def test_read_accepts_streams_and_buffers():
    import io
    quads = rich_quads()
    data = binary_rdf.write_rdf(quads)
    assert binary_rdf.read_rdf(io.BytesIO(data)).quads == quads
    assert binary_rdf.read_rdf(bytearray(data)).quads == quads
    assert binary_rdf.read_rdf_quads(memoryview(data)) == quads


# ---- version 2 (RDF4J 4.3 and later write it by default) ----


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def v2_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return varint(len(data)) + data


def test_version_2_documents_are_read():
    long_text = "é😀" * 200  # a length beyond one varint byte
    data = (b"BRDF" + struct.pack(">i", 2) + v2_string("UTF-8")
            + b"\x00" + v2_string("ex") + v2_string(EX)
            + b"\x03" + varint(300) + b"\x01" + v2_string(EX + "s")
            + b"\x01\x06" + varint(300) + b"\x01" + v2_string(EX + "p")
            + b"\x04" + v2_string(long_text) + v2_string("en") + b"\x00"
            + b"\x01\x06" + varint(300) + b"\x01" + v2_string(EX + "p") + b"\x02"
            + v2_string("b") + b"\x01" + v2_string(EX + "g")
            + b"\x7f")
    doc = binary_rdf.read_rdf(data)
    assert doc.version == 2
    assert doc.namespaces == {"ex": EX}
    assert doc.quads == [ox.Quad(ex("s"), ex("p"), L(long_text, language="en")),
                         ox.Quad(ex("s"), ex("p"), B("b"), ex("g"))]


def test_results_version_2_flags_byte_and_version_1_modified_utf8():
    v2 = (b"BRTR" + struct.pack(">i", 2) + b"\x03" + struct.pack(">i", 1)
          + struct.pack(">i", 1) + b"x" + b"\x04" + struct.pack(">i", 8) + b"urn:x:ab" + b"\x7f")
    assert binary_results.read_results(v2).rows == [(N("urn:x:ab"),)]

    def mutf8(text: str) -> bytes:  # Java's modified UTF-8: NUL as C0 80, CESU-8 pairs
        data = b"".join(
            c.encode("utf-8", "surrogatepass") if c != "\0" else b"\xc0\x80"
            for c in text.encode("utf-16-be", "surrogatepass").decode("utf-16-be",
                                                                      "surrogatepass")
            for c in ([c] if ord(c) < 0x10000 else
                      [chr(u) for u in struct.unpack(">HH", c.encode("utf-16-be"))]))
        return struct.pack(">H", len(data)) + data

    text = "nul\0 é 😀"
    v1 = (b"BRTR" + struct.pack(">i", 1) + struct.pack(">i", 1) + mutf8("v")
          + b"\x06" + mutf8(text) + b"\x7f")
    result = binary_results.read_results(v1)
    assert result.variables == ["v"]
    assert result.rows == [(L(text),)]


# ---- blank node ids that are not N-Triples labels ----


def test_blank_node_ids_pyoxigraph_refuses_keep_their_identity():
    def bnode(label: str) -> bytes:
        return b"\x02" + struct.pack(">i", len(label)) + label.encode("utf-16-be")

    stmt = b"\x01" + bnode("has space") + b"\x01" + struct.pack(">i", 3) + \
        "u:p".encode("utf-16-be") + bnode("has space") + bnode("")
    data = b"BRDF" + struct.pack(">i", 1) + stmt + stmt + b"\x7f"
    quads = binary_rdf.read_rdf(data).quads
    node = B("rdf4jx" + b"has space".hex())
    assert quads[0] == quads[1] == ox.Quad(node, N("u:p"), node, B("rdf4jx"))


# ---- malformed input ----


def one_statement() -> bytes:
    return binary_rdf.write_rdf(
        [ox.Quad(ex("s"), ex("p"), L("😀", language="en"), ex("g")),
         ox.Quad(ex("s"), ex("p"), L("x", datatype=ex("dt")))], {"ex": EX}, ["c"])


@pytest.mark.parametrize(("data", "message"), [
    (b"", "truncated Binary RDF document: the magic number"),
    (b"BR", "truncated Binary RDF document: the magic number"),
    (b"RIFF\x00\x00\x00\x01\x7f", "not a Binary RDF document: it starts with b'RIFF'"),
    (b"BRTR\x00\x00\x00\x04", "not a Binary RDF document: it starts with b'BRTR'"),
    (b"BRDF\x00\x00", "truncated Binary RDF document: the format version at byte 4"),
    (b"BRDF\x00\x00\x00\x03\x7f", "unsupported Binary RDF format version 3"),
    (b"BRDF\x00\x00\x00\x01", "without its END_OF_DATA record"),
    (b"BRDF\x00\x00\x00\x01\x09", "unknown record type 9 (at byte 8)"),
    (b"BRDF\x00\x00\x00\x01\x01\x09", "unknown value type 9 (at byte 9)"),
    (b"BRDF\x00\x00\x00\x01\x01\x06\x00\x00\x00\x05",
     "a reference to value id 5, which was not declared"),
    (b"BRDF\x00\x00\x00\x01\x01\x03\x00\x00\x00\x01\x00x\x01\x00\x00\x00\x03\x00u\x00:\x00p"
     b"\x03\x00\x00\x00\x00\x00", "a statement's subject must be an IRI or a blank node"),
    (b"BRDF\x00\x00\x00\x01\x01\x01\x00\x00\x00\x01\xd8\x3d",
     "a string is not valid UTF-16"),
    (b"BRDF\x00\x00\x00\x01\x01\x01\x00\x00\x00\x03\x00a\x00 \x00b",
     "invalid IRI <a b>"),
    (b"BRDF\x00\x00\x00\x01\x01\x01\xff\xff\xff\xff", "negative string length -1"),
    (b"BRDF\x00\x00\x00\x01\x00\x00\x00\x7f\xff", "the namespace declaration record at byte 8 "
                                                  "runs past the end of the data"),
])
def test_malformed_binary_rdf_is_refused_with_the_reason(data, message):
    with pytest.raises(BinaryRdfError, match=None) as info:
        binary_rdf.read_rdf(data)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_every_truncation_is_refused():
    data = one_statement()
    for n in range(len(data)):
        with pytest.raises(BinaryRdfError, match="truncated Binary RDF document"):
            binary_rdf.read_rdf(data[:n])
    assert len(binary_rdf.read_rdf(data).quads) == 2


def test_malformed_results_tables_are_refused_with_the_reason():
    good = binary_results.write_results(["a"], [(ex("x"),), (L("y", datatype=ex("dt")),)])
    for n in range(len(good)):
        with pytest.raises(BinaryRdfError, match="truncated binary query results table"):
            binary_results.read_results(good[:n])
    head = b"BRTR" + struct.pack(">i", 4) + struct.pack(">i", 1) + struct.pack(">i", 1) + b"a"
    cases = [
        (b"BRDF\x00\x00\x00\x04", "not a binary query results table"),
        (b"BRTR" + struct.pack(">i", 5), "unsupported binary query results format version 5"),
        (head + b"\x0b", "unknown record type 11"),
        (head + b"\x03\x00\x00\x00\x07\x00\x00\x00\x01x", "namespace id 7, which was not "
                                                         "declared"),
        (head + b"\x08\x00\x00\x00\x01x\x06", "a literal's datatype must be a QNAME or URI"),
        (b"BRTR" + struct.pack(">i", 4) + struct.pack(">i", -1), "negative column count -1"),
        (b"BRTR" + struct.pack(">i", 4) + struct.pack(">i", 2) + struct.pack(">i", 1) + b"a"
         + struct.pack(">i", 1) + b"b" + b"\x00\x7f", "ends in the middle of a row"),
        (head + b"\x05\x00\x00\x00\x02\xff\xfe", "is not valid UTF-8"),
    ]
    for data, message in cases:
        with pytest.raises(BinaryRdfError) as info:
            binary_results.read_results(data)
        assert message in str(info.value), (data, str(info.value))
    error = head + b"\x7e\x02" + struct.pack(">i", 4) + b"boom"
    with pytest.raises(BinaryResultsQueryError, match=r"query evaluation error.*boom"):
        binary_results.read_results(error)


def test_unwritable_values_are_refused():
    with pytest.raises(ValueError, match="expected pyoxigraph Quads or Triples"):
        binary_rdf.write_rdf(["not a quad"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"one value .* per variable"):
        binary_results.write_results(["a", "b"], [(None,)])
    with pytest.raises(ValueError, match="cannot write"):
        binary_results.write_results(["a"], [(ox.Variable("x"),)])  # type: ignore[list-item]
