#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # reads the environment and services.env
    except ImproperlyConfigured as exc:
        # A setting to fix is one line that says which, not a traceback (#26).
        sys.exit(f"error: {exc}")
    execute_from_command_line(sys.argv)
