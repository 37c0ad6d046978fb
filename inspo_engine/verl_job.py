"""The verl job: `python -m inspo_engine.verl_job KEY=VALUE …` composes verl's trainer config with the
overrides, starts or joins Ray, and runs INSPO's TaskRunner on this node. Like the CLI, it is a boundary of the
engine: it reads the optimizer's API key from INSPO_OPTIMIZER_API_KEY (the one key its caller gave it; see
`backends.verl.launcher.job_environment`) and hands it over explicitly.

The TaskRunner follows verl's legacy one (`verl.trainer.main_ppo_v0.TaskRunner`): the same worker roles, resource
pools and datasets, but `InspoRayPPOTrainer` with the population attached. It is pinned to the node that started
the job, so the events file and the run directory it writes are the ones the caller reads.

It is an entry point beside `build.py` and `cli.py`, not a part of the verl backend: it wires the backend (verl's
trainer, `backends/verl`) to a run built by `build.build_run`, so the backend never imports the entry level.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import ray
from verl.trainer.main_ppo import run_ppo
from verl.trainer.main_ppo_v0 import BaseTaskRunner

from .backends.verl.config import compose
from .backends.verl.launcher import (
    EVENTS_FILE,
    OPTIMIZER_POLICY,
    STOP_FILE,
    VERL_DIR,
    job_policy,
    merge_fsdp_checkpoint,
)
from .backends.verl.loop import VerlLoop, question_of
from .backends.verl.tracking import TRACKER_SECRETS, job_tracking_environment
from .checkpoints import STATE_FILE, checkpoint_path, read_state
from .config import RunConfig
from .control import FileControlChannel
from .environ import API_KEY_VARIABLE, CACHE_DIR_VARIABLE, cache_dir_from_env
from .events import JsonlSink

FORWARDED_ENV = (API_KEY_VARIABLE, CACHE_DIR_VARIABLE, *TRACKER_SECRETS)
"""Environment variables the TaskRunner actor needs from the job's environment (a joined cluster lacks them)."""


def checkpoint_state(out_dir: Path, step: int) -> dict[str, Any]:
    """The loop state saved with the engine checkpoint of `step`; resuming needs it."""
    directory = checkpoint_path(out_dir, step)
    if not (directory / STATE_FILE).is_file():
        raise FileNotFoundError(
            f"verl resumed at step {step} but {directory / STATE_FILE} is missing: resume from an engine checkpoint"
        )
    return read_state(directory)


def build_loop(config: Any, trainer: Any, train_dataset: Any) -> VerlLoop:
    """The engine's loop for this job, wired by `build.build_run` as every run is: the `inspo` section names the run
    config, the run directory and the network policy its optimizer client checks each request against (see
    `backends.verl.launcher.policy_overrides`); the questions are the job's dataset's, and verl validates on its own
    files."""
    from .backends.verl.trainer import VerlPolicy
    from .build import RunInputs, build_run  # here: the driver process never builds the run, only the TaskRunner

    inspo = config.inspo
    out_dir = Path(inspo.out_dir)
    run_config = RunConfig.from_json(Path(inspo.run_config).read_text(encoding="utf-8"))
    loop: VerlLoop | None = None

    def step() -> int:
        assert loop is not None
        return loop.step

    policy = VerlPolicy(
        trainer,
        verl_dir=out_dir / VERL_DIR,
        merge=merge_fsdp_checkpoint,
        step=step,
        placement=run_config.env.instruction_placement,
    )
    questions = [question_of(info) for info in train_dataset.dataframe["extra_info"]]
    coevolution = build_run(
        run_config,
        out_dir=out_dir,
        cache_dir=cache_dir_from_env(os.environ),
        sink=JsonlSink(out_dir / EVENTS_FILE),
        api_key=os.environ.get(API_KEY_VARIABLE) or None,
        should_stop=lambda: (out_dir / STOP_FILE).exists(),
        backend=policy,
        optimizer_policy=job_policy(inspo, OPTIMIZER_POLICY),
        control=FileControlChannel(out_dir),
        inputs=RunInputs(train=questions, eval_sets={}),
    )
    loop = VerlLoop(coevolution)
    return loop


@ray.remote(num_cpus=1)
class InspoTaskRunner(BaseTaskRunner):
    """verl's legacy TaskRunner with `InspoRayPPOTrainer`."""

    def run(self, config: Any) -> None:
        from omegaconf import OmegaConf
        from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler, need_critic, need_reference_policy
        from verl.utils.config import omega_conf_to_dataclass, validate_config
        from verl.utils.dataset.rl_dataset import collate_fn

        from .backends.verl.trainer import InspoRayPPOTrainer

        OmegaConf.resolve(config)
        _, worker_group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_reward_model_resource_pool(config)
        self.add_teacher_model_resource_pool(config)
        validate_config(
            config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
        )
        model = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        data = config.data
        train = create_rl_dataset(data.train_files, data, model.tokenizer, model.processor, is_train=True)
        val = create_rl_dataset(data.val_files, data, model.tokenizer, model.processor, is_train=False)
        trainer = InspoRayPPOTrainer(
            config=config,
            tokenizer=model.tokenizer,
            processor=model.processor,
            role_worker_mapping=self.role_worker_mapping,
            resource_pool_manager=self.init_resource_pool_mgr(config),
            ray_worker_group_cls=worker_group_cls,
            train_dataset=train,
            val_dataset=val,
            collate_fn=collate_fn,
            train_sampler=create_rl_sampler(data, train),
        )
        out_dir = Path(config.inspo.out_dir)
        loop = build_loop(config, trainer, train)
        tracking = RunConfig.from_json(Path(config.inspo.run_config).read_text(encoding="utf-8")).tracking
        os.environ.update(job_tracking_environment(tracking, out_dir, wandb_key="WANDB_API_KEY" in os.environ))
        trainer.attach(loop, state=lambda step: checkpoint_state(out_dir, step))
        trainer.init_workers()
        trainer.fit()
        best = loop.population.best()
        (out_dir / "best_instruction.txt").write_text(best.text + "\n", encoding="utf-8")


class OnThisNode:
    """What `run_ppo` calls `.remote()` on: the TaskRunner, pinned to the node of this process, with the
    environment variables it needs."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def remote(self) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = ray.get_runtime_context().get_node_id()
        env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
        return self.actor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
            runtime_env={"env_vars": env},
        ).remote()


def _stop_on_sigterm() -> None:
    """SIGTERM (a cancelled run's last resort) ends the driver through the normal exit path, so Ray shuts down."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def main(argv: Sequence[str] | None = None) -> int:
    from verl.utils.device import auto_set_device

    overrides = list(sys.argv[1:] if argv is None else argv)
    config = compose(overrides)
    auto_set_device(config)
    if config.trainer.use_v1:
        raise SystemExit("the INSPO trainer is verl's legacy RayPPOTrainer: set trainer.use_v1=false")
    _stop_on_sigterm()
    try:
        run_ppo(config, task_runner_class=OnThisNode(InspoTaskRunner))
    finally:
        if ray.is_initialized():
            ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
