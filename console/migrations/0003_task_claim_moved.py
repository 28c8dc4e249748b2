# Claims are a domain concept now (approvals.TaskClaim, approvals 0012): the console forgets the
# model without touching its table, which approvals keeps under the same name with every row.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('console', '0002_heartbeat'),
        ('approvals', '0012_handoffs'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='TaskClaim')],
            database_operations=[],
        ),
    ]
