"""The audit trail partitioned into chains (approvals/audit.py, docs/security-audit.md).

Every existing event and anchor becomes chain 0, as it is: no hash is
rewritten (the append-only triggers fire on row UPDATEs; adding a column with a
default is DDL and rewrites nothing). New events go to chains 1..N. The column
keeps no database default, so a process still running the previous code fails
its audited writes until it restarts, instead of appending to chain 0 after
the newest event of any chain. The index finds a chain's head for each append.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0018_bulk_actions"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditanchor",
            name="chain",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="chain",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(fields=["chain", "-id"], name="audit_chain_head"),
        ),
    ]
