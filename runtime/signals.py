"""Events the runtime emits; the domain (``approvals``) subscribes.

All are sent inside the transaction that records the change, so receivers
that write rows (tasks, audit events) commit or roll back together with it.
"""

from django.dispatch import Signal

# run: Run
run_claimed = Signal()
# run: Run, interrupts: list[PendingInterrupt]
run_interrupted = Signal()
# run: Run, values: dict
run_completed = Signal()
# run: Run, error: str
run_failed = Signal()
# effect: Effect
effect_executed = Signal()
# Long-term memory (runtime.store): a run put or deleted a store item.
# operation: StoreOperation, namespace: tuple[str, ...], key: str, value: dict | None (None: deleted)
store_written = Signal()
