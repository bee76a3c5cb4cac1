#!/usr/bin/env bash
# usage: spark.sh master|worker
#
# A Spark standalone daemon as a systemd service, or only written as its start
# wrapper with SR3_NO_SYSTEMD=1, which is how the one-machine netns lab
# (`sr3 lab up --netns --spark`) starts its master and workers on their hosts
# (sr3_cli/lab_spark.py): `spark-class` of the venv's pip pyspark
# (spark_bridge.spark_install.spark_home(), shared) with the Master or Worker main
# class and the options spark_bridge/standalone_jvms.py gives them. On a VM: the
# fixed ports (master 7077, web UIs 8080/8081), the private IPs and systemd.
# Executors run the venv's python (PYSPARK_PYTHON), which has the project installed
# at the same path on every VM.
#
# Env: SR3_HOST_IP, SR3_SPARK_MASTER (spark://IP:PORT); optional SR3_SPARK_CORES
# (the VM's CPUs), SR3_SPARK_MEMORY (2g), SR3_SPARK_PORT (7077),
# SR3_SPARK_WEBUI_PORT (8080), SR3_SPARK_WORKER_PORT (Spark picks one),
# SR3_SPARK_WORKER_WEBUI_PORT (8081), SR3_SPARK_WORK_DIR ($SR3_VAR/spark/work),
# SR3_SPARK_SERVICE (spark-master or spark-worker: the unit sr3-NAME and the
# wrapper $SR3_ETC/run/NAME).
set -euo pipefail
# Vagrant runs a copy of this script from /tmp: lib.sh is read from the synced repository.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "${SR3_SRC:-$(dirname "$0")/../..}/vagrant/provision/lib.sh"
role=${1:-}
need SR3_HOST_IP SR3_SPARK_MASTER

spark_home=$("$SR3_PY" -c 'from spark_bridge.spark_install import spark_home; print(spark_home())')
work_dir=${SR3_SPARK_WORK_DIR:-$SR3_VAR/spark/work}
mkdir -p "$work_dir" "$SR3_VAR/spark"
[ "$(id -u)" -ne 0 ] || chown -R "$SR3_USER:$SR3_USER" "$SR3_VAR/spark"
common=(env "SPARK_HOME=$spark_home" "SPARK_LOCAL_IP=$SR3_HOST_IP"
  "PYSPARK_PYTHON=$SR3_PY" "SPARK_LOG_DIR=$SR3_VAR/spark")

case "$role" in
  master)
    port=${SR3_SPARK_PORT:-7077}
    install_service "${SR3_SPARK_SERVICE:-spark-master}" "Spark standalone master" \
      "${common[@]}" "$spark_home/bin/spark-class" org.apache.spark.deploy.master.Master \
      --host "$SR3_HOST_IP" --port "$port" --webui-port "${SR3_SPARK_WEBUI_PORT:-8080}"
    if [ "${SR3_NO_SYSTEMD:-0}" != 1 ]; then
      wait_port "$SR3_HOST_IP" "$port" 120 "Spark master"
    fi
    ;;
  worker)
    if [ "${SR3_NO_SYSTEMD:-0}" != 1 ]; then
      master=${SR3_SPARK_MASTER#spark://} # its VM may still be provisioning
      wait_port "${master%:*}" "${master##*:}" 900 "Spark master"
    fi
    ports=()
    [ -z "${SR3_SPARK_WORKER_PORT:-}" ] || ports=(--port "$SR3_SPARK_WORKER_PORT")
    install_service "${SR3_SPARK_SERVICE:-spark-worker}" "Spark standalone worker" \
      "${common[@]}" "$spark_home/bin/spark-class" org.apache.spark.deploy.worker.Worker \
      "$SR3_SPARK_MASTER" --host "$SR3_HOST_IP" "${ports[@]}" \
      --cores "${SR3_SPARK_CORES:-$(nproc)}" --memory "${SR3_SPARK_MEMORY:-2g}" \
      --webui-port "${SR3_SPARK_WORKER_WEBUI_PORT:-8081}" --work-dir "$work_dir"
    ;;
  *)
    echo "usage: $0 master|worker" >&2
    exit 2
    ;;
esac
