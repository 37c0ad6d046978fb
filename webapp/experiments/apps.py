"""App registration for experiments."""

from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "webapp.experiments"
    label = "experiments"
    default_auto_field = "django.db.models.BigAutoField"
