"""The ground floor both node kinds stand on: the cluster credential and signed requests,
TLS, properties files, the HTTP server and pool, JSON bodies, request limits, memory
release. Imports no service and no shell."""
