"""App registration for the data a team brings."""

from django.apps import AppConfig


class DataConfig(AppConfig):
    name = "webapp.data"
    label = "data"
    default_auto_field = "django.db.models.BigAutoField"
