"""Start-up objects out of the cyclic garbage collector's way (``gc.freeze``).

A server process starts with ~250k objects (Django, the apps, LangGraph, the graphs) that live as
long as it does. Python's full collections walked every one of them: ~180 ms each on a 2-core
machine, every few hundred requests — a pause of every request and websocket of that process, the
~200 ms outliers of the console-at-scale benchmark (docs/performance.md, "Round 6"). Frozen, they
are never walked again, and a full collection walks only what requests left behind (5–30 ms).
Frozen objects are never freed either, which is what start-up objects of a server are anyway.
"""

from __future__ import annotations

import gc


def heap_freeze(**_: object) -> int:
    """Collect start-up garbage, then freeze everything alive; the number of objects frozen.

    Call once start-up is done (imports, settings, graphs loaded); a Celery ``worker_init`` receiver too.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
