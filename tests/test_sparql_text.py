"""The SPARQL update tokenizer: strings, IRIs, comments, braces and ';' decide structure."""

from __future__ import annotations

import pyoxigraph as ox
import pytest

from rdfcore import sparql_text as st


def kinds(text: str) -> list[tuple[str, str]]:
    return [(t.kind, t.text) for t in st.tokenize(text)]


def test_strings_hide_braces_semicolons_comments_and_variables() -> None:
    text = """'a}' "b{;#" '''c'}''' \"\"\"d"{?x}\"\"\" 'e\\'}' "f\\"#" """
    assert [k for k, _ in kinds(text)] == ["STRING"] * 6
    assert kinds("'''x''''")[0] == ("STRING", "'''x'''")  # then a stray quote


def test_long_string_spans_lines_short_string_does_not() -> None:
    assert kinds('"""a\n}\nb"""') == [("STRING", '"""a\n}\nb"""')]
    toks = kinds('"a\n}"')
    assert ("PUNCT", "}") in toks  # an unterminated short string is not a string


def test_iri_versus_less_than() -> None:
    assert kinds("<http://ex/a#b;c>") == [("IRI", "<http://ex/a#b;c>")]
    assert kinds("FILTER(?a < ?b)") == [
        ("WORD", "FILTER"), ("PUNCT", "("), ("VAR", "?a"), ("PUNCT", "<"), ("VAR", "?b"),
        ("PUNCT", ")")]
    assert ("PUNCT", "<") in kinds("FILTER(?a<3 && ?b > 2)")
    assert ("PUNCT", "<") in kinds('FILTER(?a<"}")')
    assert kinds("<<( <a> <b> <c> )>>")[0] == ("PUNCT", "<<(")


def test_comments_run_to_end_of_line_outside_strings_and_iris() -> None:
    text = "INSERT # { ; '\n DATA {<http://x#y> <http://p> \"#\" } # }\n"
    assert [t for _, t in kinds(text)] == [
        "INSERT", "DATA", "{", "<http://x#y>", "<http://p>", '"#"', "}"]


def test_words_keep_inner_dots_but_not_the_terminator() -> None:
    assert [t for _, t in kinds("ex:a.b ex:c. 1.5 .5 ex:d\\.e _:b1.")] == [
        "ex:a.b", "ex:c", ".", "1.5", ".5", "ex:d\\.e", "_:b1", "."]
    assert [t for _, t in kinds("<c>.GRAPH")] == ["<c>", ".", "GRAPH"]


def test_variables() -> None:
    assert kinds("?x $y ?é1") == [("VAR", "?x"), ("VAR", "$y"), ("VAR", "?é1")]
    assert kinds("ex:p? ?o")[1] == ("PUNCT", "?")  # path modifier


def test_split_at_top_level_semicolons_only() -> None:
    text = ("PREFIX ex: <http://ex/>\nBASE <http://b/>\n"
            "INSERT DATA { ex:a ex:p 'x;y' ; ex:q ex:b } ;\n"
            "DELETE WHERE { ?s ?p \"}\" } ; CLEAR ALL ;")
    split = st.split_update(text)
    assert [op.head for op in split.operations] == ["INSERT", "DELETE", "CLEAR"]
    assert split.operations[0].prologue == "PREFIX ex: <http://ex/>\nBASE <http://b/>"
    assert split.prologue_end == text.index("INSERT")
    assert [t.kind for t in split.operations[0].tokens] == ["WORD", "WORD", "BLOCK"]


def test_split_empty_and_prologue_only() -> None:
    assert st.split_update("").operations == ()
    text = "PREFIX ex: <http://ex/> # nothing else\n"
    split = st.split_update(text)
    assert split.operations == () and split.prologue_end == len(text)


def test_split_finds_load_even_in_broken_text() -> None:
    split = st.split_update("INSERT DATA { <a:a> <a:b> 'unterminated } ; load <http://x>")
    assert split.operations[-1].head == "LOAD"
    split = st.split_update("INSERT DATA { <a:a> <a:b> 'x' ; LOAD <http://x>")
    assert len(split.operations) == 1  # unbalanced: one block to the end, no LOAD seen


def test_block_end_skips_braces_in_strings_iris_and_comments() -> None:
    text = "{ '}' \"{\" '''}}''' <http://x#}> # }\n { } FILTER(?a<?b) }tail"
    assert text[st.block_end(text, 0):] == "tail"
    assert st.block_end("{ { }", 0) == 5


def classify(text: str) -> list[st.ParsedOperation]:
    return [st.classify(text, op) for op in st.split_update(text).operations]


def test_classify_graph_management() -> None:
    ops = classify("CLEAR SILENT GRAPH <http://g> ; drop named ; CREATE GRAPH ex:g ;"
                   " ADD SILENT DEFAULT TO GRAPH <http://g> ; MOVE <http://a> TO DEFAULT ;"
                   " COPY GRAPH <http://a> TO <http://b> ; LOAD <http://x> INTO GRAPH <http://g>")
    assert [(o.kind, o.silent, o.target, o.graph) for o in ops[:3]] == [
        ("CLEAR", True, "GRAPH", "<http://g>"), ("DROP", False, "NAMED", None),
        ("CREATE", False, "GRAPH", "ex:g")]
    assert [(o.kind, o.silent, o.source, o.destination) for o in ops[3:6]] == [
        ("ADD", True, None, "<http://g>"), ("MOVE", False, "<http://a>", None),
        ("COPY", False, "<http://a>", "<http://b>")]
    assert ops[6].kind == "LOAD"


def test_classify_modify_with_using_and_blocks() -> None:
    text = ("PREFIX ex: <http://ex/>\n"
            "WITH ex:g DELETE { ?s ex:p '}' } INSERT { ?s ex:q [ ex:r ?o ] }\n"
            "USING ex:u USING NAMED <http://n> WHERE { ?s ex:p ?o FILTER(?o != \"{\") }")
    [op] = classify(text)
    assert op.kind == st.MODIFY and op.with_iri == "ex:g"
    assert op.delete == "{ ?s ex:p '}' }"
    assert op.insert == "{ ?s ex:q [ ex:r ?o ] }"
    assert op.using == ((False, "ex:u"), (True, "<http://n>"))
    assert op.where == '{ ?s ex:p ?o FILTER(?o != "{") }'


def test_classify_data_and_delete_where() -> None:
    ops = classify("insert data { <a:a> <a:b> 'c' } ; DELETE DATA { GRAPH <a:g> { <a:a> <a:b> 1 }"
                   " } ; DELETE WHERE { ?s <a:b> ?o } ; INSERT { ?s <a:c> ?o } WHERE { ?s ?p ?o }")
    assert [o.kind for o in ops] == ["INSERT DATA", "DELETE DATA", "DELETE WHERE", "MODIFY"]
    assert ops[0].data == "{ <a:a> <a:b> 'c' }"
    assert ops[2].where == ops[2].delete == "{ ?s <a:b> ?o }"
    assert ops[3].delete is None


@pytest.mark.parametrize("text", ["CLEAR", "INSERT { <a:a> <a:b> <a:c> }", "WITH <a:g> WHERE {}",
                                  "DELETE DATA { <a:a> <a:b> <a:c>", "FOO BAR"])
def test_classify_rejects_what_it_cannot_structure(text: str) -> None:
    with pytest.raises(st.SparqlTextError):
        classify(text)


def test_rewrite_template_variables_and_literal_subjects() -> None:
    def var(name: str) -> str:
        return f"urn:v:{name}"

    out = st.rewrite_template(
        '{ ?s ex:p $o . "x"@en ex:p [ ex:q ?o ] . 1 ex:p ?o . '
        'GRAPH ?g { "y"^^ex:dt ex:p ?o ; ex:q true } true ex:p ex:o }', var, "urn:v:-lit")
    assert out == ('{ <urn:v:s> ex:p <urn:v:o> . <urn:v:-lit> ex:p [ ex:q <urn:v:o> ] . '
                   '<urn:v:-lit> ex:p <urn:v:o> . GRAPH <urn:v:g> { <urn:v:-lit> ex:p '
                   '<urn:v:o> ; ex:q true } <urn:v:-lit> ex:p ex:o }')


def test_rewritten_template_is_insert_data_for_pyoxigraph() -> None:
    block = "{ ?s <http://p> ( 1 ?o ) ; <http://q> [ <http://r> ?o ] . GRAPH ?g { ?s ?p 2 } }"
    text = st.rewrite_template(block, lambda n: f"urn:v:{n}", "urn:v:-lit")
    store = ox.Store()
    store.update(f"INSERT DATA {text}")
    assert {str(q.graph_name) for q in store} == {"<urn:v:g>", "DEFAULT"}
