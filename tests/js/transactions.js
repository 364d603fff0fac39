// KafkaJS's transactions against a broker, for tests/integration/test_transactions_clients.py:
//
//   node transactions.js BOOTSTRAP TOPIC INPUT OUTPUT GROUP
//
// 1. On TOPIC (two partitions), with transactional.id "kjs-" + TOPIC: a committed
//    transaction of c0..c9, an aborted one of a0..a9, a committed one of c10..c19.
// 2. Consume-transform-produce: reads every record of INPUT (one partition) in consumer
//    group GROUP without committing, then writes each value upper-cased to OUTPUT in
//    transactions that also commit the group's offsets (sendOffsets): the first half
//    committed, the second half aborted (so GROUP's offset stays at the half), then the
//    second half again, committed.
// Prints "DONE <records read from INPUT>" and exits 0; any error exits 1 with it.
const { Kafka, logLevel } = require('kafkajs')
const [broker, topic, input, output, group] = process.argv.slice(2)
if (!group) { console.error('usage: node transactions.js BOOTSTRAP TOPIC INPUT OUTPUT GROUP'); process.exit(2) }
const kafka = new Kafka({ clientId: 'kjs-txn', brokers: [broker], logLevel: logLevel.ERROR })
setTimeout(() => { console.error('timed out after 60 s'); process.exit(1) }, 60000).unref()

// KafkaJS requires one request in flight for a transactional (idempotent) producer.
function transactionalProducer(id) {
  return kafka.producer({ transactionalId: id, idempotent: true, maxInFlightRequests: 1 })
}

async function inTransaction(producer, messages, { abort = false, offsets = null } = {}) {
  const txn = await producer.transaction()
  for (const m of messages) await txn.send({ topic: m.topic, acks: -1, messages: [m.message] })
  if (offsets) await txn.sendOffsets({ consumerGroupId: group, topics: [offsets] })
  if (abort) await txn.abort()
  else await txn.commit()
}

async function commitAndAbort() {
  const producer = transactionalProducer('kjs-' + topic)
  await producer.connect()
  const batch = (prefix, from) => Array.from({ length: 10 }, (_, i) => ({
    topic, message: { partition: i % 2, key: 'k' + (from + i), value: prefix + (from + i) },
  }))
  await inTransaction(producer, batch('c', 0))
  await inTransaction(producer, batch('a', 0), { abort: true })
  await inTransaction(producer, batch('c', 10))
  await producer.disconnect()
}

async function readAll() {
  const consumer = kafka.consumer({ groupId: group, readUncommitted: false })
  await consumer.connect()
  await consumer.subscribe({ topic: input, fromBeginning: true })
  const admin = kafka.admin(); await admin.connect()
  const [end] = await admin.fetchTopicOffsets(input)
  await admin.disconnect()
  const want = Number(end.high)
  const got = []
  await new Promise((resolve) => {
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ message }) => {
        got.push({ offset: Number(message.offset), value: message.value.toString() })
        if (got.length === want) resolve()
      },
    })
  })
  return { consumer, got }
}

async function consumeTransformProduce() {
  const { consumer, got } = await readAll()
  const producer = transactionalProducer('kjs-ctp-' + input)
  await producer.connect()
  const transform = (records) => records.map((r) => ({ topic: output, message: { value: r.value.toUpperCase() } }))
  const upTo = (records) => ({ topic: input, partitions: [{ partition: 0, offset: String(records[records.length - 1].offset + 1) }] })
  const half = got.slice(0, got.length / 2)
  const rest = got.slice(got.length / 2)
  await inTransaction(producer, transform(half), { offsets: upTo(half) })
  await inTransaction(producer, transform(rest), { offsets: upTo(rest), abort: true })
  await inTransaction(producer, transform(rest), { offsets: upTo(rest) })
  await producer.disconnect()
  await consumer.disconnect()
  return got.length
}

async function main() {
  await commitAndAbort()
  const n = await consumeTransformProduce()
  console.log('DONE ' + n)
}
main().catch((e) => { console.error(e); process.exit(1) })
