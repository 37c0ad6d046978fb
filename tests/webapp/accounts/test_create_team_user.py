"""`create_team_user --password-file`: a new user's password is also kept in a file only its owner can read, for
`make run` to show again; an existing user's file is left alone."""

from __future__ import annotations

import stat
from io import StringIO

import pytest
from django.core.management import call_command

from webapp.accounts.models import User

pytestmark = pytest.mark.django_db


def test_a_new_users_password_is_kept_in_a_file_only_its_owner_reads(tmp_path):
    path = tmp_path / "state" / "demo-password"
    call_command("create_team_user", team="Demo Team", username="demo", password_file=path, stdout=StringIO())
    password = path.read_text().strip()
    assert User.objects.get(username="demo").check_password(password)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    path.write_text("kept\n")
    call_command("create_team_user", team="Demo Team", username="demo", password_file=path, stdout=StringIO())
    assert path.read_text() == "kept\n"
