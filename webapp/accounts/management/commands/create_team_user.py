"""`manage.py create_team_user`: make (or reuse) a team and a user in it, printing a new user's password once (and
with `--password-file` writing it to a file only its owner reads, for `make run` to show again), and with `--token` a
new API token of the user (printed once: only its digest is stored)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.text import slugify

from webapp.accounts.models import Role, Team, User
from webapp.accounts.services import api_token_create, membership_set, team_create, user_create
from webapp.core.errors import ServiceError

DEFAULT_TOKEN_NAME = "create_team_user"


class Command(BaseCommand):
    help = (
        "Create a team and a user in it (both are reused when they exist). A new user's password is printed once; "
        "--token also creates an API token for the user and prints it once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True, help="team name; its slug is derived unless --slug is given")
        parser.add_argument("--slug", default=None)
        parser.add_argument("--username", required=True)
        parser.add_argument("--email", default="")
        parser.add_argument("--password", default=None, help="default: a generated one, printed once")
        parser.add_argument("--role", choices=[r.value for r in Role], default=Role.OWNER.value)
        parser.add_argument("--superuser", action="store_true", help="also give the user the Django admin")
        parser.add_argument(
            "--password-file",
            type=Path,
            default=None,
            help="also write a new user's password to this file (mode 600); nothing is written for an existing user",
        )
        parser.add_argument(
            "--token",
            nargs="?",
            const=DEFAULT_TOKEN_NAME,
            default=None,
            metavar="NAME",
            help=f"also create an API token for the user, named NAME (default {DEFAULT_TOKEN_NAME!r}), printed once",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slug = options["slug"] or slugify(options["team"])
        try:
            team = Team.objects.filter(slug=slug).first() or team_create(name=options["team"], slug=slug)
            user = User.objects.filter(username=options["username"]).first()
            password = None
            if user is None:
                password = options["password"] or secrets.token_urlsafe(12)
                user = user_create(
                    username=options["username"],
                    password=password,
                    email=options["email"],
                    validate=options["password"] is not None,
                )
            membership_set(team=team, user=user, role=Role(options["role"]), by=None)
            key = None
            if options["token"] is not None:
                _, key = api_token_create(user=user, name=options["token"])
        except ServiceError as error:
            raise CommandError(error.message) from error
        if options["superuser"] and not user.is_superuser:
            User.objects.filter(pk=user.pk).update(is_staff=True, is_superuser=True)
        self.stdout.write(f"team: {team.name} ({team.slug})")
        if password is None:
            self.stdout.write(f"user: {user.username} exists; its password was printed when it was created")
        else:
            self.stdout.write(f"user: {user.username}\npassword: {password}")
            if options["password_file"] is not None:
                write_private(options["password_file"], password + "\n")
        if key is not None:
            self.stdout.write(f"token: {key}")


def write_private(path: Path, text: str) -> None:
    """`text` into `path`, readable and writable by its owner only, from the moment it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)
    path.chmod(0o600)
