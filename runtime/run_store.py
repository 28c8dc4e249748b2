"""The process's store as one run sees it: every operation recorded against the run (``runtime.store``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from langgraph.config import get_config
from langgraph.store.base import BaseStore, GetOp, ListNamespacesOp, Op, PutOp, Result, SearchOp

from runtime import rows, signals
from runtime.fencing import config_fence, fence_hold
from runtime.store import OP_DELETE, OP_GET, OP_LIST, OP_PUT, OP_SEARCH, namespace_label, store_get


class RecordingStore(BaseStore):
    """The process's store, seen by one run: every operation is recorded against the run.

    Only ``batch``/``abatch`` are overridden: every ``BaseStore`` method goes through them.
    """

    def __init__(self, inner: BaseStore, *, thread_id: Any, run_id: Any, lease_owner: str | None = None) -> None:
        self.inner = inner
        self.thread_id = thread_id
        self.run_id = run_id
        # The worker holding the run's lease (its claim), when the caller knows it: the audit of a
        # write names it without reading the run again.
        self.lease_owner = lease_owner
        self.supports_ttl = inner.supports_ttl

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if not any(isinstance(op, PutOp) for op in ops):
            results = self.inner.batch(ops)
            self._record(ops, results)
            return results
        # Writes are recorded (and audited, by the signal's receiver) first, in one transaction
        # around the store write: a write that fails rolls its records back; a record that
        # fails stops the write. A claimed run's write holds its fence in that transaction: a
        # worker that lost the run (taken over, cancelled) writes, records and audits nothing.
        fenced = _writer_fence()
        with transaction.atomic():
            if fenced is not None:
                fence_hold(thread_id=fenced[0], fence=fenced[1], run_id=self.run_id)
            self._record_writes(ops)
            results = self.inner.batch(ops)
            self._record(
                [op for op in ops if not isinstance(op, PutOp)],
                [r for op, r in zip(ops, results, strict=True) if not isinstance(op, PutOp)],
            )
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.batch, thread_sensitive=False)(list(ops))

    def _record_writes(self, ops: list[Op]) -> None:
        from runtime.models import StoreOperation

        writes = [op for op in ops if isinstance(op, PutOp)]
        records = [rows.row_insert(self._row(op, None)) for op in writes]
        known = {} if self.lease_owner is None else {"lease_owner": self.lease_owner}
        for row, op in zip(records, writes, strict=True):
            signals.store_written.send(
                sender=StoreOperation, operation=row, namespace=tuple(op.namespace), key=op.key, value=op.value, **known
            )

    def _record(self, ops: list[Op], results: list[Result]) -> None:
        from runtime.models import StoreOperation

        records = [self._row(op, r) for op, r in zip(ops, results, strict=True)]
        if len(records) == 1:
            # One row (a node's get or search, on every run that reads memory): one prepared
            # statement, which in autocommit is all it takes; a bulk insert wraps even one row in
            # its own transaction.
            rows.row_insert(records[0])
        elif records:
            StoreOperation.objects.bulk_create(records)

    def _row(self, op: Op, result: Result) -> Any:
        from runtime.models import StoreOperation

        common = {"thread_id": self.thread_id, "run_id": self.run_id}
        # Long labels or keys are cut to the row's width: the row says where, the store holds the item.
        if isinstance(op, GetOp):
            return StoreOperation(
                op=OP_GET,
                namespace=namespace_label(op.namespace),
                key=op.key[:512],
                hits=int(result is not None),
                **common,
            )
        if isinstance(op, PutOp):
            kind = OP_DELETE if op.value is None else OP_PUT
            return StoreOperation(op=kind, namespace=namespace_label(op.namespace), key=op.key[:512], hits=1, **common)
        if isinstance(op, SearchOp):
            hits = len(result) if isinstance(result, list) else 0
            return StoreOperation(
                op=OP_SEARCH, namespace=namespace_label(op.namespace_prefix), key="", hits=hits, **common
            )
        assert isinstance(op, ListNamespacesOp)  # noqa: S101 - the four op types of langgraph.store.base
        hits = len(result) if isinstance(result, list) else 0
        prefix = next((c.path for c in op.match_conditions or () if c.match_type == "prefix"), ())
        return StoreOperation(op=OP_LIST, namespace=namespace_label(prefix), key="", hits=hits, **common)


def _writer_fence() -> tuple[str, int] | None:
    """The fence of the claimed run whose graph code is writing, from its config as an effect reads it;
    None outside a runnable (not graph code) or a run without a fence (a graph driven directly)."""
    try:
        config = get_config()
    except RuntimeError:
        return None
    return config_fence(config)


def store_for_run(*, thread_id: Any, run_id: Any, lease_owner: str | None = None) -> BaseStore:
    return RecordingStore(store_get(), thread_id=thread_id, run_id=run_id, lease_owner=lease_owner)
