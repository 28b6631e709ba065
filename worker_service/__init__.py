"""Worker node: one repository in an embedded pyoxigraph store on disk."""
