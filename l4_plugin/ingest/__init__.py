"""Ingest: job directories and log files → parsed, masked, templated rollups in the cluster."""
