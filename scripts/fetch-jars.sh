#!/usr/bin/env bash
# Resolve Apache Storm's and Apache Kafka's jars from Maven Central into a git-ignored
# cache. Apache Storm, as a minimal STORM_HOME, .cache/storm-<version>/:
#   lib/           nimbus and supervisor classpath (storm-server and its dependencies)
#   lib-worker/    what the supervisor puts on every worker JVM's classpath (storm-client)
#   external/flux/ flux-core and flux-wrappers, for topology YAML files
#   extlib/ extlib-daemon/  empty; Storm adds them to the worker/daemon classpaths
#   conf/storm.yaml an empty map (each lab writes its own storm.yaml elsewhere)
#   log4j2/        cluster.xml and worker.xml from jvm/storm/log4j2/
# Apache Kafka (KRaft broker, jvm/kafka/pom.xml), .cache/kafka-<version>/:
#   libs/          the broker's classpath (kafka_2.13 and its dependencies)
#   config/log4j2.xml  from jvm/kafka/log4j2.xml
# Spark's Kafka source and sink (jvm/spark-kafka/pom.xml), .cache/spark-kafka-<version>/:
#   jars/          spark-sql-kafka-0-10 and what pyspark lacks of its dependencies
#                  (spark_bridge/kafka_jars.py puts them on the session's spark.jars)
# Idempotent: per release, a stamp keyed on the hash of its pom, its log4j2 files and
# this script makes a second run return at once. Maven's local repository stays ~/.m2
# (shared by clones). Override the cache root with SR3_CACHE_DIR and Maven with MVN.
set -euo pipefail
cd "$(dirname "$0")/.."

fetch_storm() {
  pom=jvm/storm/pom.xml
  version=$(sed -n 's:.*<storm.version>\(.*\)</storm.version>.*:\1:p' "$pom")
  if [ -z "$version" ]; then
    echo "fetch-jars: no <storm.version> in $pom; restore the property" >&2
    exit 1
  fi
  cache=${SR3_CACHE_DIR:-.cache}
  home=$cache/storm-$version
  key=$(cat "$pom" jvm/storm/log4j2/*.xml "$0" | sha256sum | cut -c1-16)
  stamp=$home/.sr3-fetched
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    return 0
  fi

  mvn=${MVN:-mvn}
  if ! command -v "$mvn" >/dev/null 2>&1; then
    echo "fetch-jars: '$mvn' not found; install Maven 3.8+ (apt-get install maven) or set MVN" >&2
    exit 1
  fi

  mkdir -p "$cache"
  # One fetch at a time per cache; a second caller waits, then sees the fresh stamp.
  exec 9>"$cache/.storm-fetch.lock"
  flock 9
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    return 0
  fi

  started=$(date +%s)
  partial=$(mktemp -d "$cache/storm-$version.partial.XXXXXX")
  log=$cache/storm-$version.fetch.log
  trap 'rm -rf "$partial"' EXIT
  : >"$log"

  # copy_profile PROFILE DIR GOAL: the jars of one pom profile into DIR/ (see the pom).
  copy_profile() {
    if ! "$mvn" -B -q -f "$pom" -P "$1" "$3" \
        -DincludeScope=runtime -DoutputDirectory="$PWD/$partial/$2" >>"$log" 2>&1; then
      # Name the innermost artifact Maven could not get (often a parent POM), else any.
      missing=$(sed -nE -e 's/.*Could not (find|transfer) artifact ([^ ]+).*/\2/p' \
        -e 's/.* ([^ :]+(:[^ :]+){3,4}) was not found in .*/\1/p' "$log" | head -n 1)
      if [ -z "$missing" ]; then
        missing=$(grep -oE "(Failed to read artifact descriptor for|Unable to resolve artifact) [^ :]+(:[^ :]+){2,4}" "$log" | head -n 1 | sed 's/.* //')
      fi
      echo "fetch-jars: Maven could not fetch Apache Storm $version (profile '$1' for $2/)." >&2
      echo "fetch-jars: missing artifact: ${missing:-unknown, see the log}" >&2
      echo "fetch-jars: check network access to Maven Central (https://repo.maven.apache.org)," >&2
      echo "fetch-jars: or pin another release in $pom; full Maven output: $log" >&2
      exit 1
    fi
  }

  echo "fetch-jars: resolving Apache Storm $version from Maven Central into $home"
  copy_profile daemon lib dependency:copy-dependencies
  copy_profile worker lib-worker dependency:copy-dependencies
  copy_profile flux external/flux org.apache.maven.plugins:maven-dependency-plugin:2.8:copy@flux-jars
  mkdir -p "$partial/extlib" "$partial/extlib-daemon" "$partial/conf" "$partial/log4j2"
  cp jvm/storm/log4j2/cluster.xml jvm/storm/log4j2/worker.xml "$partial/log4j2/"
  printf '# Empty on purpose: each SR3 lab writes its own storm.yaml under its lab dir.\n{}\n' \
    >"$partial/conf/storm.yaml"
  echo "$version" >"$partial/RELEASE"
  echo "$key" >"$partial/.sr3-fetched"

  # Swap in the finished tree; a half-fetched cache never looks complete.
  rm -rf "$home.old"
  if [ -d "$home" ]; then mv "$home" "$home.old"; fi
  mv "$partial" "$home"
  rm -rf "$home.old"
  trap - EXIT

  for dir in lib lib-worker external/flux; do
    jars=$(find "$home/$dir" -name '*.jar' | wc -l)
    size=$(du -sm "$home/$dir" | cut -f1)
    storm_jars=$(find "$home/$dir" \( -name '*storm*.jar' -o -name 'flux*.jar' \) -printf '%f ' | tr ' ' '\n' | sort | tr '\n' ' ')
    printf 'fetch-jars:   %-14s %3d jars %4d MB  %s\n' "$dir/" "$jars" "$size" "$storm_jars"
  done
  echo "fetch-jars: Apache Storm $version ready in $home ($(du -sm "$home" | cut -f1) MB, $(($(date +%s) - started)) s)"
}

fetch_kafka() {
  pom=jvm/kafka/pom.xml
  version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")
  if [ -z "$version" ]; then
    echo "fetch-jars: no <kafka.version> in $pom; restore the property" >&2
    exit 1
  fi
  cache=${SR3_CACHE_DIR:-.cache}
  home=$cache/kafka-$version
  key=$(cat "$pom" jvm/kafka/log4j2.xml "$0" | sha256sum | cut -c1-16)
  stamp=$home/.sr3-fetched
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    return 0
  fi

  mvn=${MVN:-mvn}
  if ! command -v "$mvn" >/dev/null 2>&1; then
    echo "fetch-jars: '$mvn' not found; install Maven 3.8+ (apt-get install maven) or set MVN" >&2
    exit 1
  fi

  mkdir -p "$cache"
  # One fetch at a time per cache; a second caller waits, then sees the fresh stamp.
  exec 8>"$cache/.kafka-fetch.lock"
  flock 8
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    return 0
  fi

  started=$(date +%s)
  partial=$(mktemp -d "$cache/kafka-$version.partial.XXXXXX")
  log=$cache/kafka-$version.fetch.log
  trap 'rm -rf "$partial"' EXIT
  : >"$log"

  echo "fetch-jars: resolving Apache Kafka $version from Maven Central into $home"
  if ! "$mvn" -B -q -f "$pom" -P broker dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$PWD/$partial/libs" >>"$log" 2>&1; then
    missing=$(sed -nE -e 's/.*Could not (find|transfer) artifact ([^ ]+).*/\2/p' \
      -e 's/.* ([^ :]+(:[^ :]+){3,4}) was not found in .*/\1/p' "$log" | head -n 1)
    echo "fetch-jars: Maven could not fetch Apache Kafka $version (profile 'broker' for libs/)." >&2
    echo "fetch-jars: missing artifact: ${missing:-unknown, see the log}" >&2
    echo "fetch-jars: check network access to Maven Central (https://repo.maven.apache.org)," >&2
    echo "fetch-jars: or pin another release in $pom; full Maven output: $log" >&2
    exit 1
  fi
  mkdir -p "$partial/config"
  cp jvm/kafka/log4j2.xml "$partial/config/"
  echo "$version" >"$partial/RELEASE"
  echo "$key" >"$partial/.sr3-fetched"

  # Swap in the finished tree; a half-fetched cache never looks complete.
  rm -rf "$home.old"
  if [ -d "$home" ]; then mv "$home" "$home.old"; fi
  mv "$partial" "$home"
  rm -rf "$home.old"
  trap - EXIT

  jars=$(find "$home/libs" -name '*.jar' | wc -l)
  size=$(du -sm "$home/libs" | cut -f1)
  printf 'fetch-jars:   %-14s %3d jars %4d MB  %s\n' "libs/" "$jars" "$size" "kafka_2.13-$version.jar"
  echo "fetch-jars: Apache Kafka $version ready in $home ($(du -sm "$home" | cut -f1) MB, $(($(date +%s) - started)) s)"
}

fetch_spark_kafka() {
  pom=jvm/spark-kafka/pom.xml
  version=$(sed -n 's:.*<spark.kafka.version>\(.*\)</spark.kafka.version>.*:\1:p' "$pom")
  if [ -z "$version" ]; then
    echo "fetch-jars: no <spark.kafka.version> in $pom; restore the property" >&2
    exit 1
  fi
  cache=${SR3_CACHE_DIR:-.cache}
  home=$cache/spark-kafka-$version
  # keyed on the pom alone: editing another part of this script refetches nothing here
  key=$(sha256sum <"$pom" | cut -c1-16)
  stamp=$home/.sr3-fetched
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    return 0
  fi

  mvn=${MVN:-mvn}
  if ! command -v "$mvn" >/dev/null 2>&1; then
    echo "fetch-jars: '$mvn' not found; install Maven 3.8+ (apt-get install maven) or set MVN" >&2
    exit 1
  fi

  mkdir -p "$cache"
  exec 7>"$cache/.spark-kafka-fetch.lock"
  flock 7
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    return 0
  fi

  started=$(date +%s)
  partial=$(mktemp -d "$cache/spark-kafka-$version.partial.XXXXXX")
  log=$cache/spark-kafka-$version.fetch.log
  trap 'rm -rf "$partial"' EXIT
  : >"$log"

  echo "fetch-jars: resolving Spark's Kafka source $version from Maven Central into $home"
  if ! "$mvn" -B -q -f "$pom" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$PWD/$partial/jars" >>"$log" 2>&1; then
    missing=$(sed -nE -e 's/.*Could not (find|transfer) artifact ([^ ]+).*/\2/p' \
      -e 's/.* ([^ :]+(:[^ :]+){3,4}) was not found in .*/\1/p' "$log" | head -n 1)
    echo "fetch-jars: Maven could not fetch spark-sql-kafka-0-10 $version for jars/." >&2
    echo "fetch-jars: missing artifact: ${missing:-unknown, see the log}" >&2
    echo "fetch-jars: check network access to Maven Central (https://repo.maven.apache.org)," >&2
    echo "fetch-jars: or pin another release in $pom; full Maven output: $log" >&2
    exit 1
  fi
  echo "$version" >"$partial/RELEASE"
  echo "$key" >"$partial/.sr3-fetched"

  rm -rf "$home.old"
  if [ -d "$home" ]; then mv "$home" "$home.old"; fi
  mv "$partial" "$home"
  rm -rf "$home.old"
  trap - EXIT

  jars=$(find "$home/jars" -name '*.jar' -printf '%f ' | tr ' ' '\n' | sort | tr '\n' ' ')
  printf 'fetch-jars:   %-14s %s\n' "jars/" "$jars"
  echo "fetch-jars: Spark's Kafka source $version ready in $home ($(du -sm "$home" | cut -f1) MB, $(($(date +%s) - started)) s)"
}

# Usage: fetch-jars.sh [storm] [kafka] [spark-kafka]   (no argument: all three)
parts=("$@")
if [ ${#parts[@]} -eq 0 ]; then parts=(storm kafka spark-kafka); fi
for part in "${parts[@]}"; do
  case $part in
    storm) fetch_storm ;;
    kafka) fetch_kafka ;;
    spark-kafka) fetch_spark_kafka ;;
    *)
      echo "fetch-jars: unknown part '$part'; give storm, kafka or spark-kafka (or none: all)" >&2
      exit 2
      ;;
  esac
done
