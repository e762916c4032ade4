"""The one store interface of the rule engine: what matching, resolving and harvesting read.

``l4_plugin.store.Store`` satisfies it; the engine (``engine``), the message resolver
(``resolver``), the draft harvest (``harvest``) and the rule tests (``testing``) all take it, so a
second store (a recording proxy, another cluster client) has one set of calls to provide. The
index names are the store's own ``store.names.IndexNames``, not a second description of them.
"""

from __future__ import annotations

from typing import Any, Protocol

from l4_plugin.store.events import EventSource


class RuleStorePort(EventSource, Protocol):
    """The read calls of ``l4_plugin.store.Store`` that the rule engine uses: the event
    readers' (``store.events.EventSource``), plus searches and counts."""

    def search(self, index: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def count(self, index: str, query: dict[str, Any] | None = None) -> int: ...
