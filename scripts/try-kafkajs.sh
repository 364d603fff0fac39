#!/usr/bin/env bash
# Tries a running broker with KafkaJS (Node.js): admin, producer, consumer group.
# Installs KafkaJS from npm into a temporary directory (Node.js from Debian's
# `nodejs` if missing) and runs scripts/kafkajs/try.js.
#
#   scripts/try-kafkajs.sh 127.0.0.1:9092
set -euo pipefail
bootstrap=${1:?usage: $0 BOOTSTRAP}
version=2.2.4
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
    apt-get install -y -q nodejs npm > /dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$(dirname "$0")/kafkajs/try.js" "$work/"
(cd "$work" && npm install --silent --no-audit --no-fund "kafkajs@$version" > /dev/null)
echo -n "KafkaJS $version: "
node "$work/try.js" "$bootstrap" "kafkajs-$(date +%s)"
