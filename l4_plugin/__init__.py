"""L4: diagnose large-scale LLM training failures from their logs."""

__version__ = "0.2.0"
