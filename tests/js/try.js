// Tries a broker with KafkaJS: a topic of two partitions created, 10 records produced
// with acks=all and headers, 2 more gzip-compressed, all 12 consumed in a consumer
// group, its committed offsets read back, the topic deleted. Exits non-zero on failure.
//
// Usage: node try.js BOOTSTRAP TOPIC (scripts/try-kafkajs.sh; tests/integration/test_clients.py)
const { Kafka, logLevel } = require('kafkajs')
const broker = process.argv[2]
const topic = process.argv[3]
const kafka = new Kafka({ clientId: 'kjs', brokers: [broker], logLevel: logLevel.NOTHING })
setTimeout(() => { console.error('timed out after 60 s'); process.exit(1) }, 60000).unref()
async function main() {
  const admin = kafka.admin(); await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: 2 }] })
  const producer = kafka.producer(); await producer.connect()
  for (let i = 0; i < 10; i++) await producer.send({ topic, acks: -1, messages: [{ key: 'k' + i, value: 'v' + i, headers: { h: 'x' } }] })
  await producer.send({ topic, compression: 1, messages: [{ value: 'gz1' }, { value: 'gz2' }] })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: 'g-' + topic }); await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  let n = 0
  await new Promise((resolve) => {
    consumer.run({ eachMessage: async ({ message }) => { n++; if (n === 12) resolve() } })
  })
  await consumer.disconnect()
  const offsets = await admin.fetchOffsets({ groupId: 'g-' + topic, topics: [topic] })
  const committed = offsets[0].partitions.reduce((sum, p) => sum + Number(p.offset), 0)
  console.log('consumed', n, 'committed offsets sum', committed)
  if (committed !== 12) throw new Error('committed ' + committed + ', not 12')
  await admin.deleteTopics({ topics: [topic] })
  await admin.disconnect()
}
main().catch((e) => { console.error(e); process.exit(1) })
