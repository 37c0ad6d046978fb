"""`manage.py register_shared_data`: the operator's files under INSPO_SHARED_DATA_DIR as shared data every team may
name (read-only), each checked like an upload but under no upload or team limit. One file per call, or a directory of
benchmark splits. A corpus of any size streams through in bounded memory with a progress line every few seconds, and
an interrupted call is resumed by running it again (`registering`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.core.errors import InvalidInput
from webapp.data.formats import SUFFIXES
from webapp.data.registering import Report
from webapp.data.services import shared_register


class Command(BaseCommand):
    help = (
        "Register a file (or a directory of <split>.jsonl files) under INSPO_SHARED_DATA_DIR as shared data: "
        "register_shared_data PATH --name NAME --kind questions|corpus [--split SPLIT]"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="A file, or a directory whose files are the splits, under the shared dir.")
        parser.add_argument("--name", required=True, help="What configs name: data:<name> (or data:shared/<name>).")
        parser.add_argument("--kind", required=True, choices=("questions", "corpus"))
        parser.add_argument("--split", default="", help="The file's split (questions; default train).")
        parser.add_argument(
            "--progress-every", type=float, default=5.0, help="Seconds between progress lines (and checkpoints)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        root = Path(settings.INSPO_SHARED_DATA_DIR).resolve()
        path = Path(options["path"]).expanduser().resolve()
        if not path.is_relative_to(root):
            raise CommandError(f"{path} does not lie under INSPO_SHARED_DATA_DIR ({root})")
        files = [(path, options["split"])]
        if path.is_dir():
            files = [(f, _split_of(f)) for f in sorted(path.iterdir()) if f.name.lower().endswith(SUFFIXES)]
            if not files:
                raise CommandError(f"{path} holds no {', '.join(SUFFIXES)} files")
        for file, split in files:
            try:
                done = shared_register(
                    path=file,
                    name=options["name"],
                    kind=options["kind"],
                    split=split,
                    progress=self._progress(file),
                    every=options["progress_every"],
                )
            except InvalidInput as error:
                raise CommandError(str(error)) from None
            except OSError as error:
                raise CommandError(f"{file}: {error.strerror or error}") from None
            version = done.version
            state = "registered" if done.created else "already registered"
            self.stdout.write(
                f"data:{options['name']} version {version.number} ({version.split}, {version.records} records, "
                f"sha256 {version.sha256[:12]}): {state}"
            )

    def _progress(self, file: Path) -> Callable[[Report], None]:
        def report(progress: Report) -> None:
            resumed = f", resumed at {progress.resumed_from / 1e6:,.0f} MB" if progress.resumed_from else ""
            self.stdout.write(f"{file.name}: {progress.line()}{resumed}")
            self.stdout.flush()

        return report


def _split_of(path: Path) -> str:
    name = path.name
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name
