"""What a run may reach: the operator's named optimizer endpoints (URL, key, models, per-team budget), the team's own
key for a base URL the run brings, and the host allow-list for every URL a user chose. Submission asks
`config_access_check` (400s); the worker asks `run_access` again before it connects (settings may have changed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from inspo_engine.config import RunConfig
from inspo_engine.netpolicy import NetPolicy, UrlRefused, check_url
from inspo_engine.schedule import needs_optimizer
from inspo_engine.tracking import package_errors
from webapp.accounts.models import Team, TeamSecret
from webapp.accounts.secrets import team_secret_value
from webapp.core.errors import InvalidInput

from .models import Run

KEYED_PROVIDERS = ("gemini", "openai")
Errors = dict[str, list[str]]


@dataclass(frozen=True)
class RunAccess:
    """What a worker hands the engine: the config with a named endpoint's URL filled in, the one key the
    optimizer may send, and the policies for the URLs a user chose (None: the URL is the operator's)."""

    config: RunConfig
    api_key: str | None
    optimizer_policy: NetPolicy | None
    retriever_policy: NetPolicy


def net_policy() -> NetPolicy:
    return NetPolicy(
        allowed_hosts=tuple(settings.INSPO_ALLOWED_URL_HOSTS),
        private_hosts=tuple(settings.INSPO_ALLOW_PRIVATE_HOSTS),
    )


def url_errors(config: RunConfig, policy: NetPolicy) -> Errors:
    """The user-chosen URLs (env.retriever_url, optimizer.base_url, tracking.mlflow_uri) that the policy refuses,
    with why."""
    errors: Errors = {}
    urls = {"env.retriever_url": config.env.retriever_url, "optimizer.base_url": config.optimizer.base_url}
    urls["tracking.mlflow_uri"] = config.tracking.mlflow_uri
    for field, url in urls.items():
        if url:
            try:
                check_url(url, policy)
            except UrlRefused as error:
                hint = " (the operator allows hosts in INSPO_ALLOWED_URL_HOSTS / INSPO_ALLOW_PRIVATE_HOSTS)"
                errors[field] = [f"{error}{hint}"]
    return errors


def _keyed(config: RunConfig) -> bool:
    return config.optimizer.provider in KEYED_PROVIDERS and needs_optimizer(config)


def _endpoint_name(config: RunConfig) -> str:
    default = settings.INSPO_OPTIMIZER_DEFAULT_ENDPOINT
    return config.optimizer.endpoint or default


def _endpoint_errors(config: RunConfig, name: str) -> tuple[dict[str, Any] | None, Errors]:
    """The endpoint a run names (or the default), and why it may not use it."""
    endpoints: dict[str, dict[str, Any]] = settings.INSPO_OPTIMIZER_ENDPOINTS
    optimizer = config.optimizer
    endpoint = endpoints.get(name) if name else None
    if endpoint is None:
        declared = ", ".join(sorted(endpoints)) or "none"
        return None, {
            "optimizer.endpoint": [
                f"name an optimizer endpoint of this server (declared: {declared}), or bring a base_url with "
                "your team's own key in optimizer.team_secret; the server's keys go only to its own endpoints"
            ]
        }
    if endpoint["provider"] != optimizer.provider:
        return None, {"optimizer.provider": [f"endpoint {name!r} serves provider {endpoint['provider']!r}"]}
    models = endpoint["models"]
    if models and optimizer.model not in models:
        return None, {"optimizer.model": [f"endpoint {name!r} allows only {', '.join(models)}"]}
    return endpoint, {}


def _budget_errors(config: RunConfig, *, team: Team, name: str, budget: int | None, pending: int = 0) -> Errors:
    """Optimizer calls reserved (each run's max_calls) by the team on this endpoint over the last 24 h, and
    `pending` more by runs admitted together with this one but not stored yet."""
    if budget is None:
        return {}
    since = timezone.now() - timedelta(days=1)
    reserved = Run.objects.filter(team=team, created_at__gte=since, config__optimizer__endpoint=name)
    used = pending + sum(int(calls or 0) for calls in reserved.values_list("config__optimizer__max_calls", flat=True))
    if used + config.optimizer.max_calls <= budget:
        return {}
    return {
        "optimizer.max_calls": [
            f"endpoint {name!r} allows {budget} optimizer calls per team per day; your team's runs of the last "
            f"24 h reserve {used}, so at most {max(0, budget - used)} are left"
        ]
    }


def _team_key_errors(config: RunConfig, team: Team) -> Errors:
    name = config.optimizer.team_secret
    if not name:
        return {
            "optimizer.team_secret": [
                "a run that brings its own base_url must bring its own key: store one for your team "
                "(POST /api/v1/teams/<team>/secrets/) and name it here, or name an operator endpoint in "
                "optimizer.endpoint instead of a base_url"
            ]
        }
    if not TeamSecret.objects.filter(team=team, name=name).exists():
        return {"optimizer.team_secret": [f"your team has no stored key named {name!r}"]}
    return {}


def config_access_check(config: RunConfig, *, team: Team, reserved: Mapping[str, int] | None = None) -> RunConfig:
    """At submission: URLs on the allow-list, and a keyed optimizer either on a named endpoint (the default one
    when none is named; its models and the team's daily budget respected, counting the calls `reserved` on each
    endpoint by runs admitted with this one and not stored yet) or on its own URL with the team's own key. Returns
    the config with the endpoint named; InvalidInput (under `config`) otherwise."""
    errors = url_errors(config, net_policy()) | tracking_errors(config, team)
    if _keyed(config):
        if config.optimizer.base_url:
            errors |= _team_key_errors(config, team)
        else:
            name = _endpoint_name(config)
            endpoint, problems = _endpoint_errors(config, name)
            errors |= problems
            if endpoint is not None:
                budget = endpoint["team_calls_per_day"]
                pending = (reserved or {}).get(name, 0)
                errors |= _budget_errors(config, team=team, name=name, budget=budget, pending=pending)
                config = dataclasses.replace(config, optimizer=dataclasses.replace(config.optimizer, endpoint=name))
    if errors:
        raise InvalidInput(errors, key="config")
    return config


def tracking_errors(config: RunConfig, team: Team) -> Errors:
    """The trackers a run names: their packages installed here, and the team's stored W&B key and MLflow token
    when it names them."""
    errors: Errors = {}
    for error in package_errors(config.tracking):
        errors.setdefault(error.field, []).append(error.message)
    for field in ("wandb_secret", "mlflow_secret"):
        name = getattr(config.tracking, field)
        if name and not TeamSecret.objects.filter(team=team, name=name).exists():
            errors[f"tracking.{field}"] = [f"your team has no stored key named {name!r}"]
    return errors


def tracking_key(config: RunConfig, team: Team) -> str | None:
    """The W&B key the run's tracker sends (None: W&B runs offline)."""
    name = config.tracking.wandb_secret
    return team_secret_value(team=team, name=name) if name else None


def tracking_token(config: RunConfig, team: Team) -> str | None:
    """The MLflow token the run's tracker sends to `tracking.mlflow_uri`, and only there (None: no token)."""
    name = config.tracking.mlflow_secret
    return team_secret_value(team=team, name=name) if name else None


def run_access(*, config: RunConfig, team: Team) -> RunAccess:
    """At run time, before anything connects: the same rules, and the key. InvalidInput when the run may not
    reach what it names (any more)."""
    policy = net_policy()
    errors = url_errors(config, policy)
    if errors:
        raise InvalidInput(errors, key="config")
    if not _keyed(config):
        return RunAccess(config, None, None, policy)
    if config.optimizer.base_url:
        errors = _team_key_errors(config, team)
        if errors:
            raise InvalidInput(errors, key="config")
        key = team_secret_value(team=team, name=str(config.optimizer.team_secret))
        return RunAccess(config, key, policy, policy)
    return _endpoint_access(config, policy)


def _endpoint_access(config: RunConfig, policy: NetPolicy) -> RunAccess:
    name = _endpoint_name(config)
    endpoint, errors = _endpoint_errors(config, name)
    if endpoint is None:
        raise InvalidInput(errors, key="config")
    if endpoint["key_env"] and not endpoint["api_key"]:
        message = f"endpoint {name!r} has no key on this server (the operator sets {endpoint['key_env']})"
        raise InvalidInput({"optimizer.endpoint": [message]}, key="config")
    optimizer = dataclasses.replace(config.optimizer, base_url=endpoint["base_url"], endpoint=None)
    return RunAccess(dataclasses.replace(config, optimizer=optimizer), endpoint["api_key"], None, policy)
