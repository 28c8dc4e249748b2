"""The effect ledger: side effects in action nodes that happen once, however often the node runs.

Usage in an action node::

    def open_account(state):
        args = {"applicant": state["applicant"]["name"], "tier": state["tier"]}
        account = perform_effect(
            "open_account",
            lambda key: bank.open_account(**args, idempotency_key=key),
            args=args,
        )
        return {"account": account}

``args`` is what the effect is executed with. The ledger records it (canonical
JSON and its SHA-256) so ``decisions_verify`` can prove the effect is what the
decision before it signed, and refuses a replay of the same key with different
arguments (as a payment provider refuses an idempotency key reused with another
body): a key can never stand for two different effects.

The intent is recorded before the call and the result after it. A run that
lost its lease (another worker took the thread over) is refused before it
records the intent or calls out (``LeaseLost``); a call already under way when
the lease was lost is absorbed by the idempotency key. A node that
runs again (a retry, a redelivered run) gets the recorded result back without
calling the outside world. If the process dies between the call and the
record, the next attempt calls again *with the same key*, so a provider that
honours idempotency keys (Stripe, Adyen, most banking APIs) answers with the
first result instead of acting twice.

A call that raises is recorded as one of two statuses, because they ask an operator different things:

- ``failed``: the provider did not act. It answered with a refusal (a 4xx, a "not done, retry" 503),
  or the call failed before its request left (the code raised, the connection was refused).
- ``unknown`` (outcome unknown): the request may have reached the provider and no answer came back
  (a timeout, a connection cut mid-request). The payment may have been made. Recording it as
  ``failed`` told an operator the money had not moved when it had.

``effect_outcome_unknown`` decides, walking the exception and its causes (outermost first) as
``runtime.retry`` does; the first that says something decides:

1. the call's own word: ``EffectNotPerformed`` (failed) or ``EffectOutcomeUnknown`` (unknown), for a
   client that knows its provider better than the ledger can;
2. errors raised before a request left: ``ConnectionRefusedError``, a DNS failure, httpx's
   ``ConnectError``, ``ConnectTimeout``, ``PoolTimeout``, ``UnsupportedProtocol``, ``ProxyError``,
   ``LocalProtocolError``: failed;
3. errors that leave open whether the request arrived: ``TimeoutError`` (``socket.timeout``), the
   rest of ``ConnectionError`` (reset, aborted, broken pipe), and the rest of httpx's
   ``RequestError`` (``ReadTimeout``, ``WriteTimeout``, ``ReadError``, ``RemoteProtocolError``…):
   unknown.

Anything else (a refusal the client raised as its own error, a bug in the node) is ``failed``: a
client that can lose an answer some other way says so with ``EffectOutcomeUnknown``. An ``unknown``
effect stays ``unknown`` when a later attempt fails without reaching the provider: that attempt says
nothing of the first. Either way the error is re-raised, and a retry calls again under the same key:
the provider does it, or answers with what it did, and that result is recorded as ``done``.

This module is what a graph imports, and imports nothing of Django: the same graph file runs under
LangGraph alone (``langgraph dev``, a unit test with ``InMemorySaver``), where there is no ledger and
``perform_effect`` simply calls with the key. Under Gatehouse the ledger (``runtime.effect_ledger``)
keeps the promises above.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from runtime.jsonable import canonical_dumps
from runtime.retry import class_names, exception_chain

T = TypeVar("T")


def effect_key(name: str, *parts: object) -> str:
    """A key stable per thread and effect name (plus any parts you add): what ``perform_effect`` uses when
    given no key, scoped there to the thread's input cycle (``_cycle_scoped``) and branch."""
    from langgraph.config import get_config  # here: Django's start (runtime.apps) imports this module

    thread_id = get_config()["configurable"]["thread_id"]
    return ":".join(["gh", str(thread_id), name, *(str(p) for p in parts)])


class EffectArgsConflict(RuntimeError):
    """The idempotency key was already used for an effect with other arguments."""


class EffectNotPerformed(Exception):
    """Raised (or subclassed) by an effect's call: the provider certainly did not act. Recorded ``failed``."""


class EffectOutcomeUnknown(Exception):
    """Raised (or subclassed) by an effect's call: the request may have reached the provider, and no
    answer came back. Recorded ``unknown``."""


# Matched by (module, name) along the MRO, not imported: the runtime does not depend on httpx, and
# subclasses (a client's own wrappers) count too. httpx sets ``__module__ = "httpx"`` on its public names.
_NOT_SENT = {
    ("builtins", "ConnectionRefusedError"),
    ("socket", "gaierror"),
    ("httpx", "ConnectError"),
    ("httpx", "ConnectTimeout"),
    ("httpx", "PoolTimeout"),
    ("httpx", "UnsupportedProtocol"),
    ("httpx", "ProxyError"),
    ("httpx", "LocalProtocolError"),
}
_MAYBE_SENT = {
    ("builtins", "TimeoutError"),
    ("builtins", "ConnectionError"),
    ("httpx", "RequestError"),
}


def effect_outcome_unknown(exc: BaseException) -> bool:
    """True when ``exc``, raised by an effect's call, leaves open whether the provider acted (module docstring)."""
    for link in exception_chain(exc):
        if isinstance(link, EffectNotPerformed | EffectOutcomeUnknown):
            return isinstance(link, EffectOutcomeUnknown)
        names = class_names(link)
        if names & _NOT_SENT:
            return False
        if names & _MAYBE_SENT:
            return True
    return False


def canonical_json(value: Any) -> str:
    return canonical_dumps(value)


def args_digest(args: Any) -> str:
    return hashlib.sha256(canonical_json(args).encode()).hexdigest()


def perform_effect(
    name: str, call: Callable[[str], T], *, key: str | None = None, args: dict[str, Any] | None = None
) -> T:
    """Run ``call(idempotency_key)`` at most once per key and return its (recorded) result.

    ``args`` (JSON) are the arguments the effect is executed with; recorded
    with the intent. The result must be JSON-serialisable: it is what a replay returns.
    Without a ``key``, the key is the thread's and the effect's name, scoped to the thread's
    input cycle (a finished thread given new input pays again) and to its time-travel branch.
    """
    if _ledger is None:
        # LangGraph alone: no ledger to keep the call once; the provider's idempotency key still does.
        return call(key or effect_key(name))
    return _ledger(name, call, key=key, args=args)


class _Ledger(Protocol):
    def __call__(self, name: str, call: Callable[[str], T], *, key: str | None, args: dict[str, Any] | None) -> T: ...


# Installed by the runtime app as Django starts (runtime/apps.py): this module imports no Django.
_ledger: _Ledger | None = None


def ledger_install(perform: _Ledger) -> None:
    global _ledger  # set once, as Django starts
    _ledger = perform
