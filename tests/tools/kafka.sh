#!/usr/bin/env bash
# kafka.sh — the classpath of a real Apache Kafka broker for the tests and
# the benchmark, resolved from Maven Central and cached between runs.
#
#   bash tests/tools/kafka.sh            # prints the lib dir (every jar of the broker)
#
# What it resolves: org.apache.kafka:kafka_2.13 ($OUTBOX_KAFKA_VERSION) and
# a log4j2 binding (log4j-slf4j2-impl + log4j-core, $OUTBOX_LOG4J_VERSION):
# Kafka's POM leaves the binding out, and without one the broker logs
# nothing, not even the "Kafka Server started" line the tests wait for.
# 4.0.0 is refused: it dropped JoinGroup v0-1, which librdkafka 2.0.2 (the
# Debian 12 library the relayer is built with) still uses for consumer groups.
#
# The cache is $OUTBOX_KAFKA_CACHE/<version>/lib (default
# /var/cache/outbox-relay/kafka, or ~/.cache/outbox-relay/kafka when that
# is not writable). A stamp file is written only after a complete copy, so
# an interrupted fetch is redone, never half used; a lock makes concurrent
# callers (pytest-xdist workers) wait for one fetch.
#
# Java (17 or later) and Maven are installed with apt-get when missing and
# running as root (OUTBOX_SKIP_APT=1 skips that).
#
# Exit status: 0 and the lib dir on stdout; 3 when Maven Central cannot be
# reached (the caller skips its tests with the message from stderr);
# 1 on any other failure (a version that does not exist, no Java).
set -euo pipefail

version=${OUTBOX_KAFKA_VERSION:-4.4.0}
log4j=${OUTBOX_LOG4J_VERSION:-2.26.1}
# Kafka's POM asks for slf4j-api 1.7, which cannot see log4j-slf4j2-impl (an
# slf4j 2 provider): the broker would log nothing. Declared here, 2.x wins.
slf4j=${OUTBOX_SLF4J_VERSION:-2.0.17}
# Fetching over a dead network must end: Maven's own timeouts are minutes.
fetch_timeout=${OUTBOX_KAFKA_FETCH_TIMEOUT:-600}

die() { echo "kafka.sh: $*" >&2; exit 1; }

[ "$version" != "4.0.0" ] ||
    die "Kafka 4.0.0 dropped JoinGroup v0-1, which librdkafka 2.0.2's consumer groups need; use 4.0.1 or later"

cache=${OUTBOX_KAFKA_CACHE:-/var/cache/outbox-relay/kafka}
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay/kafka
    mkdir -p "$cache"
fi
dir=$cache/$version
lib=$dir/lib
stamp=$dir/complete

# Warm cache: nothing to do, not even Java's start-up.
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "kafka_2.13:$version log4j:$log4j slf4j:$slf4j" ]; then
    echo "$lib"
    exit 0
fi

java_major() {
    java -XshowSettings:properties -version 2>&1 |
        sed -n 's/^ *java.specification.version = \([0-9]*\).*/\1/p'
}
# A JDK, not only a JRE: the tests run tests/tools/KafkaAcl.java with
# Java's source launcher, which needs the jdk.compiler module.
has_compiler() {
    local modules
    modules=$(java --list-modules 2>/dev/null) || return 1
    grep -q '^jdk\.compiler@' <<<"$modules"
}
if ! command -v java >/dev/null || ! command -v mvn >/dev/null ||
        [ "$(java_major || echo 0)" -lt 17 ] || ! has_compiler; then
    if [ -z "${OUTBOX_SKIP_APT:-}" ] && [ "$(id -u)" -eq 0 ]; then
        echo "kafka.sh: installing default-jdk-headless maven" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >&2 || true
        apt-get install -y -q --no-install-recommends default-jdk-headless maven >&2
    fi
    command -v java >/dev/null && command -v mvn >/dev/null && has_compiler ||
        die "a JDK and mvn are needed: apt-get install default-jdk-headless maven"
    [ "$(java_major || echo 0)" -ge 17 ] || die "Kafka $version needs Java 17 or later"
fi

mkdir -p "$dir"
exec 9>"$dir/lock"
flock 9
# Another caller may have finished the fetch while this one waited.
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "kafka_2.13:$version log4j:$log4j slf4j:$slf4j" ]; then
    echo "$lib"
    exit 0
fi

rm -rf "$lib" "$dir/pom.xml" "$dir/mvn.log"
cat >"$dir/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>outbox-relay.tests</groupId>
  <artifactId>kafka-broker-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$version</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-api</artifactId>
      <version>$slf4j</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId>
      <version>$log4j</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$log4j</version>
    </dependency>
  </dependencies>
</project>
EOF

echo "kafka.sh: fetching kafka_2.13 $version and log4j $log4j from Maven Central into $lib" >&2
set +e
timeout "$fetch_timeout" mvn -B -q -Dstyle.color=never -f "$dir/pom.xml" \
    -Dmaven.wagon.http.retryHandler.count=2 \
    -Dmaven.wagon.httpconnectionManager.ttlSeconds=30 \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$lib" \
    >"$dir/mvn.log" 2>&1
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
    # Network failures (no route, DNS, refused, timeouts, our own deadline)
    # are "Maven Central unreachable"; anything else is a real error.
    network="Could not transfer|Unknown ?Host|UnknownHostException|Connection refused|Network is unreachable|Connect(ion)? timed out|Read timed out|No route to host|Temporary failure in name resolution|PKIX path"
    if [ "$rc" -eq 124 ] || grep -qiE "$network" "$dir/mvn.log"; then
        why=$(grep -oiE "(Unknown ?Host|Connection refused|Network is unreachable|Connect(ion)? timed out|Read timed out|No route to host|PKIX path)[^[]*" \
                  "$dir/mvn.log" | head -1 | sed 's/ -> *$//' || true)
        [ -n "$why" ] || why="could not transfer from it"
        [ "$rc" -ne 124 ] || why="no answer within ${fetch_timeout} s"
        echo "kafka.sh: Maven Central cannot be reached (${why# }), so there is no Kafka" \
             "$version broker to test against; mvn's log: $dir/mvn.log" >&2
        exit 3
    fi
    tail -20 "$dir/mvn.log" >&2
    die "mvn could not gather kafka_2.13 $version (log: $dir/mvn.log)"
fi
ls "$lib"/kafka_2.13-"$version".jar "$lib"/log4j-core-*.jar "$lib"/log4j-slf4j2-impl-*.jar \
    "$lib/slf4j-api-$slf4j.jar" >/dev/null ||
    die "the copy in $lib lacks the broker or log4j jars"
echo "kafka_2.13:$version log4j:$log4j slf4j:$slf4j" >"$stamp"
echo "$lib"
