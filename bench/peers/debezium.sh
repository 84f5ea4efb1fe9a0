#!/usr/bin/env bash
# debezium.sh — the classpath of the Debezium peer (bench/peers/run.sh):
# the embedded engine, the PostgreSQL connector (its outbox EventRouter
# SMT comes with debezium-core) and slf4j-simple, resolved from Maven
# Central with a small POM and cached between runs, as tests/tools/kafka.sh
# does for the broker.
#
#   bash bench/peers/debezium.sh     # prints the lib dir (every jar)
#
# Version: $PEERS_DEBEZIUM_VERSION (3.6.1.Final: the newest whose embedded
# engine and connector are both served here). Cache:
# $PEERS_DEBEZIUM_CACHE/<version>/lib (default /var/cache/outbox-relay/
# debezium, or ~/.cache/outbox-relay/debezium when that is not writable);
# a stamp is written only after a complete copy, a lock serialises callers.
# Java 17+ and mvn must be there (tests/tools/kafka.sh installs them).
#
# Exit status: 0 and the lib dir on stdout; 3 when Maven Central cannot be
# reached; 1 on any other failure.
set -euo pipefail

version=${PEERS_DEBEZIUM_VERSION:-3.6.1.Final}
slf4j=${PEERS_SLF4J_VERSION:-2.0.17}
fetch_timeout=${PEERS_DEBEZIUM_FETCH_TIMEOUT:-900}
want="debezium:$version slf4j:$slf4j"

die() { echo "debezium.sh: $*" >&2; exit 1; }

cache=${PEERS_DEBEZIUM_CACHE:-/var/cache/outbox-relay/debezium}
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay/debezium
    mkdir -p "$cache"
fi
dir=$cache/$version
lib=$dir/lib
stamp=$dir/complete

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$lib"
    exit 0
fi
command -v java >/dev/null && command -v mvn >/dev/null ||
    die "a JDK and mvn are needed (bash tests/tools/kafka.sh installs them)"

mkdir -p "$dir"
exec 9>"$dir/lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$lib"
    exit 0
fi

rm -rf "$lib" "$dir/pom.xml" "$dir/mvn.log"
cat >"$dir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>outbox-relay.bench</groupId>
  <artifactId>debezium-peer-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>io.debezium</groupId>
      <artifactId>debezium-embedded</artifactId>
      <version>$version</version>
    </dependency>
    <dependency>
      <groupId>io.debezium</groupId>
      <artifactId>debezium-connector-postgres</artifactId>
      <version>$version</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-api</artifactId>
      <version>$slf4j</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>$slf4j</version>
    </dependency>
  </dependencies>
</project>
POM

echo "debezium.sh: fetching Debezium $version from Maven Central into $lib" >&2
set +e
timeout "$fetch_timeout" mvn -B -q -Dstyle.color=never -f "$dir/pom.xml" \
    -Dmaven.wagon.http.retryHandler.count=2 \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$lib" \
    >"$dir/mvn.log" 2>&1
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
    if [ "$rc" -eq 124 ] || grep -qiE "Could not transfer|Unknown ?Host|Connection refused|Network is unreachable|timed out|No route to host" "$dir/mvn.log"; then
        echo "debezium.sh: Maven Central cannot be reached; mvn's log: $dir/mvn.log" >&2
        exit 3
    fi
    tail -20 "$dir/mvn.log" >&2
    die "mvn could not gather Debezium $version (log: $dir/mvn.log)"
fi
ls "$lib"/debezium-embedded-"$version".jar "$lib"/debezium-connector-postgres-"$version".jar \
    "$lib"/kafka-clients-*.jar >/dev/null || die "the copy in $lib lacks Debezium's or Kafka's client jars"
echo "$want" >"$stamp"
echo "$lib"
