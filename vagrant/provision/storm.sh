#!/usr/bin/env bash
# usage: storm.sh nimbus|supervisor
#
# A Storm daemon of the pinned release (jvm/storm/pom.xml, jars in .cache/ from
# scripts/fetch-jars.sh) as a systemd service. Shared with the one-machine lab: the
# storm.yaml comes from storm_bridge.apache.state.cluster_conf/write_yaml (the same
# timeouts and keys `sr3 lab up --storm` writes) and the java command line from
# storm_bridge.apache.launcher.daemon_command. VM-only: the addresses (nimbus.seeds
# and storm.local.hostname are this lab's private IPs, not 127.0.0.1), the fixed
# ports (Nimbus 6627, supervisor 6628, worker slots from 6700) and systemd.
#
# Env: SR3_HOST_IP, SR3_ZK (HOST:PORT), SR3_NIMBUS (Nimbus's IP); optional
# SR3_STORM_SLOTS (2), SR3_STORM_HEAP_MB (512), SR3_STORM_WORKER_HEAP_MB (768), and
# SR3_NIMBUS_PORT, SR3_SUPERVISOR_PORT, SR3_STORM_SLOT_BASE (the ports above).
#
# The one-machine netns lab (`sr3 lab up --netns --storm`, sr3_cli/lab_storm.py)
# starts its daemons through the wrapper this writes with SR3_NO_SYSTEMD=1, and
# passes what its cluster chose: SR3_STORM_CONF (its storm.yaml, used as is: none
# is written), SR3_STORM_NAME (supervisor-2...: the log's and the wrapper's name),
# SR3_STORM_OPTIONS (JSON: the daemon's -Dstorm.options: its dir, slots, ports and
# host), SR3_STORM_JVM_ARGS (JSON list), SR3_STORM_LOG_DIR and SR3_JAVA.
set -euo pipefail
# Vagrant runs a copy of this script from /tmp: lib.sh is read from the synced repository.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "${SR3_SRC:-$(dirname "$0")/../..}/vagrant/provision/lib.sh"
role=${1:-}
case "$role" in
  nimbus | supervisor) ;;
  *)
    echo "usage: $0 nimbus|supervisor" >&2
    exit 2
    ;;
esac
need SR3_HOST_IP SR3_ZK SR3_NIMBUS

root=$SR3_VAR/storm
mkdir -p "$root" "$SR3_ETC/storm"
[ "$(id -u)" -ne 0 ] || chown -R "$SR3_USER:$SR3_USER" "$root"

# Writes $SR3_ETC/storm/storm.yaml (unless SR3_STORM_CONF names one) and prints the
# daemon's argv, NUL-separated.
mapfile -d '' argv < <(
  "$SR3_PY" - "$role" "${SR3_STORM_CONF:-$SR3_ETC/storm/storm.yaml}" "$root" <<'PY'
import json
import os
import sys
from pathlib import Path

from sr3.config import ZkConfig
from sr3_cli.lab_storm import ZK_ROOT
from storm_bridge.apache.home import StormHome
from storm_bridge.apache.launcher import daemon_command
from storm_bridge.apache.state import (
    StormClusterInfo,
    SupervisorInfo,
    cluster_conf,
    write_yaml,
)

role, conf_file, root = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
host, zk, nimbus = (os.environ[k] for k in ("SR3_HOST_IP", "SR3_ZK", "SR3_NIMBUS"))
slots = int(os.environ.get("SR3_STORM_SLOTS", "2"))
slot_base = int(os.environ.get("SR3_STORM_SLOT_BASE", "6700"))
home = StormHome.locate()
local_dir = root / "local" / role
if not os.environ.get("SR3_STORM_CONF"):  # a VM: this host's own storm.yaml
    supervisor = SupervisorInfo(
        index=1,
        local_dir=str(local_dir),
        slots=tuple(slot_base + i for i in range(slots)),
        thrift_port=int(os.environ.get("SR3_SUPERVISOR_PORT", "6628")),
    )
    info = StormClusterInfo(
        version=home.version,
        storm_home=str(home.root),
        conf_file=str(conf_file),
        zk_hosts=zk,
        zk_root=ZK_ROOT,
        nimbus_port=int(os.environ.get("SR3_NIMBUS_PORT", "6627")),
        supervisors=(supervisor,),
    )
    conf = cluster_conf(
        info,
        root=root,
        log_dir=root / "logs",
        worker_heap_mb=int(os.environ.get("SR3_STORM_WORKER_HEAP_MB", "768")),
        extra={
            "nimbus.seeds": [nimbus],
            "storm.local.hostname": host,
            # the ring the topologies' components reach, as the lab's storm.yaml says
            "sr3.zk.hosts": zk,
            "sr3.zk.chroot": ZkConfig().chroot,
        },
    )
    write_yaml(conf_file, conf, f"the SR3 Vagrant lab's Storm {role} on {host}")
local_dir.mkdir(parents=True, exist_ok=True)
raw_options = os.environ.get("SR3_STORM_OPTIONS")
argv = daemon_command(
    home,
    role,
    conf_file=conf_file,
    log_dir=Path(os.environ.get("SR3_STORM_LOG_DIR") or root / "logs"),
    name=os.environ.get("SR3_STORM_NAME") or role,
    heap_mb=int(os.environ.get("SR3_STORM_HEAP_MB", "512")),
    # per daemon, as the lab passes each supervisor's own dir
    options=(
        json.loads(raw_options) if raw_options else {"storm.local.dir": str(local_dir)}
    ),
    java=os.environ.get("SR3_JAVA") or None,
    jvm_args=json.loads(os.environ.get("SR3_STORM_JVM_ARGS") or "[]"),
)
sys.stdout.write("\0".join(argv) + "\0")
PY
)
if [ "${#argv[@]}" -eq 0 ]; then
  echo "provision: could not build the Storm $role command (see the error above)" >&2
  exit 1
fi
[ "$(id -u)" -ne 0 ] || chown -R "$SR3_USER:$SR3_USER" "$root"

if [ "${SR3_NO_SYSTEMD:-0}" != 1 ]; then
  wait_port "${SR3_ZK%:*}" "${SR3_ZK##*:}" 900 ZooKeeper # its VM may still be provisioning
fi
install_service "storm-${SR3_STORM_NAME:-$role}" "Apache Storm $role" "${argv[@]}"
if [ "$role" = nimbus ] && [ "${SR3_NO_SYSTEMD:-0}" != 1 ]; then
  wait_port "$SR3_HOST_IP" "${SR3_NIMBUS_PORT:-6627}" 180 "Storm Nimbus"
fi
