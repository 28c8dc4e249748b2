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
# A lapsed lease, as the sweeper re-dispatches the run (once per lapse). run: Run (fence, lease_owner,
# attempts and lease_expires_at of the claim that lapsed)
run_lease_lapsed = Signal()
# A worker found its claim of ``run`` taken over and stopped (its writes from then on refused).
# run: Run (the worker's claim), holder: dict (fence, owner, status of the run now), error: str
run_lease_lost = Signal()
# Long-term memory (runtime.store): a run put or deleted a store item.
# operation: StoreOperation, namespace: tuple[str, ...], key: str, value: dict | None (None: deleted)
store_written = Signal()
