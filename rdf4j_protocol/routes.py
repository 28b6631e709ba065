"""The RDF4J REST protocol's routes."""

from __future__ import annotations

PROTOCOL_VERSION = "12"
