#!/usr/bin/env bash
# Every VM, first: /etc/hosts, Debian's packages, the project's venv and jars (the
# same scripts/bootstrap.sh and scripts/fetch-jars.sh as `make setup` on one machine),
# the ring secret and $SR3_ETC/env, which every sr3 service reads.
#
# Env (from the Vagrantfile): SR3_SRC, SR3_HOST_IP, SR3_ZK, SR3_NIMBUS,
# SR3_SPARK_MASTER, SR3_ETC_HOSTS.
set -euo pipefail
# Vagrant runs a copy of this script from /tmp: lib.sh is read from the synced repository.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "${SR3_SRC:-$(dirname "$0")/../..}/vagrant/provision/lib.sh"
need SR3_HOST_IP SR3_ZK SR3_NIMBUS SR3_SPARK_MASTER SR3_ETC_HOSTS

# /etc/hosts: the lab's names, replacing an earlier provisioning's block.
sed -i '/# sr3-lab begin/,/# sr3-lab end/d' /etc/hosts
printf '# sr3-lab begin\n%s\n# sr3-lab end\n' "$SR3_ETC_HOSTS" >>/etc/hosts

# Java 17 for ZooKeeper, Storm and Spark; python3-venv for .venv; zookeeper's jar for
# the project's own ZooKeeper launcher and zkServer.sh; maven for fetch-jars.sh.
export DEBIAN_FRONTEND=noninteractive
if ! dpkg-query -W default-jre-headless python3-venv zookeeper maven >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends \
    default-jre-headless python3-venv python3-dev build-essential zookeeper maven >/dev/null
fi

# The project, as `make setup` installs it: .venv (editable) and .cache/ (Storm's
# jars), owned by the user the services run as. Idempotent and quick on a rerun.
chown -R "$SR3_USER:$SR3_USER" "$SR3_SRC"
sudo -u "$SR3_USER" -H env SR3_NO_VAGRANT=1 "$SR3_SRC/scripts/bootstrap.sh"

# The ring secret the Vagrantfile made on the host (vagrant/.lab/secret, rsynced in).
mkdir -p "$SR3_ETC" "$SR3_VAR"
chown "$SR3_USER:$SR3_USER" "$SR3_VAR"
if [ ! -s "$SR3_SRC/vagrant/.lab/secret" ]; then
  echo "provision: $SR3_SRC/vagrant/.lab/secret is missing; run 'vagrant up' or 'vagrant provision' from vagrant/" >&2
  exit 1
fi
install -m 0640 -o root -g "$SR3_USER" "$SR3_SRC/vagrant/.lab/secret" "$SR3_ETC/secret"

# What every service and an operator's shell sees (`set -a; . /etc/sr3/env; set +a`).
# SPARK_LOCAL_IP: a Spark driver started here binds the private address, not the
# 127.0.1.1 that Vagrant gives the host name.
cat >"$SR3_ETC/env" <<ENV
SR3_SRC=$SR3_SRC
SR3_HOST_IP=$SR3_HOST_IP
SR3_ZK=$SR3_ZK
SR3_NIMBUS=$SR3_NIMBUS
SR3_SPARK_MASTER=$SR3_SPARK_MASTER
SPARK_LOCAL_IP=$SR3_HOST_IP
PYSPARK_PYTHON=$SR3_PY
PATH=$SR3_SRC/.venv/bin:/usr/local/bin:/usr/bin:/bin
ENV
chmod 0644 "$SR3_ETC/env"
echo "provision: $(hostname) ($SR3_HOST_IP) has the project in $SR3_SRC and its venv"
