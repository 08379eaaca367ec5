"""Pure policies and values: no I/O, no clock reads, stdlib and small pure libraries."""
