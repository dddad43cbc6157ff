"""Section bodies run to the next section's start, so that they tile the document.

Retrieval builds the text it cites from the bodies of the sections it read instead
of loading whole sources (issue #8); the gap after a section (blank lines, link
definitions) must be there for passages of adjacent sections to merge exactly.
"""

from django.db import migrations

TILE_BODIES = """
UPDATE kb_section AS s
SET body = substr(
    src.text,
    s.start + 1,
    COALESCE(
        (SELECT min(n.start) FROM kb_section AS n
         WHERE n.source_id = s.source_id AND n.start > s.start),
        length(src.text)
    ) - s.start
)
FROM kb_source AS src
WHERE src.id = s.source_id
"""

TRIM_BODIES = """
UPDATE kb_section AS s
SET body = substr(src.text, s.start + 1, s."end" - s.start)
FROM kb_source AS src
WHERE src.id = s.source_id
"""


class Migration(migrations.Migration):
    dependencies = [("kb", "0002_initial")]

    operations = [migrations.RunSQL(TILE_BODIES, TRIM_BODIES)]
