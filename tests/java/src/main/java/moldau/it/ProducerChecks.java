package moldau.it;

import static moldau.it.Checks.check;
import static moldau.it.Checks.equal;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.InvalidRecordException;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidTimestampException;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Kafka's Java producer against Moldau: its defaults (idempotent, acks=all), every codec,
 * headers, batches at message.max.bytes, the split of a batch refused as MESSAGE_TOO_LARGE,
 * and records refused by name (KIP-467). Records are read back with Kafka's consumer.
 */
public final class ProducerChecks {
    private ProducerChecks() {}

    public static void main(String[] args) {
        Checks.run(ProducerChecks.class, args);
    }

    /** Codec topics the Python side reads back with confluent-kafka (tests/kafka/test_producer.py). */
    public static final List<String> CODECS = List.of("gzip", "snappy", "lz4", "zstd");

    public static final int CODEC_RECORDS = 500;

    /** The defaults: idempotent, acks=all, five requests in flight; every record once, in order. */
    public static void idempotentDefaults(String bootstrap) throws Exception {
        String topic = newTopic(bootstrap, "idempotent", 1, Map.of());
        int n = 5000;
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, new Properties())) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, 0, bytes("k" + i), bytes("v" + i))));
            }
            producer.flush();
            for (int i = 0; i < n; i++) {
                equal((long) i, sent.get(i).get().offset(), "offset of record " + i);
            }
        }
        List<ConsumerRecord<byte[], byte[]>> read = readAll(bootstrap, topic, 0, n);
        equal(n, read.size(), "records read back");
        for (int i = 0; i < n; i++) {
            equal("v" + i, string(read.get(i).value()), "value at offset " + i);
        }
    }

    /** Each codec's batches as Java writes them, read back by Java's consumer (and by librdkafka, in Python). */
    public static void everyCodec(String bootstrap) throws Exception {
        for (String codec : CODECS) {
            String topic = "codec-" + codec;
            create(bootstrap, topic, 1, Map.of());
            Properties props = new Properties();
            props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
            props.put(ProducerConfig.LINGER_MS_CONFIG, "20");
            try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, props)) {
                for (int i = 0; i < CODEC_RECORDS; i++) {
                    producer.send(codecRecord(topic, codec, i));
                }
                producer.flush();
            }
            List<ConsumerRecord<byte[], byte[]>> read = readAll(bootstrap, topic, 0, CODEC_RECORDS);
            equal(CODEC_RECORDS, read.size(), codec + ": records read back");
            for (int i = 0; i < CODEC_RECORDS; i++) {
                ProducerRecord<byte[], byte[]> want = codecRecord(topic, codec, i);
                ConsumerRecord<byte[], byte[]> got = read.get(i);
                check(Arrays.equals(want.key(), got.key()), codec + ": key at " + i);
                check(Arrays.equals(want.value(), got.value()), codec + ": value at " + i);
                check(Arrays.equals(want.headers().toArray(), got.headers().toArray()), codec + ": headers at " + i);
            }
        }
    }

    /**
     * Topics of their own codec (compression.type) and LogAppendTime: the broker recompresses
     * the producer's batches to each codec and stamps them; Java's consumer reads keys,
     * values and headers as sent, with the broker's time and its type.
     */
    public static void topicCodecAndLogAppendTime(String bootstrap) throws Exception {
        for (String codec : CODECS) {
            String topic = newTopic(bootstrap, "recompressed-" + codec, 1,
                    Map.of("compression.type", codec, "message.timestamp.type", "LogAppendTime"));
            Properties props = new Properties();
            props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec.equals("gzip") ? "lz4" : "gzip");
            props.put(ProducerConfig.LINGER_MS_CONFIG, "20");
            int n = 200;
            long before = System.currentTimeMillis();
            long appended;
            try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, props)) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    sent.add(producer.send(codecRecord(topic, codec, i)));
                }
                producer.flush();
                appended = sent.get(n - 1).get().timestamp();
            }
            long after = System.currentTimeMillis();
            check(before - 1000 <= appended && appended <= after + 1000,
                    codec + ": the broker's append time answered: " + appended);
            List<ConsumerRecord<byte[], byte[]>> read = readAll(bootstrap, topic, 0, n);
            equal(n, read.size(), codec + ": records read back");
            for (int i = 0; i < n; i++) {
                ProducerRecord<byte[], byte[]> want = codecRecord(topic, codec, i);
                ConsumerRecord<byte[], byte[]> got = read.get(i);
                check(Arrays.equals(want.value(), got.value()), codec + ": value at " + i);
                check(Arrays.equals(want.headers().toArray(), got.headers().toArray()), codec + ": headers at " + i);
                equal(org.apache.kafka.common.record.TimestampType.LOG_APPEND_TIME, got.timestampType(),
                        codec + ": timestamp type");
                check(before - 1000 <= got.timestamp() && got.timestamp() <= after + 1000,
                        codec + ": broker time at " + i);
            }
        }
    }

    static ProducerRecord<byte[], byte[]> codecRecord(String topic, String codec, int i) {
        // Compressible and not: a repeated text and the record's own number.
        String value = codec + "-" + i + "-" + "abcdefghij".repeat(i % 50);
        List<Header> headers = List.of(new RecordHeader("i", bytes(Integer.toString(i))));
        return new ProducerRecord<>(topic, 0, bytes("k" + i), bytes(value), headers);
    }

    /** acks=0 and acks=1 (idempotence off, as it needs acks=all): every record lands, in order. */
    public static void acksZeroAndOne(String bootstrap) throws Exception {
        for (String acks : List.of("0", "1")) {
            String topic = newTopic(bootstrap, "acks" + acks, 1, Map.of());
            Properties props = new Properties();
            props.put(ProducerConfig.ACKS_CONFIG, acks);
            props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
            int n = 1000;
            try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, props)) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    sent.add(producer.send(new ProducerRecord<>(topic, 0, null, bytes("v" + i))));
                }
                producer.flush();
                // acks=0 learns no offset (-1); acks=1 the leader's.
                long last = sent.get(n - 1).get().offset();
                equal(acks.equals("0") ? -1L : (long) n - 1, last, "acks=" + acks + ": last offset answered");
            }
            List<ConsumerRecord<byte[], byte[]>> read = readAll(bootstrap, topic, 0, n);
            equal(n, read.size(), "acks=" + acks + ": records read back");
            for (int i = 0; i < n; i++) {
                equal("v" + i, string(read.get(i).value()), "acks=" + acks + ": value at " + i);
            }
        }
    }

    /** A record's own timestamp (CreateTime) comes back as sent, however old or new. */
    public static void createTimeKept(String bootstrap) throws Exception {
        String topic = newTopic(bootstrap, "createtime", 1, Map.of());
        long now = System.currentTimeMillis();
        long[] stamps = {now, 0L, 1L, now - 365L * 24 * 3600_000, now + 3600_000, now - 5};
        Properties props = new Properties();
        props.put(ProducerConfig.LINGER_MS_CONFIG, "200");
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, props)) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (long ts : stamps) {
                sent.add(producer.send(new ProducerRecord<>(topic, 0, ts, bytes("k"), bytes(Long.toString(ts)))));
            }
            producer.flush();
            for (int i = 0; i < stamps.length; i++) {
                equal(stamps[i], sent.get(i).get().timestamp(), "timestamp answered for record " + i);
            }
        }
        List<ConsumerRecord<byte[], byte[]>> read = readAll(bootstrap, topic, 0, stamps.length);
        for (int i = 0; i < stamps.length; i++) {
            equal(stamps[i], read.get(i).timestamp(), "timestamp read back at " + i);
            equal(org.apache.kafka.common.record.TimestampType.CREATE_TIME, read.get(i).timestampType(), "type at " + i);
        }
    }

    /** Headers come back as sent: order, repeated keys, a null value, binary bytes. */
    public static void headers(String bootstrap) throws Exception {
        String topic = newTopic(bootstrap, "headers", 1, Map.of());
        List<Header> sent = List.of(
                new RecordHeader("trace", bytes("abc")),
                new RecordHeader("dup", bytes("1")),
                new RecordHeader("dup", bytes("2")),
                new RecordHeader("none", null),
                new RecordHeader("binary", new byte[] {0, -1, 127, -128}),
                new RecordHeader("ünïcødé", bytes("")));
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, new Properties())) {
            producer.send(new ProducerRecord<>(topic, 0, (byte[]) null, bytes("v"), sent)).get();
            producer.send(new ProducerRecord<>(topic, 0, null, bytes("no headers"))).get();
        }
        List<ConsumerRecord<byte[], byte[]>> read = readAll(bootstrap, topic, 0, 2);
        Header[] got = read.get(0).headers().toArray();
        equal(sent.size(), got.length, "headers read back");
        for (int i = 0; i < got.length; i++) {
            equal(sent.get(i).key(), got[i].key(), "header key " + i);
            check(Arrays.equals(sent.get(i).value(), got[i].value()), "header value " + i);
        }
        equal(0, read.get(1).headers().toArray().length, "headers of a record sent without");
    }

    /**
     * A batch of message.max.bytes (1048588 by default: a 1048516-byte value and no key make
     * one such batch) lands; one byte more is MESSAGE_TOO_LARGE, which a lone record fails
     * with as RecordTooLargeException.
     */
    public static void nearMessageMaxBytes(String bootstrap) throws Exception {
        String topic = newTopic(bootstrap, "large", 1, Map.of());
        Properties props = new Properties();
        props.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, Integer.toString(2 * 1024 * 1024));
        int fits = 1048516;
        byte[] value = new byte[fits + 1];
        new Random(7).nextBytes(value);
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, props)) {
            RecordMetadata ok = producer.send(
                    new ProducerRecord<>(topic, 0, null, Arrays.copyOf(value, fits))).get();
            equal(0L, ok.offset(), "offset of the largest record that fits");
            Throwable refused = failure(producer.send(new ProducerRecord<>(topic, 0, null, value)));
            check(refused instanceof RecordTooLargeException, "one byte more: " + refused);
            // The partition goes on.
            equal(1L, producer.send(new ProducerRecord<>(topic, 0, null, bytes("after"))).get().offset(),
                    "offset after the refusal");
        }
        List<ConsumerRecord<byte[], byte[]>> read = readAll(bootstrap, topic, 0, 2);
        equal(fits, read.get(0).value().length, "size of the large record read back");
        equal("after", string(read.get(1).value()), "the record after");
    }

    /**
     * The producer sizes a compressed batch by its compression ratio so far; when data stops
     * compressing, the batch outgrows the topic's max.message.bytes. The broker answers
     * MESSAGE_TOO_LARGE, the producer splits the batch and sends it again: every record lands,
     * once, in order.
     */
    public static void splitOnMessageTooLarge(String bootstrap) throws Exception {
        String topic = newTopic(bootstrap, "split", 1, Map.of("max.message.bytes", "20000"));
        Properties props = new Properties();
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "gzip");
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, "16384");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "100");
        int trained = 150;
        int random = 600;
        Random rnd = new Random(11);
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, props)) {
            // One highly compressible record a batch (flush sends it without lingering):
            // the estimated ratio falls 0.005 a batch.
            for (int i = 0; i < trained; i++) {
                Future<RecordMetadata> f = producer.send(new ProducerRecord<>(topic, 0, null, new byte[1000]));
                producer.flush();
                f.get();
            }
            check(splits(producer) == 0, "no split while training");
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < random; i++) {
                byte[] value = new byte[100];
                rnd.nextBytes(value);
                sent.add(producer.send(new ProducerRecord<>(topic, 0, bytes("r" + i), value)));
            }
            producer.flush();
            for (int i = 0; i < random; i++) {
                equal((long) trained + i, sent.get(i).get().offset(), "offset of random record " + i);
            }
            check(splits(producer) > 0, "the producer split a batch (batch-split-total " + splits(producer) + ")");
        }
        List<ConsumerRecord<byte[], byte[]>> read = readAll(bootstrap, topic, trained, random);
        equal(random, read.size(), "random records read back");
        for (int i = 0; i < random; i++) {
            equal("r" + i, string(read.get(i).key()), "key at offset " + (trained + i));
        }
    }

    static double splits(KafkaProducer<?, ?> producer) {
        for (Map.Entry<MetricName, ? extends Metric> m : producer.metrics().entrySet()) {
            if (m.getKey().name().equals("batch-split-total") && m.getKey().group().equals("producer-metrics")) {
                return (Double) m.getValue().metricValue();
            }
        }
        throw new AssertionError("no batch-split-total metric");
    }

    /**
     * KIP-467: a keyless record on a compacted topic fails with InvalidRecordException naming
     * it; the keyed records of its batch fail as part of a batch with an invalid record. The
     * producer goes on.
     */
    public static void keylessRecordToCompactedTopic(String bootstrap) throws Exception {
        String topic = newTopic(bootstrap, "compacted", 1, Map.of("cleanup.policy", "compact"));
        Properties props = new Properties();
        props.put(ProducerConfig.LINGER_MS_CONFIG, "500");
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, props)) {
            byte[][] keys = {bytes("a"), null, bytes("b"), null};
            List<Future<RecordMetadata>> batch = new ArrayList<>();
            for (byte[] key : keys) {
                batch.add(producer.send(new ProducerRecord<>(topic, 0, key, bytes("v"))));
            }
            producer.flush();
            for (int i = 0; i < keys.length; i++) {
                Throwable e = failure(batch.get(i));
                if (keys[i] == null) {
                    check(e instanceof InvalidRecordException, "keyless record " + i + ": " + e);
                    check(e.getMessage().contains("key"), "the reason names the key: " + e.getMessage());
                } else {
                    check(e instanceof KafkaException && !(e instanceof InvalidRecordException),
                            "keyed record " + i + " fails with its batch, not as invalid: " + e);
                }
            }
            Throwable alone = failure(producer.send(new ProducerRecord<>(topic, 0, null, bytes("v"))));
            check(alone instanceof InvalidRecordException, "a lone keyless record: " + alone);
            equal(0L, producer.send(new ProducerRecord<>(topic, 0, bytes("c"), bytes("kept"))).get().offset(),
                    "the next keyed record's offset");
        }
        List<ConsumerRecord<byte[], byte[]>> read = readAll(bootstrap, topic, 0, 1);
        equal("c", string(read.get(0).key()), "the only record");
    }

    /** A record older than message.timestamp.before.max.ms fails with InvalidTimestampException. */
    public static void timestampOutOfRange(String bootstrap) throws Exception {
        String topic = newTopic(bootstrap, "timestamps", 1, Map.of("message.timestamp.before.max.ms", "3600000"));
        Properties props = new Properties();
        props.put(ProducerConfig.LINGER_MS_CONFIG, "500");
        long now = System.currentTimeMillis();
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, props)) {
            Future<RecordMetadata> fresh = producer.send(new ProducerRecord<>(topic, 0, now, bytes("k"), bytes("v")));
            Future<RecordMetadata> old = producer.send(
                    new ProducerRecord<>(topic, 0, now - 2 * 3600_000L, bytes("k"), bytes("v")));
            producer.flush();
            Throwable e = failure(old);
            check(e instanceof InvalidTimestampException, "the old record: " + e);
            Throwable other = failure(fresh);
            check(!(other instanceof InvalidTimestampException), "the fresh record fails with its batch: " + other);
            equal(0L, producer.send(new ProducerRecord<>(topic, 0, now, bytes("k"), bytes("v"))).get().offset(),
                    "a fresh record alone");
        }
    }

    // -- helpers --------------------------------------------------------------------------

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String string(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    static Throwable failure(Future<RecordMetadata> f) throws InterruptedException {
        try {
            RecordMetadata m = f.get();
            throw new AssertionError("expected a failure, got offset " + m.offset());
        } catch (ExecutionException e) {
            return e.getCause();
        }
    }

    static KafkaProducer<byte[], byte[]> producer(String bootstrap, Properties extra) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        p.putAll(extra);
        return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
    }

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        return Admin.create(p);
    }

    /** A topic of its own (replicated on each broker of a cluster, up to three). */
    static String newTopic(String bootstrap, String prefix, int partitions, Map<String, String> configs)
            throws Exception {
        String topic = prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
        create(bootstrap, topic, partitions, configs);
        return topic;
    }

    static void create(String bootstrap, String topic, int partitions, Map<String, String> configs)
            throws Exception {
        try (Admin admin = admin(bootstrap)) {
            int brokers = admin.describeCluster().nodes().get().size();
            short rf = (short) Math.min(3, brokers);
            admin.createTopics(List.of(new NewTopic(topic, partitions, rf).configs(configs))).all().get();
        }
    }

    static List<ConsumerRecord<byte[], byte[]>> readAll(String bootstrap, String topic, long from, int count) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seek(tp, from);
            long deadline = System.currentTimeMillis() + 30_000;
            while (out.size() < count && System.currentTimeMillis() < deadline) {
                consumer.poll(Duration.ofMillis(200)).forEach(out::add);
            }
        }
        return out;
    }
}
