"""The verl backend (GPU): a Search-R1 agent loop, a RayPPOTrainer that owns the population, Hydra overrides and a
launcher. Only `overrides` and `turns` import without verl; everything else needs `pip install -e .[gpu]`."""
