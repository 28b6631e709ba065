"""The master's HTTP APIs: client facade (RDF4J / SPARQL protocols) and admin API."""
