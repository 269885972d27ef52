"""A minimal Django project for scripts/libraries: one app (`shop`) whose model is audited by
django-auditlog and versioned by django-simple-history. The database comes from the
environment (LIBS_PGPORT, LIBS_DB), as the role `app_owner` that owns its schema."""

import os

SECRET_KEY = "scripts-libraries-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "auditlog",
    "simple_history",
    "shop",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["LIBS_DB"],
        "USER": "app_owner",
        "HOST": "127.0.0.1",
        "PORT": os.environ["LIBS_PGPORT"],
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
