"""RunConfig: defaults from the paper, validation that names fields, JSON round trip, presets, overrides."""

import json

import pytest

from inspo_engine.config import SCHEMA_VERSION, RunConfig
from inspo_engine.config_fields import ConfigError, parse_override
from inspo_engine.presets import PRESETS, preset


def field_names(error: ConfigError) -> set[str]:
    return {e.field for e in error.errors}


def test_defaults_are_the_papers_numbers():
    config = RunConfig()
    assert config.population.population_size == 7
    assert config.population.n_parents == 1
    assert config.population.temperature == 0.2
    assert config.population.weight_window == 5
    assert config.population.prune_every == 5
    assert config.evolution.evolve_every == 15
    assert config.evolution.evolve_until == 150
    assert config.evolution.n_candidates == 6
    assert config.evolution.n_failures == 4
    assert config.evolution.verify_samples == 200
    assert config.evolution.max_verify_rounds == 5
    assert config.grpo.total_steps == 300
    assert config.grpo.group_size == 5
    assert (config.grpo.batch_size, config.grpo.mini_batch_size, config.grpo.micro_batch_size) == (512, 256, 64)
    assert config.grpo.lr == 5e-7
    assert config.grpo.kl_coef == 0.001
    assert config.grpo.clip_ratio == 0.2
    assert config.grpo.warmup_ratio == 0.1
    assert config.env.max_turns == 4
    assert config.env.top_k == 3
    assert config.env.max_turn_tokens == 500


def test_the_paper_schedule_gives_ten_evolutions_from_step_15_to_150():
    assert RunConfig().evolution_steps() == list(range(15, 151, 15))


def test_the_static_mode_never_evolves():
    assert preset("paper").with_overrides({"mode": "static"}).evolution_steps() == []


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"n_parents": 8}, "population.n_parents"),
        ({"temperature": 0}, "population.temperature"),
        ({"temperature": -1.0}, "population.temperature"),
        ({"evolve_until": 301}, "evolution.evolve_until"),
        ({"group_size": 1}, "grpo.group_size"),
        ({"lr": 0}, "grpo.lr"),
        ({"clip_ratio": 1.5}, "grpo.clip_ratio"),
        ({"top_k": 0}, "env.top_k"),
        ({"grpo.mini_batch_size": 1024}, "grpo.mini_batch_size"),
        ({"mode": "sideways"}, "mode"),
        ({"population_size": "seven"}, "population.population_size"),
        ({"population.prune": "yes"}, "population.prune"),
        ({"env.retriever": "remote"}, "env.retriever_url"),
        ({"optimizer.provider": "openai"}, "optimizer.base_url"),
        ({"env.answer_score": 0.9}, "env.answer_score"),
        ({"backend.name": "verl", "env.response_prefix": "<think>"}, "env.response_prefix"),
        ({"backend.name": "verl", "env.final_turn_prefix": "<answer>"}, "env.final_turn_prefix"),
        ({"backend.name": "verl", "grpo.drop_uniform_groups": True}, "grpo.drop_uniform_groups"),
        ({"backend.name": "verl", "backend.reference_dtype": "bfloat16"}, "backend.reference_dtype"),
        ({"backend.reference_dtype": "float16"}, "backend.reference_dtype"),
    ],
)
def test_a_bad_value_is_refused_with_its_field_named(overrides, field):
    with pytest.raises(ConfigError) as caught:
        RunConfig().with_overrides(overrides)
    assert field in field_names(caught.value)


def test_the_message_states_the_allowed_range():
    with pytest.raises(ConfigError, match=r"grpo.group_size: must be ≥ 2 and ≤ 64, got 1"):
        RunConfig().with_overrides({"group_size": 1})


def test_every_bad_field_is_reported_at_once():
    with pytest.raises(ConfigError) as caught:
        RunConfig.from_dict({"grpo": {"group_size": 1, "lr": -1.0}, "population": {"temperature": 0.0}})
    assert field_names(caught.value) == {"grpo.group_size", "grpo.lr", "population.temperature"}


def test_unknown_keys_are_refused_with_their_path():
    with pytest.raises(ConfigError) as caught:
        RunConfig.from_dict({"grpo": {"learning_rate": 1e-6}, "colour": "blue"})
    assert field_names(caught.value) == {"grpo.learning_rate", "colour"}


def test_an_ambiguous_bare_name_lists_the_paths_to_use():
    with pytest.raises(ConfigError, match=r"backend\.model, optimizer\.model"):
        RunConfig().with_overrides({"model": "x"})


def test_a_newer_schema_version_is_refused():
    with pytest.raises(ConfigError, match="schema_version"):
        RunConfig.from_dict({"schema_version": SCHEMA_VERSION + 1})


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_round_trips_through_json(name):
    config = preset(name)
    again = RunConfig.from_json(config.to_json())
    assert again == config
    assert json.loads(again.to_json())["schema_version"] == SCHEMA_VERSION


def test_the_smoke_preset_prunes_evolves_and_checkpoints_within_its_steps():
    config = preset("smoke")
    steps = config.grpo.total_steps
    assert config.evolution_steps()
    assert config.population.prune_every <= steps
    assert 0 < config.checkpoint.checkpoint_every <= steps


def test_the_quick_preset_is_the_cpu_demo_made_smaller_and_evolves_within_its_steps():
    quick, demo = preset("quick"), preset("cpu-demo")
    assert (
        quick.grpo.total_steps * quick.grpo.group_size * quick.grpo.batch_size
        < (demo.grpo.total_steps * demo.grpo.group_size * demo.grpo.batch_size) / 5
    )
    assert quick.env == demo.env and quick.population.initial_instructions == demo.population.initial_instructions
    assert quick.evolution_steps() and max(quick.evolution_steps()) < quick.grpo.total_steps
    assert 0 < quick.eval.eval_samples <= 32
    kept = range(quick.checkpoint.checkpoint_every, quick.grpo.total_steps + 1, quick.checkpoint.checkpoint_every)
    assert len(kept) >= 2 and quick.checkpoint.keep_last >= 2  # a heatmap's two checkpoints are still on disk


def test_an_unknown_preset_names_the_choices():
    with pytest.raises(ConfigError, match="paper"):
        preset("huge")


def test_overrides_parse_json_values_and_keep_plain_strings():
    assert parse_override("lr=1e-6") == ("lr", 1e-6)
    assert parse_override("prune=false") == ("prune", False)
    assert parse_override("backend.model=/models/qwen") == ("backend.model", "/models/qwen")
    with pytest.raises(ConfigError):
        parse_override("no-equals-sign")


def test_the_paper_names_resolve_to_their_sections():
    config = RunConfig().with_overrides({"temperature": 0.05, "n_parents": 2, "max_turns": 6})
    assert config.population.temperature == 0.05
    assert config.population.n_parents == 2
    assert config.env.max_turns == 6
    assert config.optimizer.temperature == 1.0


def _string_field_paths() -> list[str]:
    """Every field typed str, str | None or list[str] (Literal choices refuse anything else anyway)."""
    import dataclasses
    import typing

    def walk(cls: type, prefix: str) -> list[str]:
        paths = []
        for f in dataclasses.fields(cls):
            hint = typing.get_type_hints(cls)[f.name]
            if dataclasses.is_dataclass(hint):
                paths += walk(hint, f"{prefix}{f.name}.")
            elif str in typing.get_args(hint) or hint in (str, list[str]):
                paths.append(prefix + f.name)
        return paths

    return walk(RunConfig, "")


@pytest.mark.parametrize("path", _string_field_paths())
@pytest.mark.parametrize("text", ["${oc.env:GEMINI_API_KEY}", "\\${oc.env:DATABASE_URL}", "x$y"])
def test_a_dollar_in_any_string_field_is_refused_with_the_field_named(path, text):
    """verl's Hydra/OmegaConf would resolve '${oc.env:…}' inside the job: no string may carry one."""
    lists = ("population.initial_instructions", "eval.benchmarks", "tracking.backends", "grpo.lora_targets")
    value = [text] if path in lists else text
    with pytest.raises(ConfigError) as caught:
        preset("smoke").with_overrides({path: value})
    assert path in field_names(caught.value)
    assert any("'$'" in e.message for e in caught.value.errors if e.field == path)


def test_the_string_fields_checked_include_every_path_and_url_field():
    assert {"backend.model", "env.dataset", "env.retriever_url", "optimizer.base_url", "eval.benchmarks"} <= set(
        _string_field_paths()
    )


def test_an_endpoint_is_a_name_and_excludes_a_base_url():
    assert preset("smoke").with_overrides({"optimizer.endpoint": "vllm-1"}).optimizer.endpoint == "vllm-1"
    for overrides, field in [
        ({"optimizer.endpoint": "../x"}, "optimizer.endpoint"),
        ({"optimizer.endpoint": "a", "optimizer.base_url": "http://h/v1"}, "optimizer.base_url"),
        ({"optimizer.team_secret": "mine"}, "optimizer.team_secret"),
    ]:
        with pytest.raises(ConfigError) as caught:
            preset("smoke").with_overrides(overrides)
        assert field in field_names(caught.value)
    openai = preset("smoke").with_overrides({"optimizer.provider": "openai", "optimizer.endpoint": "vllm"})
    assert openai.optimizer.base_url is None  # a named endpoint stands in for the URL


# -- bounds on everything a run consumes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "bound"),
    [
        ("grpo.batch_size", 10**9, "≤ 8192"),
        ("grpo.mini_batch_size", 10**9, "≤ 8192"),
        ("grpo.micro_batch_size", 10**9, "≤ 8192"),
        ("evolution.replay_capacity", 10**12, "≤ 500000"),
        ("optimizer.max_calls", 10**12, "≤ 1000"),
        ("optimizer.max_tokens", 10**12, "≤ 50000000"),
        ("log_trajectories", 1000, "≤ 64"),
        ("population.prune_every", 10**9, "≤ 1000000"),
        ("evolution.evolve_every", 10**9, "≤ 1000000"),
        ("evolution.evolve_until", 10**9, "≤ 1000000"),
        ("eval.eval_every", 10**9, "≤ 1000000"),
        ("eval.eval_samples", 10**9, "≤ 1000000"),
        ("checkpoint.checkpoint_every", 10**9, "≤ 1000000"),
        ("checkpoint.keep_last", 10**9, "≤ 100"),
    ],
)
def test_an_out_of_bound_number_is_refused_with_the_bound_named(path, value, bound):
    with pytest.raises(ConfigError) as caught:
        preset("paper").with_overrides({path: value})
    messages = [e.message for e in caught.value.errors if e.field == path]
    assert messages and bound in messages[0] and str(value) in messages[0], caught.value


def test_the_paper_preset_sits_inside_every_bound():
    config = preset("paper")
    assert (config.grpo.batch_size, config.grpo.total_steps) == (512, 300)
    assert (config.evolution.replay_capacity, config.optimizer.max_calls) == (50_000, 50)


def test_keeping_every_checkpoint_is_refused_when_the_run_would_write_too_many():
    with pytest.raises(ConfigError, match=r"checkpoint.keep_last: 0 keeps every checkpoint: this run would keep 301"):
        preset("paper").with_overrides({"checkpoint.checkpoint_every": 1, "checkpoint.keep_last": 0})
    kept = preset("paper").with_overrides({"checkpoint.checkpoint_every": 10, "checkpoint.keep_last": 0})
    assert kept.checkpoint.keep_last == 0  # 31 checkpoints: allowed


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("population.seed_instruction", "x" * 2_400_000, "at most 20000 characters, got 2400000"),
        ("population.initial_instructions", ["x" * 20_001], "at most 20000 characters, got 20001"),
        ("population.initial_instructions", ["x"] * 64, "at most 63 items, got 64"),
        ("eval.benchmarks", ["builtin"] * 65, "at most 64 items, got 65"),
        ("backend.model", "m" * 5000, "at most 4096 characters, got 5000"),
        ("optimizer.model", "m" * 5000, "at most 4096 characters, got 5000"),
    ],
)
def test_strings_and_lists_have_a_length_limit_that_the_message_names(path, value, message):
    with pytest.raises(ConfigError) as caught:
        preset("paper").with_overrides({path: value})
    assert any(e.field == path and message in e.message for e in caught.value.errors), caught.value


def test_an_instruction_at_the_limit_is_accepted():
    config = preset("paper").with_overrides({"population.seed_instruction": "x" * 20_000})
    assert len(config.population.seed_instruction) == 20_000


def test_the_cpu_demo_seeds_its_population_without_an_answer_to_copy():
    """A small policy copies an example answer into every reply ("Paris" for 122 of 195 test questions): the
    cpu-demo's seed, and the template built on it, show none, and ask for the answer as the passages write it."""
    from inspo_engine.config import SEED_INSTRUCTION
    from inspo_engine.presets import CPU_DEMO_SEED, preset

    population = preset("cpu-demo").population
    assert population.seed_instruction == CPU_DEMO_SEED != SEED_INSTRUCTION
    for instruction in [population.seed_instruction, *population.initial_instructions]:
        assert "Paris" not in instruction and "copied from the passages" in instruction
        assert "<answer> and </answer>" in instruction
    assert preset("paper").population.seed_instruction == SEED_INSTRUCTION  # the paper's seed stays as App. F has it
