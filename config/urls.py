from django.contrib import admin
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.urls import include, path
from django.utils.translation import gettext
from django_rq import urls as rq_urls


def _superusers_only(view):
    """django-rq's pages let any staff member empty queues and delete jobs; here
    only superusers may (content editors would strand sources as "Queued")."""

    def guarded(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), "admin:login")
        if not (request.user.is_active and request.user.is_superuser):
            raise PermissionDenied(
                gettext("Only superusers may manage the job queues.")
            )
        return view(request, *args, **kwargs)

    return guarded


# Its JSON statistics too (they name the Redis server): no API token is configured.
rq_patterns = [
    *rq_urls.get_api_urlpatterns(),
    *rq_urls.get_admin_urlpatterns(),
]
for _pattern in rq_patterns:
    _pattern.callback = _superusers_only(_pattern.callback)
# Uploaded files are not served from MEDIA_URL, even with DEBUG: a source's file
# is only reachable through kb:source-file, which checks the collection's groups.
urlpatterns = [
    path("admin/rq/", include((rq_patterns, "django_rq"))),
    path("admin/", admin.site.urls),
    # set_language: the header's language switcher posts here (issue #27).
    path("i18n/", include("django.conf.urls.i18n")),
    path("", include("kb.urls")),
]
