"""Outbound: data Gatehouse sends out — signed webhooks to subscribed URLs.

- ``outbox``: domain events (``approvals.events``, runtime signals) become
  OutboundDelivery rows inside the change's transaction; dispatched after commit.
- ``sending``: one claimed, signed attempt at a time; backoff, give-up, manual retry.
- ``destinations``: which addresses may be reached (no internal or metadata ones).
- ``signing``: Standard Webhooks secrets and signatures (inbound endpoints use the same form).
- ``subscriptions``: who receives which events, and who may see them.
- ``tasks``: the Celery tasks, sent by name (``approvals.deliver_webhook``, ``approvals.sweep_webhooks``).
- ``api``: ``/api/webhook-subscriptions`` and ``/api/webhook-deliveries``.
"""
