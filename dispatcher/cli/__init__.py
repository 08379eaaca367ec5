"""The `dispatcher` command."""
