"""A call that raised: ``failed`` when the provider did not act, ``unknown`` when it may have.

A loan's payment timed out at the bank client and was recorded ``failed`` while the bank had paid it:
the console and ``gatehouse_effects{status="failed"}`` told an operator the money had not moved.
(The rule is in runtime/effects.py's docstring; the flow with the real worker and bank is in
tests/integration/test_effect_outcomes.py.)
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from langgraph.graph import END, START, StateGraph

from runtime import effects
from runtime.fencing import FENCE_KEY
from runtime.models import Effect, EffectStatus, Thread

pytestmark = pytest.mark.usefixtures("live_db")

_REQUEST = httpx.Request("POST", "http://bank.test/payments")


def _graph(call: Callable[[str], Any]) -> Any:
    def act(state: dict[str, Any]) -> dict[str, Any]:
        return {"result": effects.perform_effect("charge", call, args={"amount": 10})}

    builder: StateGraph[Any] = StateGraph(dict)  # type: ignore[type-var]
    builder.add_node("act", act)
    builder.add_edge(START, "act")
    builder.add_edge("act", END)
    return builder.compile()


def _charge(thread: Thread, call: Callable[[str], Any]) -> Any:
    return _graph(call).invoke({}, {"configurable": {"thread_id": str(thread.id), FENCE_KEY: thread.fence}})


def _raising(exc: BaseException) -> Callable[[str], Any]:
    def call(key: str) -> Any:
        raise exc

    return call


def _wrapped(inner: BaseException) -> BaseException:
    """A client's own error raised from a transport error, as clients wrap them."""
    try:
        raise inner
    except BaseException as exc:
        try:
            raise RuntimeError("payment call failed") from exc
        except RuntimeError as outer:
            return outer


def _socket_timeout() -> BaseException:
    """What a socket read with a timeout raises when no answer comes (``socket.timeout``)."""
    ours, theirs = socket.socketpair()
    ours.settimeout(0.01)
    try:
        ours.recv(1)
    except OSError as exc:
        return exc
    finally:
        ours.close()
        theirs.close()
    raise AssertionError("the read did not time out")


def _refused() -> httpx.HTTPStatusError:
    response = httpx.Response(422, request=_REQUEST, json={"error": "insufficient funds"})
    return httpx.HTTPStatusError("422 Unprocessable Entity", request=_REQUEST, response=response)


# (what the call raised, built when the test runs) → the status recorded
OUTCOMES = [
    pytest.param(lambda: TimeoutError("timed out"), "unknown", id="timeout"),
    pytest.param(_socket_timeout, "unknown", id="socket-timeout"),
    pytest.param(lambda: ConnectionResetError("reset by peer"), "unknown", id="connection-reset"),
    pytest.param(lambda: BrokenPipeError("broken pipe"), "unknown", id="broken-pipe"),
    pytest.param(lambda: httpx.ReadTimeout("read timed out", request=_REQUEST), "unknown", id="httpx-read-timeout"),
    pytest.param(lambda: httpx.WriteTimeout("write timed out", request=_REQUEST), "unknown", id="httpx-write-timeout"),
    pytest.param(lambda: httpx.RemoteProtocolError("server disconnected", request=_REQUEST), "unknown", id="cut"),
    pytest.param(lambda: _wrapped(httpx.ReadTimeout("timed out", request=_REQUEST)), "unknown", id="wrapped-timeout"),
    pytest.param(lambda: effects.EffectOutcomeUnknown("no answer"), "unknown", id="said-unknown"),
    pytest.param(lambda: ConnectionRefusedError("refused"), "failed", id="connection-refused"),
    pytest.param(lambda: httpx.ConnectError("refused", request=_REQUEST), "failed", id="httpx-connect"),
    pytest.param(lambda: httpx.ConnectTimeout("timed out", request=_REQUEST), "failed", id="httpx-connect-timeout"),
    pytest.param(lambda: httpx.PoolTimeout("no connection", request=_REQUEST), "failed", id="httpx-pool-timeout"),
    pytest.param(lambda: _wrapped(httpx.ConnectError("refused", request=_REQUEST)), "failed", id="wrapped-connect"),
    pytest.param(_refused, "failed", id="refused-by-the-provider"),
    pytest.param(lambda: KeyError("loan_id"), "failed", id="before-the-call"),
    pytest.param(lambda: effects.EffectNotPerformed("declined"), "failed", id="said-not-performed"),
    pytest.param(lambda: _wrapped(effects.EffectNotPerformed("x")), "failed", id="said-not-performed-inside"),
]


@pytest.mark.parametrize("raised,status", OUTCOMES)
def test_a_call_that_raised_is_recorded_failed_only_if_the_provider_did_not_act(raised, status):
    thread = Thread.objects.create(graph="zombie_pay", fence=1)
    exc = raised()
    with pytest.raises(type(exc)):
        _charge(thread, _raising(exc))
    effect = Effect.objects.get(thread=thread)
    assert (effect.status, effect.calls) == (status, 1)  # the stored value: its meaning is the test's id
    assert type(exc).__name__ in effect.error


def test_the_callers_word_decides_over_the_transport_error_it_wraps():
    """A client that knows its provider refused before acting says so, whatever error carried the refusal."""

    class Declined(effects.EffectNotPerformed):
        pass

    thread = Thread.objects.create(graph="zombie_pay", fence=1)
    try:
        raise TimeoutError("the provider's decline arrived late")
    except TimeoutError as timeout:
        declined = Declined("declined")
        declined.__cause__ = timeout
    with pytest.raises(Declined):
        _charge(thread, _raising(declined))
    assert Effect.objects.get(thread=thread).status == EffectStatus.FAILED


@pytest.mark.parametrize(
    "first,status",
    [(lambda: TimeoutError("no answer"), "unknown"), (lambda: ConnectionRefusedError("bank down"), "failed")],
    ids=["unknown", "failed"],
)
def test_a_retry_after_an_unknown_or_failed_call_records_the_providers_answer_as_done(first, status):
    """The retry calls again under the same key: the provider pays, or replays the payment it made."""
    thread = Thread.objects.create(graph="zombie_pay", fence=1)
    keys: list[str] = []

    def bank(key: str) -> Any:
        keys.append(key)
        if len(keys) == 1:
            raise first()
        return {"paid": 10, "replayed": True}

    with pytest.raises(OSError):
        _charge(thread, bank)
    assert Effect.objects.get(thread=thread).status == status
    assert _charge(thread, bank)["result"] == {"paid": 10, "replayed": True}
    effect = Effect.objects.get(thread=thread)
    assert keys == [effect.key, effect.key]
    assert (effect.status, effect.result, effect.error, effect.calls) == (
        EffectStatus.DONE,
        {"paid": 10, "replayed": True},
        "",
        2,
    )


def test_an_unknown_outcome_stays_unknown_when_the_retry_never_reaches_the_provider():
    """The first call may have paid; the retry, refused at connect, says nothing of it."""
    thread = Thread.objects.create(graph="zombie_pay", fence=1)
    attempts = [TimeoutError("read timed out"), ConnectionRefusedError("bank down")]

    def bank(key: str) -> Any:
        if attempts:
            raise attempts.pop(0)
        return {"paid": 10, "replayed": True}

    for raised in (TimeoutError, ConnectionRefusedError):
        with pytest.raises(raised):
            _charge(thread, bank)
    effect = Effect.objects.get(thread=thread)
    assert (effect.status, effect.calls) == ("unknown", 2) and "bank down" in effect.error
    _charge(thread, bank)
    effect.refresh_from_db()
    assert (effect.status, effect.result) == (EffectStatus.DONE, {"paid": 10, "replayed": True})


def test_a_timeout_after_another_worker_recorded_the_result_leaves_it_done():
    """The guard holds for ``unknown`` as for ``failed``: a zombie's late timeout never hides a payment."""
    thread = Thread.objects.create(graph="zombie_pay", fence=1)

    def late(key: str) -> Any:
        Effect.objects.filter(key=key).update(status=EffectStatus.DONE, result={"paid": "by the other worker"})
        raise TimeoutError("read timed out")

    with pytest.raises(TimeoutError):
        _charge(thread, late)
    effect = Effect.objects.get(thread=thread)
    assert (effect.status, effect.result) == (EffectStatus.DONE, {"paid": "by the other worker"})
