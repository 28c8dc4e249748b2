"""``Thread.updated_at`` takes its row's ``created_at`` on insert (``runtime.models.UpdatedAtField``).

Only Django's model state changes: the column stays what it was (a timestamp, not null), and SQLite
would otherwise rebuild the table for an ``AlterField`` whose SQL is the same.
"""

from django.db import migrations

import runtime.models


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0010_lz4_compression"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="thread",
                    name="updated_at",
                    field=runtime.models.UpdatedAtField(),
                ),
            ],
            database_operations=[],
        ),
    ]
