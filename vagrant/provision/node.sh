#!/usr/bin/env bash
# A ring node (storage node) on this VM as a systemd service: the same `sr3 node`
# command the one-machine lab runs per node, here with the VM's private address, the
# ZooKeeper host and the secret every VM shares. Its node id is kept in its data dir,
# so a restart rejoins as the same node. Zone = the host name (one zone per VM).
#
# Env: SR3_HOST_IP, SR3_ZK; optional SR3_NODE_PORT (7400).
set -euo pipefail
# Vagrant runs a copy of this script from /tmp: lib.sh is read from the synced repository.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "${SR3_SRC:-$(dirname "$0")/../..}/vagrant/provision/lib.sh"
need SR3_HOST_IP SR3_ZK

data_dir=$SR3_VAR/node
mkdir -p "$data_dir"
[ "$(id -u)" -ne 0 ] || chown -R "$SR3_USER:$SR3_USER" "$data_dir"
if [ "${SR3_NO_SYSTEMD:-0}" != 1 ]; then
  wait_port "${SR3_ZK%:*}" "${SR3_ZK##*:}" 900 ZooKeeper # its VM may still be provisioning
fi
install_service node "SR3 ring node on $SR3_HOST_IP:${SR3_NODE_PORT:-7400}" \
  "$SR3_SRC/.venv/bin/sr3" node --zk "$SR3_ZK" --host "$SR3_HOST_IP" \
  --port "${SR3_NODE_PORT:-7400}" --data-dir "$data_dir" --zone "$(hostname -s)" \
  --secret-file "$SR3_ETC/secret"
