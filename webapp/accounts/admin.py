"""Django admin for users, teams with their memberships, and API tokens (digests only)."""

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.http import HttpRequest

from .forms import AdminSignInForm
from .models import ApiToken, Membership, Team, User

admin.site.login_form = AdminSignInForm
admin.site.register(User, UserAdmin)


class MembershipInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "slug", "created_at")
    search_fields = ("name", "slug")
    readonly_fields = ("tracking_default",)  # checked like a run's tracking: set it from the API or the team page
    inlines = (MembershipInline,)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "user", "prefix", "created_at", "last_used_at")
    search_fields = ("name", "user__username", "prefix")
    readonly_fields = ("user", "prefix", "digest", "created_at", "last_used_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tokens are made from the token page, where the key is shown once
