"""The service layer: the operations every entry point (CLI, HTTP API, portal, Python API) calls."""
