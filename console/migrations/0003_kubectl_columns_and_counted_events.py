# Written by hand (makemigrations would ask for a default for the new unique `key`): the
# mirror's rows are never read back (I6) and its first sync rebuilds every table, so the old
# per-write Event rows are dropped before the Event's name becomes the key.

from typing import Any

from django.db import migrations, models


def forget_event_rows(apps: Any, schema_editor: Any) -> None:
    apps.get_model("console", "RecentEvent").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0002_gated_pods"),
    ]

    operations = [
        migrations.AddField(
            model_name="trackedpod",
            name="status",
            field=models.CharField(blank=True, db_index=True, max_length=80),
        ),
        migrations.AddField(
            model_name="trackedpod",
            name="ready",
            field=models.CharField(blank=True, max_length=20),
        ),
        migrations.AddField(
            model_name="trackedpod",
            name="restarts",
            field=models.IntegerField(default=0),
        ),
        migrations.AddField(
            model_name="trackedpod",
            name="last_restart_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="last restart"),
        ),
        migrations.AddField(
            model_name="trackedpod",
            name="created_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="created"),
        ),
        migrations.RunPython(forget_event_rows, migrations.RunPython.noop),
        migrations.AddField(
            model_name="recentevent",
            name="key",
            field=models.CharField(default="", max_length=507, unique=True),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="recentevent",
            name="seq",
            field=models.BigIntegerField(db_index=True),
        ),
        migrations.AddField(
            model_name="recentevent",
            name="count",
            field=models.IntegerField(default=1),
        ),
        migrations.AddField(
            model_name="recentevent",
            name="first_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="first seen"),
        ),
        migrations.AlterField(
            model_name="recentevent",
            name="at",
            field=models.DateTimeField(db_index=True, verbose_name="last seen"),
        ),
    ]
