"""URLs of accounts: sign-in and sign-out, API tokens, team members, invitations and keys; the teams API (and keys)."""

from django.urls import path

from . import apis, views

api_urlpatterns = [
    path("teams/", apis.TeamListApi.as_view(), name="teams"),
    path("teams/<slug:slug>/secrets/", apis.TeamSecretListApi.as_view(), name="team-secrets"),
    path("teams/<slug:slug>/secrets/<str:name>/", apis.TeamSecretDetailApi.as_view(), name="team-secret"),
]

app_name = "accounts"
urlpatterns = [
    path("login/", views.SignInView.as_view(), name="login"),
    path("logout/", views.SignOutView.as_view(), name="logout"),
    path("tokens/", views.token_list, name="tokens"),
    path("tokens/<int:token_id>/revoke/", views.token_revoke, name="token-revoke"),
    path("invitations/", views.invitation_list, name="invitations"),
    path("invitations/<int:id>/accept/", views.invitation_answer, {"answer": "accept"}, name="invitation-accept"),
    path("invitations/<int:id>/decline/", views.invitation_answer, {"answer": "decline"}, name="invitation-decline"),
    path("teams/<slug:slug>/", views.team_members, name="team"),
    path("teams/<slug:slug>/members/<int:user_id>/remove/", views.member_remove, name="member-remove"),
    path("teams/<slug:slug>/keys/", views.team_secrets, name="team-secrets"),
    path("teams/<slug:slug>/keys/<str:name>/delete/", views.team_secret_delete, name="team-secret-delete"),
]
