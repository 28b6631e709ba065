"""HTTP APIs of a worker: the RDF4J REST protocol (rdf4j.py) and cluster control."""
