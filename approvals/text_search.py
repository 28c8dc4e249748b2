"""Case-insensitive "contains" for the console's searches, the same on both databases.

PostgreSQL's ``icontains`` (``UPPER(x) LIKE UPPER(y)``) folds every script's letters; SQLite's ``LIKE``
folds ASCII only, so on the embedded database "zoë" did not find "ZOË" and "ÇELIK" did not find
"Çelik". ``contains_text`` is ``icontains`` on PostgreSQL and, on SQLite, Python's ``str.casefold`` on
both sides (a function registered on each new connection) compared with ``instr``, which needs no
escaping of ``%`` and ``_``.
"""

from __future__ import annotations

from typing import Any

from django.db.models.lookups import IContains

CASEFOLD = "gatehouse_casefold"


def _casefold(value: Any) -> Any:
    return value.casefold() if isinstance(value, str) else value


def sqlite_casefold_register(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: SQLite connections get ``gatehouse_casefold(text)``."""
    if connection.vendor == "sqlite":
        connection.connection.create_function(CASEFOLD, 1, _casefold, deterministic=True)


class ContainsText(IContains):
    """``ContainsText(F("title"), q)``: a filter expression (``Q(ContainsText(...))``)."""

    def as_sqlite(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        if not isinstance(self.rhs, str):
            return super().as_sql(compiler, connection)
        lhs, params = self.process_lhs(compiler, connection)
        return f"instr({CASEFOLD}({lhs}), {CASEFOLD}(%s)) > 0", (*params, self.rhs)
