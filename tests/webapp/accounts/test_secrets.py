"""A team's stored API keys: members store them, everyone in the team sees their names, nobody ever gets a value
back; the value is encrypted at rest and decrypts only as the key of that team and name."""

from __future__ import annotations

import pytest

from webapp.accounts.models import TeamSecret
from webapp.accounts.secrets import team_secret_value
from webapp.accounts.services import team_secret_set

pytestmark = pytest.mark.django_db

VALUE = "sk-live-0123456789abcdef"


def secrets_url(team):
    return f"/api/v1/teams/{team.slug}/secrets/"


def test_a_stored_key_is_encrypted_and_never_sent_back(alice, alice_team, api):
    client = api(alice)
    stored = client.post(secrets_url(alice_team), {"name": "our-vllm", "value": VALUE}, format="json")
    assert stored.status_code == 201 and stored.json()["name"] == "our-vllm"
    listed = client.get(secrets_url(alice_team))
    assert [s["name"] for s in listed.json()] == ["our-vllm"] and listed.json()[0]["created_by"] == "alice"
    assert VALUE not in stored.content.decode() + listed.content.decode()
    secret = TeamSecret.objects.get()
    assert VALUE not in secret.ciphertext and VALUE[3:12] not in secret.ciphertext
    assert team_secret_value(team=alice_team, name="our-vllm") == VALUE


def test_storing_again_replaces_the_key_and_delete_removes_it(alice, alice_team, api):
    client = api(alice)
    client.post(secrets_url(alice_team), {"name": "k", "value": "old"}, format="json")
    client.post(secrets_url(alice_team), {"name": "k", "value": "new"}, format="json")
    assert TeamSecret.objects.count() == 1 and team_secret_value(team=alice_team, name="k") == "new"
    assert client.delete(f"{secrets_url(alice_team)}k/").status_code == 204
    assert client.delete(f"{secrets_url(alice_team)}k/").status_code == 404
    assert team_secret_value(team=alice_team, name="k") is None


def test_viewers_may_not_store_keys_and_other_teams_do_not_see_them(alice, alice_team, victor, bob, api):
    team_secret_set(team=alice_team, user=alice, name="k", value=VALUE)
    assert api(victor).get(secrets_url(alice_team)).status_code == 200
    assert api(victor).post(secrets_url(alice_team), {"name": "v", "value": "x"}, format="json").status_code == 403
    assert api(victor).delete(f"{secrets_url(alice_team)}k/").status_code == 403
    outsider = api(bob)
    assert outsider.get(secrets_url(alice_team)).status_code == 404
    assert outsider.post(secrets_url(alice_team), {"name": "k", "value": "x"}, format="json").status_code == 404
    assert outsider.delete(f"{secrets_url(alice_team)}k/").status_code == 404
    assert team_secret_value(team=alice_team, name="k") == VALUE


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "../etc", "value": "x"}, "name"),
        ({"name": "k", "value": "line\nbreak"}, "value"),
        ({"name": "k", "value": ""}, "value"),
        ({"name": "k"}, "value"),
        ({"name": "k", "value": "x" * 5000}, "value"),
    ],
)
def test_bad_names_and_values_are_a_400_naming_the_field(alice, alice_team, api, body, field):
    response = api(alice).post(secrets_url(alice_team), body, format="json")
    assert response.status_code == 400 and field in response.json(), response.json()


def test_a_ciphertext_copied_to_another_team_or_name_does_not_decrypt(alice, alice_team, bob, bob_team):
    secret = team_secret_set(team=alice_team, user=alice, name="k", value=VALUE)
    TeamSecret.objects.create(team=bob_team, name="k", ciphertext=secret.ciphertext)
    TeamSecret.objects.create(team=alice_team, name="other", ciphertext=secret.ciphertext)
    for team, name in ((bob_team, "k"), (alice_team, "other")):
        with pytest.raises(ValueError, match="another team or name"):
            team_secret_value(team=team, name=name)
