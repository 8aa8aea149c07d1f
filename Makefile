# Two front-door commands: `make run` (set up, start the service) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export YOLO_OFFLINE := 1

.PHONY: setup system-deps tools lock run demo test lint clean

setup: $(VENV)/.installed

# The venv from the hashed lock of CPU nodes, development and CI (requirements/locks/dev.txt:
# pyproject's dependencies with the dev, nvidia and openvino extras, torch from requirements/cpu.txt):
# every file is checked against its sha256, and the project itself is installed without dependencies
# (its build backend, setuptools, is in the lock too).
$(VENV)/.installed: pyproject.toml requirements/locks/dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes -r requirements/locks/dev.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

# One hashed lock per install target (dev/CPU, CUDA image, ROCm image) in requirements/locks/,
# resolved from pyproject.toml by uv in its own tool environment (scripts/lock.py). Run it after
# every change to pyproject.toml's dependencies or to requirements/*.txt (tests/deploy/test_locks.py
# fails until then); it keeps the locked versions. `make lock UPGRADE=1` moves every package to
# its newest allowed release (the weekly refresh).
lock: .tools/lock/.installed
	.tools/lock/bin/python scripts/lock.py $(if $(UPGRADE),--upgrade)

.tools/lock/.installed: requirements/tools/lock.txt scripts/tool-env.sh
	scripts/tool-env.sh lock

# Debian packages the tests use: promtool and the Prometheus server, nginx (deploy tests),
# the PostgreSQL server (a throw-away cluster for the event-store tests, app/tooling/pgcluster.py), the
# Mosquitto MQTT broker (a throw-away broker for the MQTT tests, tests/support/mqtt_broker.py), and
# Chromium (the console's real-browser tests, tests/browser: Playwright drives Debian's build),
# ffmpeg (camera ingest reads every stream through it) and GStreamer's RTSP server with the system
# Python's GObject bindings (the ingest tests' real RTSP camera, tests/support/rtsp_server.py).
GST_PROBE := import gi; gi.require_version('Gst', '1.0'); gi.require_version('GstRtspServer', '1.0'); \
  from gi.repository import Gst, GstRtspServer; Gst.init(None); \
  assert all(Gst.ElementFactory.find(e) for e in ('qtdemux', 'h264parse', 'rtph264pay', 'appsrc'))
system-deps:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v nginx >/dev/null && \
	  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ls /usr/sbin/mosquitto >/dev/null 2>&1 && \
	  command -v chromium >/dev/null && command -v chromedriver >/dev/null && command -v ffmpeg >/dev/null && \
	  /usr/bin/python3 -c "$(GST_PROBE)" >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus nginx-light postgresql mosquitto chromium chromium-driver \
	      ffmpeg python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base gstreamer1.0-plugins-good \
	      gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly gstreamer1.0-libav >/dev/null; }

# The first run: rules on with a starter site file and the SQLite event store under the data
# folder (.cache/campusguard, CAMPUSGUARD_DATA_DIR), on 127.0.0.1 (no key needed there).
run: setup
	$(VENV)/bin/campusguard serve --starter-site

# `make run` plus a demo camera: a generated clip of a person crossing a line into a zone.
demo: setup
	$(VENV)/bin/campusguard demo

# Four workers, whole files per worker (module-scoped servers stay one per module), heaviest
# files first (tests/conftest.py: heaviest_files_first); markers
# (server, pg, mqtt, browser, slow) select subsets: `.venv/bin/python -m pytest -m "not server"`.
# Tool environments from hashed locks, apart from the service venv (checkov for tests/deploy).
tools: .tools/checkov/.installed

.tools/checkov/.installed: requirements/tools/checkov.txt scripts/tool-env.sh
	scripts/tool-env.sh checkov

# ruff (pyflakes, pycodestyle, isort, pyupgrade, bugbear) and mypy, configured in pyproject.toml; CI runs it first.
lint: setup
	$(VENV)/bin/ruff check app
	$(VENV)/bin/mypy

test: setup system-deps tools
	$(PY) -m pytest -n 4 --dist loadfile --no-loadscope-reorder --durations=30

clean:
	rm -rf $(VENV) .cache .pytest_cache .tools
