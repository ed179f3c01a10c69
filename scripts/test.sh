#!/usr/bin/env bash
# Install everything the tests need (Debian packages, a virtualenv with the
# project and its test extras), then run lint, types and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PY=${PYTHON:-python3}
# A C compiler and Python's headers build dmq's one C extension (the record check,
# dmq.record.check); without them dmq uses the same check in Python, slower.
python_headers() { "$PY" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; }
if ! command -v kcat >/dev/null 2>&1 || [ ! -f /usr/share/java/zookeeper.jar ] \
    || ! command -v ip >/dev/null 2>&1 || [ ! -x /usr/bin/chromium ] \
    || ! command -v gcc >/dev/null 2>&1 || ! python_headers; then
  echo "==> installing Debian packages (kcat, zookeeper, iproute2, chromium, gcc, python3-dev)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq kcat zookeeper iproute2 chromium gcc python3-dev >/dev/null
fi
# Node.js runs KafkaJS in tests/integration/test_kafkajs.py (a Node.js install that
# brings its own npm is kept as it is).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "==> installing Debian packages (nodejs, npm)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PY" -m venv .venv
fi
echo "==> installing dmq with its test extras"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -e '.[test]' 2>&1 | grep -v -i "warning" || true
.venv/bin/python -c "import dmq, kafka, aiokafka, confluent_kafka, hypothesis, importlinter, xdist, aiohttp, jinja2, playwright"
if ! .venv/bin/python -c "from dmq.record import check; raise SystemExit(check.IMPLEMENTATION != 'c')"; then
  echo "dmq's C extension (dmq/record/_recordcheck.c) was not built: install gcc and Python's headers" \
       "(apt-get install gcc python3-dev) and run this again" >&2
  exit 1
fi

echo "==> installing KafkaJS (tests/integration/kafkajs, from its package-lock.json)"
npm ci --prefix tests/integration/kafkajs --no-audit --no-fund --loglevel=error >/dev/null

echo "==> ruff"
.venv/bin/ruff check dmq tests bench
echo "==> mypy"
.venv/bin/mypy dmq
echo "==> import layering (lint-imports)"
.venv/bin/lint-imports
# The suite runs on pytest-xdist workers, module by module (tests/conftest.py says how,
# and keeps timing-sensitive tests marked run_alone from running beside others); most
# tests wait on servers and timeouts. DMQ_TEST_WORKERS=0 runs it in this process alone.
WORKERS=${DMQ_TEST_WORKERS:-3}
echo "==> pytest ($WORKERS workers)"
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "$WORKERS" --dist loadscope "$@"
