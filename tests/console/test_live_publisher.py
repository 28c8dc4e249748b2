"""The live publisher's batches: a flush is answered only once everything queued before it was sent; a full
queue's drops are logged once per episode."""

from __future__ import annotations

import logging
import threading

from console.live import _STOP, _Publisher


def _unstarted(maxsize: int = 0) -> _Publisher:
    return _Publisher(maxsize=maxsize, start=False)  # its queue alone: this test consumes the batches itself


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


def test_a_full_queue_logs_one_warning_per_episode_and_counts_its_drops(caplog):
    """Each dropped event was a WARNING of its own: 10,000 queued behind a Redis outage, then a line per event."""
    caplog.set_level(logging.DEBUG, logger="console.live")
    publisher = _unstarted(maxsize=2)
    for n in range(7):
        publisher.put({"action": "task.opened", "n": n})
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert [level for level, _ in lines] == ["WARNING"], lines
    assert "queue full" in lines[0][1]

    publisher.queue.get_nowait()  # the thread sent one: there is room again
    publisher.put({"action": "task.opened", "n": 7})
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert "5 live events were lost" in lines[1][1]

    publisher.queue.get_nowait()
    publisher.put({"action": "task.opened", "n": 8})  # accepted again: nothing more to say
    assert len([r for r in caplog.records if r.levelno >= logging.INFO]) == 2
