"""Imported by the scan's forkserver after the L4 modules (``procs._preload``), never by L4
itself: it builds one ``Scanner``, which compiles the shipped masking rules and loads the stage
rules (each cached per process), so every worker process forked from the server starts with
them instead of spending its first ~0.04 s on it."""

from l4_plugin.ingest.scanner import Scanner

Scanner()
