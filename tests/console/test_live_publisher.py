"""The live publisher's batches: a flush is answered only once everything queued before it was sent."""

from __future__ import annotations

import queue
import threading

from console.live import _STOP, _Publisher


def _unstarted() -> _Publisher:
    publisher = _Publisher.__new__(_Publisher)  # its queue alone: this test consumes the batches itself
    publisher.queue = queue.Queue()
    return publisher


def test_a_flush_is_set_only_after_the_events_queued_before_it_were_handed_on():
    publisher = _unstarted()
    first, second, later = {"action": "a"}, {"action": "b"}, {"action": "c"}
    flushed = threading.Event()
    for item in (first, second, flushed, later, _STOP):
        publisher.queue.put(item)
    batches = publisher._batches()
    assert next(batches) == [first, second]  # the batch ends at the flush: nothing after it rides along
    assert not flushed.is_set()  # handed out, not yet sent: the caller sends it before asking for more
    assert next(batches) == [later]
    assert flushed.is_set()
    assert next(batches, None) is None  # the stop ends the thread's loop


def test_a_flush_with_nothing_before_it_is_set_at_once():
    publisher = _unstarted()
    flushed = threading.Event()
    publisher.queue.put(flushed)
    publisher.queue.put(_STOP)
    assert list(publisher._batches()) == []
    assert flushed.is_set()


def test_batches_hold_at_most_two_hundred_events():
    publisher = _unstarted()
    for n in range(450):
        publisher.queue.put({"n": n})
    publisher.queue.put(_STOP)
    assert [len(batch) for batch in publisher._batches()] == [200, 200, 50]
