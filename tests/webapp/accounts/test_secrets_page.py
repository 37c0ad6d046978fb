"""The team's Keys page: its owners list the stored keys' names, store or replace one and delete one; a value is
never shown back (not even on a refused form); members and viewers are refused (403), another team's owner never
sees the page (404). The team page and the default-trackers page link to it."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from webapp.accounts.models import TeamSecret
from webapp.accounts.secrets import team_secret_value
from webapp.accounts.services import team_secret_set

pytestmark = pytest.mark.django_db

VALUE = "sk-live-0123456789abcdef"


def signed_in(user):
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def keys_url(team):
    return reverse("accounts:team-secrets", kwargs={"slug": team.slug})


def delete_url(team, name):
    return reverse("accounts:team-secret-delete", kwargs={"slug": team.slug, "name": name})


def test_an_owner_stores_replaces_and_deletes_a_key_and_never_sees_its_value(alice, alice_team):
    owner = signed_in(alice)
    empty = owner.get(keys_url(alice_team))
    assert empty.status_code == 200 and "No keys yet." in empty.content.decode()

    stored = owner.post(keys_url(alice_team), {"name": "wandb", "value": VALUE}, follow=True)
    html = stored.content.decode()
    assert stored.status_code == 200 and "Stored the key “wandb”" in html
    assert 'data-testid="team-secret" data-name="wandb"' in html and VALUE not in html
    assert team_secret_value(team=alice_team, name="wandb") == VALUE

    replaced = owner.post(keys_url(alice_team), {"name": "wandb", "value": "sk-new"}, follow=True)
    assert "Replaced the key “wandb”" in replaced.content.decode() and "sk-new" not in replaced.content.decode()
    assert team_secret_value(team=alice_team, name="wandb") == "sk-new"
    assert TeamSecret.objects.filter(team=alice_team).count() == 1

    deleted = owner.post(delete_url(alice_team, "wandb"), follow=True)
    assert "Deleted the key “wandb”" in deleted.content.decode()
    assert not TeamSecret.objects.exists()


def test_a_refused_key_names_the_field_and_does_not_echo_the_value(alice, alice_team):
    response = signed_in(alice).post(keys_url(alice_team), {"name": "../wandb", "value": VALUE})
    html = response.content.decode()
    assert response.status_code == 400 and "starting with a letter or digit" in html
    assert VALUE not in html and 'value="../wandb"' in html  # the name is kept, the key is not
    control = signed_in(alice).post(keys_url(alice_team), {"name": "ok", "value": "bad\x07value"})
    assert control.status_code == 400 and "without control characters" in control.content.decode()
    assert not TeamSecret.objects.exists()


@pytest.mark.parametrize("who", ["mia", "victor"])
def test_members_and_viewers_who_are_not_owners_are_refused(request, alice, alice_team, who):
    user = request.getfixturevalue(who)
    team_secret_set(team=alice_team, user=alice, name="wandb", value=VALUE)
    client = signed_in(user)
    assert client.get(keys_url(alice_team)).status_code == 403
    assert client.post(keys_url(alice_team), {"name": "mine", "value": "x"}).status_code == 403
    assert client.post(delete_url(alice_team, "wandb")).status_code == 403
    assert list(TeamSecret.objects.values_list("name", flat=True)) == ["wandb"]
    assert team_secret_value(team=alice_team, name="wandb") == VALUE


def test_another_teams_owner_never_sees_or_touches_the_keys(alice, alice_team, bob, bob_team):
    team_secret_set(team=alice_team, user=alice, name="wandb", value=VALUE)
    client = signed_in(bob)
    assert client.get(keys_url(alice_team)).status_code == 404
    assert client.post(keys_url(alice_team), {"name": "wandb", "value": "bobs"}).status_code == 404
    assert client.post(delete_url(alice_team, "wandb")).status_code == 404
    assert team_secret_value(team=alice_team, name="wandb") == VALUE
    own = client.get(keys_url(bob_team)).content.decode()  # bob's own team's page lists none of alice's
    assert "wandb" not in own and "No keys yet." in own


def test_deleting_a_key_that_is_not_there_is_a_404(alice, alice_team):
    assert signed_in(alice).post(delete_url(alice_team, "nothing")).status_code == 404


def test_signed_out_visitors_go_to_sign_in(alice_team):
    response = signed_in(None).get(keys_url(alice_team))
    assert response.status_code == 302 and response["Location"].startswith(reverse("accounts:login"))


def test_the_team_page_and_the_trackers_page_link_owners_to_the_keys(alice, alice_team, mia):
    link = f'href="{keys_url(alice_team)}"'
    team_page = reverse("accounts:team", kwargs={"slug": alice_team.slug})
    tracking = reverse("runs:team-tracking", kwargs={"slug": alice_team.slug})
    assert link in signed_in(alice).get(team_page).content.decode()
    assert link in signed_in(alice).get(tracking).content.decode()
    assert link not in signed_in(mia).get(team_page).content.decode()  # a page that would refuse them


def test_a_key_stored_on_the_page_is_one_the_default_trackers_may_name(alice, alice_team):
    owner = signed_in(alice)
    tracking = reverse("runs:team-tracking", kwargs={"slug": alice_team.slug})
    section = {"backends": "wandb", "project": "inspo", "wandb_secret": "wandb"}
    refused = owner.post(tracking, section)
    assert refused.status_code == 400 and "no stored key" in refused.content.decode()
    owner.post(keys_url(alice_team), {"name": "wandb", "value": VALUE})
    assert owner.post(tracking, section).status_code == 302
