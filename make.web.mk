# The web platform's targets, included from the Makefile (which defines VENV, PY and `install`).
# `make run` = install → web-migrate → web-static → web-demo-user → web-serve. With no DATABASE_URL and no
# CELERY_BROKER_URL everything is embedded (SQLite and a filesystem broker under var/); set them for PostgreSQL
# and Redis.
WEB_HOST ?= 127.0.0.1
WEB_PORT ?= 8000
DEMO_TEAM ?= Demo team
DEMO_USER ?= demo
CELERY := $(VENV)/bin/celery -A webapp.config.celery

.PHONY: web-migrate web-static web-demo-user web-serve

web-migrate: install
	$(PY) manage.py migrate --noinput

web-static: install frontend
	$(PY) manage.py collectstatic --noinput -v 0

# Prints the password once, when the user is created; later runs only say that it exists.
web-demo-user: web-migrate
	$(PY) manage.py create_team_user --team "$(DEMO_TEAM)" --username "$(DEMO_USER)" --superuser

# The web server, a training worker (cpu queue, one run at a time) and a housekeeping worker with the scheduler,
# together in the foreground; Ctrl-C stops all three.
web-serve: web-migrate web-static
	@echo "INSPO is running at http://$(WEB_HOST):$(WEB_PORT)/  (API docs: /api/docs/, admin: /admin/; Ctrl-C stops it)"
	@trap 'kill 0' INT TERM EXIT; \
	$(CELERY) worker -Q cpu -c 1 --max-tasks-per-child 1 -n cpu@%h -l INFO & \
	$(CELERY) worker -Q ops -c 1 -B -n ops@%h -l WARNING & \
	$(VENV)/bin/gunicorn webapp.config.wsgi --bind $(WEB_HOST):$(WEB_PORT) --workers 2 --timeout 300 \
		--access-logfile - & \
	wait
