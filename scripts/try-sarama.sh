#!/usr/bin/env bash
# Tries a running broker with Debian's sarama 1.22 (Go) at several Kafka protocol
# versions: the client of the ZooKeeper era that issue 11 names. Installs Go and
# sarama's sources from Debian (apt-get) if missing, builds scripts/sarama offline
# (GOPATH mode), and runs it once per version, each on a topic of its own.
#
#   scripts/try-sarama.sh 127.0.0.1:9092                    # the versions below
#   scripts/try-sarama.sh 127.0.0.1:9092 default 2.2.0      # chosen versions
set -euo pipefail
bootstrap=${1:?usage: $0 BOOTSTRAP [VERSION...]}
shift
versions=("${@:-default}")
if [ $# -eq 0 ]; then
    versions=(default 0.9.0.0 0.10.0.0 0.10.2.0 1.1.0 2.2.0)
fi
sources=/usr/share/gocode/src/github.com/Shopify/sarama
if ! command -v go > /dev/null || [ ! -d "$sources" ]; then
    apt-get install -y -q golang-go golang-github-shopify-sarama-dev > /dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/trysarama"
cp "$(dirname "$0")/sarama/main.go" "$work/src/trysarama/"
GOPATH="$work:/usr/share/gocode" GO111MODULE=off GOPROXY=off GOCACHE="$work/cache" \
    go build -o "$work/trysarama" trysarama 2> "$work/build.log" \
    || { cat "$work/build.log"; exit 1; }
run=$(date +%s)
failed=0
for version in "${versions[@]}"; do
    topic="sarama-$run-${version//./-}"
    if "$work/trysarama" "$bootstrap" "$topic" "$version" | tr '\n' ' '; then
        echo "-> ok"
    else
        echo "-> FAILED"
        failed=1
    fi
done
exit $failed
