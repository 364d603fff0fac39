#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian/Ubuntu machine (system
# packages through apt-get when missing, Python packages into ./.venv), then run
# the linters, the type checker and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
# nft cuts a broker off the network in the cluster tests (moldau.testing.isolation).
command -v nft >/dev/null 2>&1 || need+=(nftables)
# ZooKeeper for the cluster tests: Debian's jar, run directly with java.
# Apache Kafka's Java client, tools and Streams (tests/java) are built with Maven.
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
[ -f /usr/share/java/zookeeper.jar ] || need+=(libzookeeper-java)
[ -f /usr/share/java/slf4j-simple.jar ] || need+=(libslf4j-java)
# KafkaJS (tests/js) runs on Node.js; npm installs the version its lock file pins.
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
# The web console's tests (tests/ui) drive Debian's Chromium through Playwright.
[ -x /usr/bin/chromium ] || need+=(chromium)
# A C compiler and Python's headers build the Spark source's record walk
# (moldau.spark.record_walk) and the sink's record build (moldau.spark.record_build),
# so the tests cover them beside their Python fallbacks.
command -v gcc >/dev/null 2>&1 || need+=(gcc)
"${PYTHON:-python3}" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || need+=(python3-dev)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e '.[test,spark]'
.venv/bin/python -c 'from moldau.spark import record_walk as w; assert w.COMPILED, "the C record walk did not build"'
.venv/bin/python -c 'from moldau.spark import record_build as b; assert b.COMPILED, "the C record build did not build"'
# kio 0.5.0 (Kafka 3.x's schemas, with the versions Kafka 4.0 dropped) apart from the
# kio the broker uses: tests/unit/test_legacy_schemas.py checks our bytes against it.
[ -d .venv/kio-0.5.0/kio ] || .venv/bin/pip install -q --disable-pip-version-check \
  --no-deps --target .venv/kio-0.5.0 kio==0.5.0

# Kafka's jars from Maven Central into tests/java/target/lib (cached in ~/.m2), Kafka
# 3.9's broker (old message formats) into tests/java/kafka39/target/lib, and Spark's
# Kafka connector into tests/java/spark/target/lib.
mvn -q -B -f tests/java/pom.xml package
mvn -q -B -f tests/java/kafka39/pom.xml package
mvn -q -B -f tests/java/spark/pom.xml package
# KafkaJS into tests/js/node_modules, as tests/js/package-lock.json pins it.
(cd tests/js && npm ci --no-audit --no-fund --silent)

lint_dirs="src tests"; [ -d bench ] && lint_dirs="$lint_dirs bench"
.venv/bin/ruff check $lint_dirs
.venv/bin/ruff format --check $lint_dirs
.venv/bin/mypy
exec .venv/bin/pytest -q "$@"
