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
# together in the foreground. Ctrl-C or a SIGTERM to make stops all three, each once: SIGTERM is passed on to each of
# them; a Ctrl-C reached each of them already (the terminal signals the whole process group), so it is not repeated.
# If one of them exits on its own, the others are stopped too.
web-serve: SHELL := /bin/bash
web-serve: web-migrate web-static
	@echo "INSPO is running at http://$(WEB_HOST):$(WEB_PORT)/  (API docs: /api/docs/, admin: /admin/; Ctrl-C stops it)"
	@stop=; trap 'stop=TERM' TERM; trap 'stop=INT' INT; \
	$(CELERY) worker -Q cpu -c 1 --max-tasks-per-child 1 -n cpu@%h -l INFO & cpu=$$!; \
	$(CELERY) worker -Q ops -c 1 -B -n ops@%h -l WARNING & ops=$$!; \
	$(VENV)/bin/gunicorn webapp.config.wsgi --bind $(WEB_HOST):$(WEB_PORT) --workers 2 --timeout 300 \
		--access-logfile - & web=$$!; \
	wait -n $$cpu $$ops $$web; status=$$?; trap '' INT TERM; \
	if [ "$$stop" != INT ]; then kill -TERM $$cpu $$ops $$web 2>/dev/null; fi; \
	wait $$cpu $$ops $$web; \
	if [ -n "$$stop" ]; then echo "INSPO stopped ($$stop)"; else exit $$status; fi
