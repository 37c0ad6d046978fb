"""The verl job as the launcher prepares it: a minimal environment with at most the one optimizer key, and a
command line in which no string can become an OmegaConf interpolation."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from inspo_engine.backends.verl.launcher import job_environment, prepare, resume_overrides
from inspo_engine.backends.verl.overrides import quote
from inspo_engine.environ import API_KEY_VARIABLE
from inspo_engine.presets import preset

WORKER_ENVIRONMENT = {
    "PATH": "/usr/bin",
    "HOME": "/home/worker",
    "PYTHONPATH": "/srv/inspo",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "NCCL_DEBUG": "WARN",
    "RAY_ADDRESS": "ray://head:10001",
    "INSPO_CACHE_DIR": "/srv/cache",
    "DATABASE_URL": "postgres://inspo:pw@db/inspo",
    "DJANGO_SECRET_KEY": "django-secret",
    "CELERY_BROKER_URL": "redis://redis:6379/0",
    "GEMINI_API_KEY": "server-gemini-key",
    "OPENAI_API_KEY": "server-openai-key",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "HF_TOKEN": "hf",
    "RAY_REDIS_PASSWORD": "ray-pw",
    "FAKE_VERL_STEP_S": "0.5",
}


def test_the_job_gets_a_minimal_environment_with_only_the_key_it_was_given() -> None:
    env = job_environment(WORKER_ENVIRONMENT, api_key="endpoint-key")
    assert env[API_KEY_VARIABLE] == "endpoint-key"
    assert {"PATH", "HOME", "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG", "RAY_ADDRESS"} <= set(env)
    assert env["VERL_USE_EXTERNAL_PLUGINS"] == "auto"
    for leaked in ("DATABASE_URL", "DJANGO_SECRET_KEY", "CELERY_BROKER_URL", "GEMINI_API_KEY", "OPENAI_API_KEY",
                   "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "RAY_REDIS_PASSWORD", "FAKE_VERL_STEP_S"):  # fmt: skip
        assert leaked not in env
    assert "server-gemini-key" not in env.values() and "django-secret" not in env.values()


def test_without_a_key_the_job_gets_none_and_extra_names_pass_only_when_not_secret() -> None:
    env = job_environment(WORKER_ENVIRONMENT, extra=("FAKE_VERL_STEP_S", "GEMINI_API_KEY"))
    assert API_KEY_VARIABLE not in env and env["FAKE_VERL_STEP_S"] == "0.5" and "GEMINI_API_KEY" not in env


def test_a_string_that_would_interpolate_never_reaches_the_command_line(tmp_path: Path) -> None:
    """Validation refuses '$'; a config that got past it anyway (built in code) is refused when the overrides are
    written, because an escaped '\\${' turns live again when the job runs OmegaConf.resolve."""
    pytest.importorskip("pandas")
    config = preset("smoke").with_overrides({"env.retriever": "remote", "env.retriever_url": "http://127.0.0.1:9"})
    assert prepare(config, tmp_path / "ok").argv
    forged = dataclasses.replace(config, backend=dataclasses.replace(config.backend, model="${oc.env:GEMINI_API_KEY}"))
    with pytest.raises(ValueError, match="interpolation"):
        prepare(forged, tmp_path / "forged")
    with pytest.raises(ValueError, match="interpolation"):
        quote("x\\${oc.env:DATABASE_URL}")


def test_quoted_values_survive_hydra_and_omegaconf_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("hydra")
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    parser = OverridesParser.create()
    for text in ["/data/teams/1/it's", "end\\", "a\\'b", "/p/a b/$HOME", "q\\\\'x"]:
        value = parser.parse_override(f"k={quote(text)}").value()
        config = OmegaConf.create({"k": value})
        OmegaConf.resolve(config)
        assert config.k == text
    assert resume_overrides(Path("/r"), 6)[1] == "trainer.resume_from_path='/r/verl/global_step_6'"
