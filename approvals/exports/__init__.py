"""Exports: the audit trail leaving Gatehouse as a file a third party can verify.

- ``stream``: filtered rows as JSON Lines or CSV, streamed from a server-side cursor; each export is audited.
- ``verify``: re-check an exported JSONL file's hashes, links and trailer (``manage.py audit_export --verify``).
- ``api``: ``GET /api/audit/export``.
"""
