"""Celery workers: the tasks that train and evaluate runs with the engine, and the sink that stores its events."""
