# Two front-door commands: `make run` (set up, start the service) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export YOLO_OFFLINE := 1

.PHONY: setup system-deps run test lint clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements/cpu.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements/cpu.txt -e ".[dev,nvidia]"
	touch $@

# Debian packages the tests use: promtool and the Prometheus server, nginx (deploy tests),
# the PostgreSQL server (a throw-away cluster for the event-store tests, app/tooling/pgcluster.py), the
# Mosquitto MQTT broker (a throw-away broker for the MQTT tests, tests/support/mqtt_broker.py), and
# Chromium (the console's real-browser tests, tests/browser: Playwright drives Debian's build).
system-deps:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v nginx >/dev/null && \
	  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ls /usr/sbin/mosquitto >/dev/null 2>&1 && \
	  command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus nginx-light postgresql mosquitto chromium chromium-driver >/dev/null; }

run: setup
	$(VENV)/bin/campusguard serve

# Two workers, whole files per worker (module-scoped servers stay one per module); markers
# (server, pg, mqtt, browser, slow) select subsets: `.venv/bin/python -m pytest -m "not server"`.
test: setup system-deps
	$(PY) -m pytest -n 2 --dist loadfile

clean:
	rm -rf $(VENV) .cache .pytest_cache
