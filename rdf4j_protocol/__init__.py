"""The RDF4J REST protocol and the query side of the SPARQL 1.1 Protocol.

Theory of operation. An HTTP shell hands the protocol modules what it received (the query
string, the body, the Content-Type and Accept headers) and gets back typed, validated
values; nothing but ``routes`` knows HTTP, and nothing here touches a store or a socket:

* ``parameters``: the request's parameters and RDF4J's N-Triples encoded values;
* ``negotiation``: the result format an Accept header chooses, the format of a body;
* ``reads``: a query request or a statement pattern;
* ``writes``: the cluster's transaction operations a write becomes (their JSON wire form),
  every body checked first (RDF parsed, an update checked as a worker would:
  rdfcore/update_syntax.py), so nothing malformed becomes an operation;
* ``transactions``: the steps of an RDF4J transaction and the open transactions;
* ``results``: SPARQL results written in Python (listings, booleans);
* ``binary_rdf`` and ``binary_results``: RDF4J's binary formats;
* ``routes``: the one route table both node kinds mount, over their own ``Backend``
  (a worker runs the operations on its store; a master routes reads to its workers and
  sends writes through its write path).

Everything malformed raises ``parameters.ProtocolError`` with the HTTP status to answer and
a message saying what is wrong.
"""
