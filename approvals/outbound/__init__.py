"""Outbound: data Gatehouse sends out — webhooks to subscribed URLs.

``outbox`` turns domain events into delivery rows inside the change's
transaction and dispatches them after commit; ``tasks`` holds the Celery tasks
that send them (by name, ``approvals.deliver_webhook``) and re-dispatch lost ones.
"""
