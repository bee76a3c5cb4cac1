#!/usr/bin/env bash
# Idempotent set-up for humans and CI alike: Debian's ZooKeeper (when missing) and a
# virtualenv in .venv with the project installed in editable mode (confluent-kafka, the
# Kafka client, is a main dependency: Kafka spouts and sinks run in worker processes), and
# Apache Storm's and Apache Kafka's jars from Maven Central (scripts/fetch-jars.sh). No
# other downloads than Debian, PyPI, Maven.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3

if [ ! -f /usr/share/java/zookeeper.jar ]; then
  echo "bootstrap: installing Debian's zookeeper package (needs root or sudo)"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq zookeeper >/dev/null
fi
# Debian's vagrant (with its libvirt provider, so `vagrant validate` checks that block)
# and shellcheck, for the suite's checks of vagrant/ (tests/integration/test_vagrant.py).
# The lab's VMs skip vagrant (vagrant/provision/common.sh sets SR3_NO_VAGRANT=1).
# Debian's prometheus for `sr3 lab up --metrics`, which runs its own server (own
# config, data under the lab dir, a free loopback port), never the packaged service.
# Debian's chromium renders `sr3 compare`'s report.html headless in the suite.
# Debian's iptables: the netns lab's link delay and loss (`--netem delay=,loss=`) are
# netfilter rules in each host (sr3_cli/netns.py), for kernels without sch_netem.
dev_tools=(shellcheck prometheus chromium iptables)
[ "${SR3_NO_VAGRANT:-0}" = 1 ] || dev_tools+=(vagrant vagrant-libvirt)
missing=()
for pkg in "${dev_tools[@]}"; do
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" = installed ] || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "bootstrap: installing Debian's ${missing[*]} (needs root or sudo)"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! command -v java >/dev/null 2>&1; then
  echo "bootstrap: java not found; install Java 17 (apt-get install default-jre-headless)" >&2
  exit 1
fi

stamp=.venv/.sr3-installed
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade "pip>=24" 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -m pip install -q -e ".[dev,spark]" 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c "import sr3, zk, backend, kazoo, msgpack, mmh3, confluent_kafka, prometheus_client" # fail loudly if the install did not work
  touch "$stamp"
fi
# Apache Storm's jars for the lab's real Storm cluster (.cache/storm-<version>/) and Apache
# Kafka's for its broker (.cache/kafka-<version>/); ~1 s when current.
scripts/fetch-jars.sh
