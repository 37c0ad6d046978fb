# The web platform's targets, included from the Makefile (which defines VENV, PY and `install`).
# `make run` = install → web-migrate → web-static → web-docs → web-demo-user → web-serve. With no DATABASE_URL and no
# CELERY_BROKER_URL everything is embedded (SQLite and a filesystem broker under var/); set them for PostgreSQL
# and Redis.
WEB_HOST ?= 127.0.0.1
WEB_PORT ?= 8000
RETRIEVAL_PORT ?= 8100
DEMO_TEAM ?= Demo team
DEMO_USER ?= demo
STATE_DIR := $(or $(INSPO_STATE_DIR),var)
DOCS_DIR := $(or $(INSPO_DOCS_DIR),site)
DEMO_LOGIN := $(STATE_DIR)/demo-password
CELERY := $(VENV)/bin/celery -A webapp.config.celery --quiet

.PHONY: web-migrate web-static web-docs web-demo-user web-serve

web-migrate: install
	@$(PY) manage.py migrate --noinput -v 0

web-static: install frontend
	$(PY) manage.py collectstatic --noinput -v 0

# The documentation site, which the app serves at /docs/ (settings.INSPO_DOCS_DIR), built afresh each time (a few
# seconds). A build that fails does not stop the app: /docs/ then says how to build it (`make docs` shows why).
web-docs: install
	@echo "mkdocs build into $(DOCS_DIR)/ (served at /docs/)"; mkdir -p "$(STATE_DIR)"; \
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --quiet --site-dir "$(DOCS_DIR)" 2>"$(STATE_DIR)/mkdocs.log" \
		|| echo "the documentation did not build ($(STATE_DIR)/mkdocs.log says why): /docs/ may be missing or stale"

# The password is made when the user is created and kept in $(DEMO_LOGIN) (mode 600) for web-serve to show.
web-demo-user: web-migrate
	@$(PY) manage.py create_team_user --team "$(DEMO_TEAM)" --username "$(DEMO_USER)" --superuser \
		--password-file "$(DEMO_LOGIN)" >/dev/null

# The web server, the retrieval service (every run's searches, each corpus index opened once), a training worker (cpu
# queue, one run at a time) and a housekeeping worker with the scheduler, together in the foreground; once the web server answers and both workers have started their pools, the address and
# the demo login are printed in a box.
# gunicorn's control socket is the instance's own, $(STATE_DIR)/gunicorn.ctl (its default, ~/.gunicorn/gunicorn.ctl, is
# shared by every instance of the machine's user).
# Ctrl-C or a SIGTERM to make stops all four, each once: SIGTERM is passed on to each of them; a Ctrl-C reached
# each of them already (the terminal signals the whole process group), so it is not repeated. If one of them exits
# on its own, the others are stopped too. A shell that starts with SIGINT ignored (what a script's `make run &`, nohup
# or a supervisor may hand it) cannot trap it, so the recipe first runs itself again with SIGINT and SIGTERM handled
# by default: its Ctrl-C (a SIGINT to the process group) is then the same stop. The stop is announced as soon as it
# is asked for ("INSPO stopping"), since the workers take seconds to finish after the web server's last line, and
# its end last ("INSPO stopped").
web-serve: SHELL := /bin/bash
# Its runs search through the retrieval service it starts (an operator's own INSPO_RETRIEVAL_URL is kept).
web-serve: export INSPO_RETRIEVAL_PORT := $(RETRIEVAL_PORT)
web-serve: export INSPO_RETRIEVAL_URL ?= http://127.0.0.1:$(RETRIEVAL_PORT)
web-serve: web-migrate web-static
	@[ "$$(trap -p INT)" != "trap -- '' SIGINT" ] || exec env --default-signal=INT,TERM /bin/bash -c "$$BASH_EXECUTION_STRING"; \
	stop=; trap 'stop=TERM' TERM; trap 'stop=INT' INT; \
	$(PY) manage.py retrieval_service & search=$$!; \
	$(CELERY) worker -Q cpu -c 1 --max-tasks-per-child 1 -n cpu@%h -l INFO & cpu=$$!; \
	$(CELERY) worker -Q ops -c 1 -B -n ops@%h -l WARNING & ops=$$!; \
	$(VENV)/bin/gunicorn webapp.config.wsgi --bind $(WEB_HOST):$(WEB_PORT) --workers 2 --timeout 300 \
		--control-socket "$(abspath $(STATE_DIR))/gunicorn.ctl" --access-logfile - & web=$$!; \
	for _ in $$(seq 240); do \
		[ -z "$$stop" ] && kill -0 $$web 2>/dev/null || break; \
		(exec 3<>/dev/tcp/$(WEB_HOST)/$(WEB_PORT)) 2>/dev/null && pgrep -P $$cpu >/dev/null && pgrep -P $$ops >/dev/null \
			&& { $(call login_box); break; }; sleep 0.5; \
	done; \
	[ -n "$$stop" ] || wait -n $$cpu $$ops $$web $$search; status=$$?; trap '' INT TERM; \
	[ -z "$$stop" ] || echo "INSPO stopping ($$stop): the web server, the retrieval service and both workers finish first"; \
	if [ "$$stop" != INT ]; then kill -TERM $$cpu $$ops $$web $$search 2>/dev/null; fi; \
	wait $$cpu $$ops $$web $$search; \
	if [ -n "$$stop" ]; then echo "INSPO stopped ($$stop)"; else exit $$status; fi

# Bash that prints the address, the demo user and its password (when $(DEMO_LOGIN) has it) in a box.
define login_box
	password=$$(cat "$(DEMO_LOGIN)" 2>/dev/null || echo "the one printed when it was created"); \
	lines=("INSPO is running at http://$(WEB_HOST):$(WEB_PORT)/" \
		"user: $(DEMO_USER)    password: $$password" \
		"docs: /docs/    API docs: /api/docs/    admin: /admin/" \
		"Ctrl-C stops it (so does kill -TERM to make)"); \
	width=0; for line in "$${lines[@]}"; do (( $${#line} > width )) && width=$${#line}; done; \
	rule=$$(printf '%*s' $$((width + 2)) '' | tr ' ' '-'); \
	printf '\n+%s+\n' "$$rule"; printf "| %-$${width}s |\n" "$${lines[@]}"; printf '+%s+\n\n' "$$rule"
endef
