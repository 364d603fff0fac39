// KafkaJS over one secured listener, for tests/integration/test_security_clients.py:
//
//   node security.js SPEC_JSON
//
// SPEC: { broker, ca (a PEM path, or null for no TLS), cases: [{ name, sasl (KafkaJS's
// sasl option, or null), topic, group }], wrong: a sasl option with a wrong password,
// or null, untouched: a topic }. For each case, as that login: admin createTopics and
// fetchTopicMetadata, 5 records produced with acks=all, all 5 consumed in consumer
// group `group`, its committed offset read back; prints one JSON line per case. Then
// the wrong login tries to produce to `untouched` and prints what refused it. One process for every case of a
// listener: Node's start-up is paid once. Exits 1 on any unexpected error.
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')
const spec = JSON.parse(process.argv[2])
setTimeout(() => { console.error('timed out after 80 s'); process.exit(1) }, 80000).unref()

function client(sasl) {
  return new Kafka({
    clientId: 'kjs-security',
    brokers: [spec.broker],
    ssl: spec.ca ? { ca: [fs.readFileSync(spec.ca, 'utf-8')] } : false,
    sasl: sasl || undefined,
    logLevel: logLevel.NOTHING,
    connectionTimeout: 5000,
    retry: { retries: 2, initialRetryTime: 100 },
  })
}

async function runCase(c) {
  const kafka = client(c.sasl)
  const admin = kafka.admin(); await admin.connect()
  await admin.createTopics({ topics: [{ topic: c.topic, numPartitions: 1 }], waitForLeaders: true })
  const { topics } = await admin.fetchTopicMetadata({ topics: [c.topic] })
  const producer = kafka.producer(); await producer.connect()
  const values = Array.from({ length: 5 }, (_, i) => `${c.name}-${i}`)
  await producer.send({ topic: c.topic, acks: -1, messages: values.map((value) => ({ value })) })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: c.group, sessionTimeout: 6000, heartbeatInterval: 500 })
  await consumer.connect()
  await consumer.subscribe({ topic: c.topic, fromBeginning: true })
  const got = []
  await new Promise((resolve) => {
    consumer.run({
      eachMessage: async ({ message }) => {
        got.push(message.value.toString())
        if (got.length === values.length) resolve()
      },
    })
  })
  await consumer.disconnect() // commits what was consumed
  const [offsets] = await admin.fetchOffsets({ groupId: c.group, topics: [c.topic] })
  await admin.disconnect()
  return {
    name: c.name,
    partitions: topics[0].partitions.length,
    consumed: got,
    committed: offsets.partitions.map((p) => Number(p.offset)),
  }
}

async function wrongLogin(sasl) {
  const producer = client(sasl).producer()
  try {
    await producer.connect()
    await producer.send({ topic: spec.untouched, messages: [{ value: 'not served' }] })
  } catch (e) {
    return { refused: e.name, message: e.message }
  } finally {
    await producer.disconnect()
  }
  return { refused: null }
}

async function main() {
  for (const c of spec.cases) console.log(JSON.stringify(await runCase(c)))
  if (spec.wrong) console.log(JSON.stringify(await wrongLogin(spec.wrong)))
}
main().catch((e) => { console.error(e); process.exit(1) })
