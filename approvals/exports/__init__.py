"""Exports: the audit trail leaving Gatehouse as a file a third party can verify.

``stream`` writes filtered rows as JSON Lines or CSV and verifies an
export's hash chain; ``api`` serves it as ``GET /api/audit/export``.
"""
