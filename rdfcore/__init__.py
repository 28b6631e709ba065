"""The RDF ground floor: what masters, workers and the Spark pipeline all use.

    canonical.py    terms and quads as the store holds them (canonical literals)
    fingerprint.py  the repository fingerprint: sum of xxh3-128 of canonical N-Quads lines
    changeset.py    an exact changeset, its composition and inverse, and its wire form
    sparql_text.py  the structure of a SPARQL update request, found in its text
    update_syntax.py  an update checked without running it (master before logging, worker
                    before its changeset: one check)

Pure code over pyoxigraph terms: no service, no network, no configuration.
"""
