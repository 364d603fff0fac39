#!/usr/bin/env bash
# Tries a running broker with KafkaJS (Node.js): admin, producer, consumer group.
# Runs tests/js/try.js (the suite runs it too, tests/integration/test_clients.py) with
# the KafkaJS that tests/js/package-lock.json pins, installed by `npm ci` if missing
# (Node.js from Debian's `nodejs` and `npm` if missing).
#
#   scripts/try-kafkajs.sh 127.0.0.1:9092
set -euo pipefail
bootstrap=${1:?usage: $0 BOOTSTRAP}
js="$(cd "$(dirname "$0")/../tests/js" && pwd)"
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
    apt-get install -y -q nodejs npm > /dev/null
fi
[ -d "$js/node_modules/kafkajs" ] || (cd "$js" && npm ci --no-audit --no-fund --silent)
echo -n "KafkaJS $(node -p "require('$js/node_modules/kafkajs/package.json').version"): "
node "$js/try.js" "$bootstrap" "kafkajs-$(date +%s)"
