"""A scratch copy points at the collection it was made from, whose groups decide
who may see it (issue #26). Copies made before: a shadow index's from its shadow,
an evaluation run's from the name in its description; any other (kb_eval,
benchmarks) has none, and is open to superusers only."""

import django.db.models.deletion
from django.db import migrations, models

COPY_OF = "Evaluation copy of "


def link_copies(apps, schema_editor):
    Collection = apps.get_model("kb", "Collection")
    ShadowIndex = apps.get_model("kb", "ShadowIndex")
    for shadow in ShadowIndex.objects.exclude(scratch=None):
        Collection.objects.filter(pk=shadow.scratch_id, is_scratch=True).update(
            live_id=shadow.collection_id
        )
    copies = Collection.objects.filter(
        is_scratch=True, live=None, description__startswith=COPY_OF
    )
    for copy in copies:
        name = copy.description.removeprefix(COPY_OF)
        live = Collection.objects.filter(is_scratch=False, name=name).first()
        if live is not None:
            Collection.objects.filter(pk=copy.pk).update(live_id=live.pk)


class Migration(migrations.Migration):
    dependencies = [("kb", "0013_deprecated_flag_on_chunks")]

    operations = [
        migrations.AddField(
            model_name="collection",
            name="live",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="scratch_copies",
                to="kb.collection",
            ),
        ),
        migrations.RunPython(link_copies, migrations.RunPython.noop),
    ]
