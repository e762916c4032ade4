"""Where the data files shipped with the product (ingest/, rules/, kibana_saved_objects/) live.

In a wheel they are inside the package (``l4_plugin/_data``); in a source checkout or an editable
install they are the top-level folders of the repository.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_path(*parts: str) -> Path:
    """The path of a shipped data file or folder, e.g. ``data_path("ingest", "masking.yaml")``."""
    packaged = _PACKAGE.joinpath("_data", *parts)
    if packaged.exists():
        return packaged
    return _PACKAGE.parent.joinpath(*parts)
