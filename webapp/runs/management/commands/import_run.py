"""`manage.py import_run`: load run directories of `python -m inspo_engine train --out DIR` into a team, printing
each run's id and the compare page for all of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q
from django.http import Http404
from django.urls import reverse

from webapp.accounts.models import Team, User
from webapp.core.errors import ServiceError
from webapp.runs.imports import run_import, run_source_read
from webapp.runs.models import Run


class Command(BaseCommand):
    help = (
        "Load run directories written by `python -m inspo_engine train --out DIR` (config.json, events.jsonl, "
        "checkpoints/) into a team; prints each run's id and the compare page's address."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directories", nargs="+", type=Path, metavar="DIR", help="a run directory")
        parser.add_argument("--team", required=True, help="the team's name or slug")
        parser.add_argument("--user", required=True, help="username of a member of the team: the runs' creator")
        parser.add_argument(
            "--name",
            action="append",
            help="the run's name (default: the directory's name); with several DIRs give it once per DIR, in order",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        directories: list[Path] = options["directories"]
        names: list[str | None] = options["name"] or [None] * len(directories)
        if len(names) != len(directories):
            raise CommandError(f"{len(names)} --name for {len(directories)} directories; give one per DIR or none")
        team, user = self._team(options["team"]), self._user(options["user"])
        runs: list[Run] = []
        try:
            for directory in directories:  # every directory is checked before any is loaded
                run_source_read(directory, team=team)
            for directory, name in zip(directories, names, strict=True):
                runs.append(run_import(team=team, user=user, directory=directory, name=name))
                self._show(runs[-1])
        except ServiceError as error:
            raise CommandError(self._partly(runs) + error.message) from error
        except (Http404, PermissionDenied) as error:
            reason = "is not a member of" if isinstance(error, Http404) else "may not add runs to"
            raise CommandError(f"{user.username} {reason} {team.name}") from error
        ids = ",".join(str(run.pk) for run in runs)
        self.stdout.write(f"compare: {reverse('runs:compare')}?runs={ids}")

    def _team(self, name: str) -> Team:
        teams = list(Team.objects.filter(Q(name=name) | Q(slug=name))[:2])
        if len(teams) != 1:
            raise CommandError(f"no team named {name!r}" if not teams else f"several teams are named {name!r}")
        return teams[0]

    def _user(self, username: str) -> User:
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        return user

    def _show(self, run: Run) -> None:
        ended = f": {run.error}" if run.error else ""
        self.stdout.write(f"{run.pk}  {run.name}  ({run.status}, step {run.step} of {run.total_steps}{ended})")

    @staticmethod
    def _partly(runs: list[Run]) -> str:
        return f"loaded {', '.join(str(run.pk) for run in runs)} before this failure: " if runs else ""
