#!/usr/bin/env bash
# A ring node (storage node) on this host: the `sr3 node` command, installed as a
# systemd service on a VM, or only written as its start wrapper with SR3_NO_SYSTEMD=1,
# which is how the one-machine netns lab (`sr3 lab up --netns`) starts every ring node
# it places on a host (sr3_cli/provision.py). On a VM: the VM's private address, the
# ZooKeeper host and the secret every VM shares; its node id is kept in its data dir,
# so a restart rejoins as the same node; zone = the host name (one zone per VM).
#
# Env: SR3_HOST_IP, SR3_ZK; optional SR3_NODE_PORT (7400; 0 picks a free one),
# SR3_NODE_ID (the id to register; default: the one kept in the data dir),
# SR3_NODE_DATA_DIR ($SR3_VAR/node), SR3_NODE_ZONE (the host name; empty: none),
# SR3_ZK_CHROOT (sr3's default), SR3_LOG_LEVEL (sr3's default), SR3_NODE_SERVICE
# (node: the unit sr3-node and the wrapper $SR3_ETC/run/node).
set -euo pipefail
# Vagrant runs a copy of this script from /tmp: lib.sh is read from the synced repository.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "${SR3_SRC:-$(dirname "$0")/../..}/vagrant/provision/lib.sh"
need SR3_HOST_IP SR3_ZK

data_dir=${SR3_NODE_DATA_DIR:-$SR3_VAR/node}
port=${SR3_NODE_PORT:-7400}
zone=${SR3_NODE_ZONE-$(hostname -s)}
mkdir -p "$data_dir"
[ "$(id -u)" -ne 0 ] || chown -R "$SR3_USER:$SR3_USER" "$data_dir"
if [ "${SR3_NO_SYSTEMD:-0}" != 1 ]; then
  wait_port "${SR3_ZK%:*}" "${SR3_ZK##*:}" 900 ZooKeeper # its VM may still be provisioning
fi
argv=("$SR3_VENV/bin/sr3")
[ -z "${SR3_LOG_LEVEL:-}" ] || argv+=(--log-level "$SR3_LOG_LEVEL")
argv+=(node --zk "$SR3_ZK" --host "$SR3_HOST_IP" --port "$port" --data-dir "$data_dir"
  --secret-file "$SR3_ETC/secret")
[ -z "${SR3_ZK_CHROOT:-}" ] || argv+=(--chroot "$SR3_ZK_CHROOT")
[ -z "${SR3_NODE_ID:-}" ] || argv+=(--node-id "$SR3_NODE_ID")
[ -z "$zone" ] || argv+=(--zone "$zone")
install_service "${SR3_NODE_SERVICE:-node}" "SR3 ring node on $SR3_HOST_IP:$port" "${argv[@]}"
