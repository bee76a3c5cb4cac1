#!/usr/bin/env bash
# The ZooKeeper host: Debian's zookeeper package run by its own zkServer.sh in the
# foreground under systemd, listening on every address at 2181. VM-only: the
# one-machine lab's zk/launcher.py binds 127.0.0.1 by design, so it cannot serve
# other hosts.
set -euo pipefail
# Vagrant runs a copy of this script from /tmp: lib.sh is read from the synced repository.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "${SR3_SRC:-$(dirname "$0")/../..}/vagrant/provision/lib.sh"

conf_dir=$SR3_ETC/zookeeper
data_dir=$SR3_VAR/zookeeper
mkdir -p "$conf_dir" "$data_dir"
cat >"$conf_dir/zoo.cfg" <<CFG
# Written by vagrant/provision/zookeeper.sh: one standalone server for the SR3 lab.
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$data_dir
clientPort=${SR3_ZK_PORT:-2181}
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
CFG
[ "$(id -u)" -ne 0 ] || chown -R "$SR3_USER:$SR3_USER" "$data_dir"

# Debian's zkEnv.sh fixes the classpath and log settings; its output goes to the journal.
install_service zookeeper "ZooKeeper on port ${SR3_ZK_PORT:-2181}" \
  /usr/share/zookeeper/bin/zkServer.sh start-foreground "$conf_dir/zoo.cfg"
if [ "${SR3_NO_SYSTEMD:-0}" != 1 ]; then
  wait_port 127.0.0.1 "${SR3_ZK_PORT:-2181}" 60 ZooKeeper
fi
