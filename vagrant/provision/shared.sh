#!/usr/bin/env bash
# usage: shared.sh server|client
#
# A directory at the same path on every Spark host, $SR3_SHARED (/srv/sr3), exported
# over NFS by the nimbus VM (server) and mounted by the worker VMs (client). Spark
# needs it for `sr3 run --engine spark --checkpoint-dir`: executors write the state
# store and the sink's parquet files there and the driver reads them back, which the
# one-machine lab gets for free from its one disk. VM-only.
#
# Env: SR3_NIMBUS (the server's IP), SR3_SHARED_NET (the clients, e.g.
# 192.168.56.0/24); optional SR3_SHARED (/srv/sr3).
set -euo pipefail
# Vagrant runs a copy of this script from /tmp: lib.sh is read from the synced repository.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "${SR3_SRC:-$(dirname "$0")/../..}/vagrant/provision/lib.sh"
role=${1:-}
shared=${SR3_SHARED:-/srv/sr3}
need SR3_NIMBUS SR3_SHARED_NET
export DEBIAN_FRONTEND=noninteractive
mkdir -p "$shared"

case "$role" in
  server)
    if ! dpkg-query -W nfs-kernel-server >/dev/null 2>&1; then
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends nfs-kernel-server >/dev/null
    fi
    chown "$SR3_USER:$SR3_USER" "$shared"
    mkdir -p /etc/exports.d
    echo "$shared $SR3_SHARED_NET(rw,sync,no_subtree_check)" >/etc/exports.d/sr3.exports
    systemctl enable --now nfs-server >/dev/null 2>&1
    exportfs -ra
    echo "provision: $shared exported to $SR3_SHARED_NET over NFS"
    ;;
  client)
    if ! dpkg-query -W nfs-common >/dev/null 2>&1; then
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends nfs-common >/dev/null
    fi
    line="$SR3_NIMBUS:$shared $shared nfs defaults,_netdev 0 0"
    grep -qxF "$line" /etc/fstab || echo "$line" >>/etc/fstab
    wait_port "$SR3_NIMBUS" 2049 900 "the NFS server" # its VM may still be provisioning
    mountpoint -q "$shared" || mount "$shared"
    echo "provision: $SR3_NIMBUS:$shared mounted on $shared"
    ;;
  *)
    echo "usage: $0 server|client" >&2
    exit 2
    ;;
esac
