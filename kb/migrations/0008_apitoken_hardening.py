import hashlib

from django.db import migrations, models


def stamp_existing(apps, schema_editor):
    """Tokens made before stamps existed stay valid until the next password change."""
    ApiToken = apps.get_model("kb", "ApiToken")
    for token in ApiToken.objects.select_related("user"):
        digest = hashlib.sha256(token.user.password.encode()).hexdigest()
        ApiToken.objects.filter(pk=token.pk).update(password_stamp=digest)


class Migration(migrations.Migration):
    dependencies = [
        ("kb", "0007_search_vector_gin_no_pending_list"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="expires",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="password_stamp",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="revoked",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(stamp_existing, migrations.RunPython.noop),
    ]
