# shellcheck shell=bash
# Sourced by the provisioning scripts here: where things live on a VM, and one way to
# run a daemon as a systemd service.
#
# Every path can be moved from the environment, which is how the test suite runs the
# scripts' project-facing parts without root (SR3_ETC, SR3_VAR in a temp dir and
# SR3_NO_SYSTEMD=1).

# The repository (rsynced in by the Vagrantfile) and its venv, built by common.sh.
SR3_SRC=${SR3_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
SR3_ETC=${SR3_ETC:-/etc/sr3}
SR3_VAR=${SR3_VAR:-/var/lib/sr3}
SR3_USER=${SR3_USER:-vagrant}
# The venv the daemons run from (the netns lab passes the one it runs in).
SR3_VENV=${SR3_VENV:-$SR3_SRC/.venv}
SR3_PY=$SR3_VENV/bin/python
export SR3_SRC SR3_ETC SR3_VAR SR3_USER SR3_VENV SR3_PY

# need VAR...: fail naming the first unset variable (the Vagrantfile sets them all).
need() {
  local var
  for var in "$@"; do
    if [ -z "${!var:-}" ]; then
      echo "provision: $var is not set; run this through the Vagrantfile (vagrant provision)" >&2
      exit 1
    fi
  done
}

# install_service NAME DESCRIPTION COMMAND...: run COMMAND as SR3_USER under the
# systemd unit sr3-NAME, enabled and (re)started. COMMAND goes into a wrapper script
# $SR3_ETC/run/NAME, written with printf %q (a classpath's `lib/*` stays literal for
# java), which first exports $SR3_ETC/env, the ring secret as SR3_NODE_SECRET, as
# the one-machine lab gives it to its Storm daemons, and SR3_SERVICE=NAME (what a
# daemon's environment shows it was started by). With SR3_NO_SYSTEMD=1 only the
# wrapper is written.
install_service() {
  local name=$1 description=$2
  shift 2
  local wrapper=$SR3_ETC/run/$name
  mkdir -p "$SR3_ETC/run"
  {
    echo '#!/usr/bin/env bash'
    echo "# sr3-$name: $description (written by vagrant/provision; rerun it, do not edit)"
    echo 'set -euo pipefail'
    printf 'set -a; . %q; set +a\n' "$SR3_ETC/env"
    # shellcheck disable=SC2016 # expanded by the wrapper when it runs, not here
    printf 'SR3_NODE_SECRET=$(cat %q); export SR3_NODE_SECRET\n' "$SR3_ETC/secret"
    printf 'export SR3_SERVICE=%q\n' "$name"
    printf 'exec'
    printf ' %q' "$@"
    printf '\n'
  } >"$wrapper"
  chmod 0755 "$wrapper"
  if [ "${SR3_NO_SYSTEMD:-0}" = 1 ]; then
    echo "provision: wrote $wrapper (SR3_NO_SYSTEMD=1: no unit)"
    return 0
  fi
  cat >"/etc/systemd/system/sr3-$name.service" <<UNIT
[Unit]
Description=SR3 lab: $description
After=network-online.target
Wants=network-online.target

[Service]
User=$SR3_USER
WorkingDirectory=$SR3_VAR
ExecStart=$wrapper
Restart=on-failure
RestartSec=5
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
UNIT
  systemctl daemon-reload
  systemctl enable "sr3-$name.service" >/dev/null 2>&1
  systemctl restart "sr3-$name.service"
  echo "provision: sr3-$name.service started ($description); logs: journalctl -u sr3-$name"
}

# wait_port HOST PORT SECONDS WHAT: return once a TCP connect to HOST:PORT succeeds.
wait_port() {
  local host=$1 port=$2 seconds=$3 what=$4 i
  for ((i = 0; i < seconds; i++)); do
    if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
      return 0
    fi
    sleep 1
  done
  echo "provision: $what at $host:$port did not answer within $seconds s" >&2
  exit 1
}
