"""The HTTP optimizer clients' settings are written once (`HttpSettings`): both clients are built from it, and a
run's OptimizerConfig maps onto it by name, with the same defaults."""

from __future__ import annotations

import dataclasses
import inspect

from inspo_engine.config import OptimizerConfig
from inspo_engine.netpolicy import NetPolicy
from inspo_engine.optimizers import GeminiClient, HttpSettings, OpenAICompatibleClient
from inspo_engine.optimizers.base import CONFIG_SETTINGS


def test_the_settings_a_config_gives_carry_its_names_and_defaults():
    assert CONFIG_SETTINGS == (
        "model",
        "base_url",
        "timeout_s",
        "max_retries",
        "backoff_s",
        "temperature",
        "max_output_tokens",
    )
    defaults, config = HttpSettings(), OptimizerConfig()
    assert all(getattr(defaults, name) == getattr(config, name) for name in CONFIG_SETTINGS)


def test_from_config_hands_every_setting_with_the_callers_key_and_policy():
    config = OptimizerConfig(
        provider="openai",
        model="m",
        base_url="http://localhost:9/v1",
        timeout_s=7.0,
        max_retries=1,
        backoff_s=0.25,
        temperature=0.3,
        max_output_tokens=64,
    )
    policy = NetPolicy()
    settings = HttpSettings.from_config(config, api_key="sk", policy=policy)
    assert {name: getattr(settings, name) for name in CONFIG_SETTINGS} == {
        name: getattr(config, name) for name in CONFIG_SETTINGS
    }
    assert settings.api_key == "sk" and settings.policy is policy
    assert "sk" not in repr(settings)


def test_both_clients_are_built_from_one_settings_object():
    for client in (GeminiClient, OpenAICompatibleClient):
        assert list(inspect.signature(client.__init__).parameters) == ["self", "settings"]
    assert len(dataclasses.fields(HttpSettings)) == 10
