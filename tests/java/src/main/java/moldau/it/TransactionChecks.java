package moldau.it;

import static moldau.it.Checks.check;
import static moldau.it.Checks.equal;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka's transactional producer (KIP-98, KIP-447) and read_committed consumer against
 * Moldau: commit and abort as each isolation level reads them, offsets committed inside a
 * transaction with the consumer's group metadata, zombie fencing, the coordinator aborting
 * a transaction that outlived transaction.timeout.ms, and a read_committed consumer held at
 * the last stable offset (LSO) of an open transaction.
 *
 * <p>Offsets are checked exactly where Kafka's are known: each transaction ends with one
 * control record (its COMMIT or ABORT marker) in every partition it wrote to.
 */
public final class TransactionChecks {
    private TransactionChecks() {}

    public static void main(String[] args) {
        Checks.run(TransactionChecks.class, args);
    }

    static final String COMMITTED = "read_committed";
    static final String UNCOMMITTED = "read_uncommitted";

    static String topic(String bootstrap, int partitions) throws Exception {
        String topic = AdminChecks.unique("txn");
        try (Admin admin = AdminChecks.admin(bootstrap)) {
            AdminChecks.createTopic(admin, topic, partitions, AdminChecks.rf(admin));
        }
        return topic;
    }

    static KafkaProducer<String, String> transactional(String bootstrap, String id, Properties extra) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    static KafkaProducer<String, String> transactional(String bootstrap, String id) {
        return transactional(bootstrap, id, new Properties());
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String group, String isolation) {
        Properties p = ConsumerChecks.props(bootstrap, group);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        return new KafkaConsumer<>(p);
    }

    static List<TopicPartition> partitions(String topic, int n) {
        return IntStream.range(0, n).mapToObj(i -> new TopicPartition(topic, i)).collect(Collectors.toList());
    }

    /**
     * Until no transaction is open on the topic: each partition's LSO is its high watermark.
     * A commit or abort is answered once the coordinator has logged it, and its markers are
     * written after (in Kafka as in Moldau), so a reader started at once could find the LSO
     * still before the transaction.
     */
    static void awaitSettled(String bootstrap, String topic, int n) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (true) {
            Map<TopicPartition, Long> stable = endOffsets(bootstrap, topic, n, COMMITTED);
            Map<TopicPartition, Long> high = endOffsets(bootstrap, topic, n, UNCOMMITTED);
            if (stable.equals(high)) {
                return;
            }
            check(System.nanoTime() < deadline, topic + ": LSOs " + stable + ", high watermarks " + high);
            Thread.sleep(100);
        }
    }

    /** Each partition, once its transactions are settled, read from its start to its end offset. */
    static Map<Integer, List<String>> readToEnd(String bootstrap, String topic, int n, String isolation)
            throws InterruptedException {
        awaitSettled(bootstrap, topic, n);
        Map<Integer, List<String>> got = new HashMap<>();
        try (KafkaConsumer<String, String> c = consumer(bootstrap, null, isolation)) {
            List<TopicPartition> tps = partitions(topic, n);
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps);
            tps.forEach(tp -> got.put(tp.partition(), new ArrayList<>()));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (tps.stream().anyMatch(tp -> c.position(tp) < ends.get(tp))) {
                check(System.nanoTime() < deadline, isolation + ": " + topic + " not read to " + ends + ", got " + got);
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    got.get(r.partition()).add(r.value());
                }
            }
        }
        return got;
    }

    static Map<TopicPartition, Long> endOffsets(String bootstrap, String topic, int n, String isolation) {
        try (KafkaConsumer<String, String> c = consumer(bootstrap, null, isolation)) {
            return c.endOffsets(partitions(topic, n));
        }
    }

    static long endOffset(String bootstrap, String topic, String isolation) {
        return endOffsets(bootstrap, topic, 1, isolation).get(new TopicPartition(topic, 0));
    }

    /** Ten records alternating over two partitions, prefix + i for i in [from, from + 10). */
    static List<ProducerRecord<String, String>> ten(String topic, String prefix, int from) {
        return IntStream.range(from, from + 10)
                .mapToObj(i -> new ProducerRecord<>(topic, i % 2, "k" + i, prefix + i))
                .collect(Collectors.toList());
    }

    static Map<Integer, List<String>> byPartition(List<List<ProducerRecord<String, String>>> batches) {
        Map<Integer, List<String>> out = new HashMap<>(Map.of(0, new ArrayList<>(), 1, new ArrayList<>()));
        batches.forEach(b -> b.forEach(r -> out.get(r.partition()).add(r.value())));
        return out;
    }

    static void sendAll(KafkaProducer<String, String> producer, List<ProducerRecord<String, String>> records) {
        records.forEach(producer::send);
    }

    /**
     * Committed, aborted, committed: read_committed sees the two committed transactions,
     * read_uncommitted all three, each in the order written; every partition ends after
     * three markers, and both isolation levels agree on the end once nothing is open.
     */
    public static void commitAndAbort(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 2);
        List<ProducerRecord<String, String>> first = ten(topic, "c", 0);
        List<ProducerRecord<String, String>> aborted = ten(topic, "a", 0);
        List<ProducerRecord<String, String>> second = ten(topic, "c", 10);
        try (KafkaProducer<String, String> producer = transactional(bootstrap, AdminChecks.unique("commit-abort"))) {
            producer.initTransactions();
            producer.beginTransaction();
            sendAll(producer, first);
            producer.commitTransaction();
            producer.beginTransaction();
            sendAll(producer, aborted);
            producer.flush(); // in the log before the abort (else the abort drops them unsent)
            producer.abortTransaction();
            producer.beginTransaction();
            sendAll(producer, second);
            producer.commitTransaction();
        }
        equal(byPartition(List.of(first, second)), readToEnd(bootstrap, topic, 2, COMMITTED), "read_committed");
        equal(byPartition(List.of(first, aborted, second)), readToEnd(bootstrap, topic, 2, UNCOMMITTED),
                "read_uncommitted");
        // 5 + 5 + 5 records and 3 markers in each partition.
        Map<TopicPartition, Long> end = Map.of(new TopicPartition(topic, 0), 18L, new TopicPartition(topic, 1), 18L);
        equal(end, endOffsets(bootstrap, topic, 2, UNCOMMITTED), "end offsets, read_uncommitted");
        equal(end, endOffsets(bootstrap, topic, 2, COMMITTED), "end offsets (LSO), read_committed");
    }

    /**
     * abortTransaction drops what the producer still buffers and aborts what it sent; the
     * producer then goes on with a new transaction. A transaction that wrote nothing
     * aborts as well. Only the last transaction is read_committed.
     */
    public static void abortTransaction(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 1);
        Properties lingering = new Properties();
        lingering.put(ProducerConfig.LINGER_MS_CONFIG, "60000"); // batches wait until flushed
        try (KafkaProducer<String, String> producer =
                transactional(bootstrap, AdminChecks.unique("abort"), lingering)) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.abortTransaction();

            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, "k", "sent-then-aborted"));
            producer.flush();
            Future<RecordMetadata> buffered = producer.send(new ProducerRecord<>(topic, 0, "k", "buffered"));
            producer.abortTransaction();
            try {
                buffered.get(10, TimeUnit.SECONDS);
                throw new AssertionError("a record still buffered at the abort was sent");
            } catch (ExecutionException e) {
                check(e.getCause() instanceof KafkaException, "buffered record: " + e.getCause());
            }

            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, "k", "committed"));
            producer.commitTransaction();
        }
        equal(Map.of(0, List.of("committed")), readToEnd(bootstrap, topic, 1, COMMITTED), "read_committed");
        equal(Map.of(0, List.of("sent-then-aborted", "committed")), readToEnd(bootstrap, topic, 1, UNCOMMITTED),
                "read_uncommitted");
        // The record, its abort marker, the record, its commit marker.
        equal(4L, endOffset(bootstrap, topic, COMMITTED), "end offset (LSO)");
    }

    /**
     * Consume-transform-produce (KIP-447): a member of a group reads its input, writes the
     * output and sends the offsets with its group metadata inside each transaction. The
     * committed transaction's offset becomes the group's; the aborted one's does not.
     */
    public static void sendOffsetsToTransaction(String bootstrap) throws Exception {
        String input = topic(bootstrap, 1);
        String output = topic(bootstrap, 1);
        String group = AdminChecks.unique("txn-group");
        ConsumerChecks.produce(bootstrap, input, 1, 10, System.currentTimeMillis());
        TopicPartition in = new TopicPartition(input, 0);
        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, group, COMMITTED);
                KafkaProducer<String, String> producer = transactional(bootstrap, AdminChecks.unique("ctp"))) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            List<ConsumerRecord<String, String>> read = ConsumerChecks.pollFor(consumer, 10);
            equal(10, read.size(), "input records read");
            ConsumerGroupMetadata metadata = consumer.groupMetadata();
            check(metadata.generationId() > 0, "a member of the group: " + metadata);

            for (int[] chunk : new int[][] {{0, 5, 0}, {5, 10, 1}, {5, 10, 0}}) {
                producer.beginTransaction();
                for (ConsumerRecord<String, String> r : read.subList(chunk[0], chunk[1])) {
                    producer.send(new ProducerRecord<>(output, 0, r.key(), r.value().toUpperCase()));
                }
                producer.sendOffsetsToTransaction(Map.of(in, new OffsetAndMetadata(chunk[1])), metadata);
                if (chunk[2] == 1) {
                    producer.abortTransaction();
                    equal(5L, committed(consumer, in), "the group's offset after an abort");
                } else {
                    producer.commitTransaction();
                    equal((long) chunk[1], committed(consumer, in), "the group's offset after a commit");
                }
            }
        }
        List<String> want = IntStream.range(0, 10).mapToObj(i -> ("0:" + i).toUpperCase()).collect(Collectors.toList());
        equal(Map.of(0, want), readToEnd(bootstrap, output, 1, COMMITTED), "output, read_committed");
    }

    /**
     * The group's committed offset, -1 if none, as its read_committed consumer reads it:
     * it asks with require_stable and waits while a transaction holds the offset pending
     * (UNSTABLE_OFFSET_COMMIT), where Admin's listConsumerGroupOffsets leaves it out.
     */
    static long committed(KafkaConsumer<String, String> consumer, TopicPartition tp) {
        OffsetAndMetadata o = consumer.committed(Set.of(tp), Duration.ofSeconds(30)).get(tp);
        return o == null ? -1 : o.offset();
    }

    /**
     * KIP-447: offsets sent with group metadata of a generation the group is not at (a
     * zombie that missed a rebalance) are refused; the producer must abort.
     */
    public static void staleGroupMetadataRefused(String bootstrap) throws Exception {
        String input = topic(bootstrap, 1);
        String group = AdminChecks.unique("txn-stale");
        ConsumerChecks.produce(bootstrap, input, 1, 1, System.currentTimeMillis());
        TopicPartition in = new TopicPartition(input, 0);
        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, group, COMMITTED);
                KafkaProducer<String, String> producer = transactional(bootstrap, AdminChecks.unique("stale"))) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            equal(1, ConsumerChecks.pollFor(consumer, 1).size(), "input records read");
            ConsumerGroupMetadata current = consumer.groupMetadata();
            ConsumerGroupMetadata stale = new ConsumerGroupMetadata(
                    group, current.generationId() + 1, current.memberId(), Optional.empty());
            producer.beginTransaction();
            try {
                producer.sendOffsetsToTransaction(Map.of(in, new OffsetAndMetadata(1)), stale);
                throw new AssertionError("offsets of a generation the group is not at were accepted");
            } catch (CommitFailedException expected) {
                // abortable: the producer aborts and goes on
            }
            producer.abortTransaction();
            equal(-1L, committed(consumer, in), "the group's offset");
            producer.beginTransaction();
            producer.sendOffsetsToTransaction(Map.of(in, new OffsetAndMetadata(1)), current);
            producer.commitTransaction();
            equal(1L, committed(consumer, in), "the group's offset with current metadata");
        }
    }

    /**
     * A second producer with the same transactional.id fences the first (a zombie): its
     * open transaction is aborted. The zombie's commit fails with ProducerFencedException
     * (EndTxn answered PRODUCER_FENCED). A zombie that writes again has its records refused
     * with InvalidProducerEpochException (Produce answered INVALID_PRODUCER_EPOCH), an error
     * the client lets it abort after, and its abort is then fenced too. Only the successors'
     * transactions are read_committed.
     */
    public static void fencing(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 1);
        for (boolean writesAgain : new boolean[] {false, true}) {
            String id = AdminChecks.unique("fenced");
            try (KafkaProducer<String, String> zombie = transactional(bootstrap, id)) {
                zombie.initTransactions();
                zombie.beginTransaction();
                zombie.send(new ProducerRecord<>(topic, 0, "k", "zombie")).get(30, TimeUnit.SECONDS);
                try (KafkaProducer<String, String> successor = transactional(bootstrap, id)) {
                    successor.initTransactions(); // aborts the zombie's open transaction
                    successor.beginTransaction();
                    successor.send(new ProducerRecord<>(topic, 0, "k", "successor"));
                    successor.commitTransaction();
                }
                if (writesAgain) {
                    Future<RecordMetadata> late = zombie.send(new ProducerRecord<>(topic, 0, "k", "zombie-again"));
                    try {
                        late.get(30, TimeUnit.SECONDS);
                        throw new AssertionError("the fenced producer wrote a record");
                    } catch (ExecutionException e) {
                        check(e.getCause() instanceof InvalidProducerEpochException, "the zombie's write: " + e.getCause());
                    }
                }
                try {
                    if (writesAgain) {
                        zombie.abortTransaction();
                    } else {
                        zombie.commitTransaction();
                    }
                    throw new AssertionError("the fenced producer ended its transaction");
                } catch (ProducerFencedException expected) {
                    // fatal: the producer can only be closed
                }
            }
        }
        equal(Map.of(0, List.of("successor", "successor")), readToEnd(bootstrap, topic, 1, COMMITTED),
                "read_committed");
        equal(Map.of(0, List.of("zombie", "successor", "zombie", "successor")),
                readToEnd(bootstrap, topic, 1, UNCOMMITTED), "read_uncommitted");
    }

    /**
     * A transaction left open longer than its transaction.timeout.ms is aborted by the
     * coordinator: the partition's LSO moves past it (its abort marker written), read_committed
     * never sees its records, and the producer's late commit fails.
     */
    public static void transactionTimeout(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 1);
        Properties shortLived = new Properties();
        // Long enough to see the LSO held while the transaction is open, on a loaded machine too.
        shortLived.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "3000");
        try (KafkaProducer<String, String> producer =
                transactional(bootstrap, AdminChecks.unique("timeout"), shortLived)) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, "k", "abandoned")).get(30, TimeUnit.SECONDS);
            equal(0L, endOffset(bootstrap, topic, COMMITTED), "LSO while the transaction is open");
            // The coordinator looks for expired transactions every
            // transaction.abort.timed.out.transaction.cleanup.interval.ms: 10 s by default,
            // 500 ms on the brokers of tests/kafka.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (endOffset(bootstrap, topic, COMMITTED) == 0L) {
                check(System.nanoTime() < deadline, "the expired transaction was not aborted within 30 s");
                Thread.sleep(200);
            }
            // The record and its abort marker.
            equal(2L, endOffset(bootstrap, topic, COMMITTED), "LSO after the abort");
            equal(2L, endOffset(bootstrap, topic, UNCOMMITTED), "end offset after the abort");
            try {
                producer.commitTransaction();
                throw new AssertionError("a transaction aborted for its timeout was committed");
            } catch (ProducerFencedException expected) {
                // the coordinator bumped the epoch when it aborted: this producer is fenced
            }
        }
        equal(Map.of(0, List.of()), readToEnd(bootstrap, topic, 1, COMMITTED), "read_committed");
        equal(Map.of(0, List.of("abandoned")), readToEnd(bootstrap, topic, 1, UNCOMMITTED), "read_uncommitted");
    }

    /**
     * A read_committed consumer stops at the LSO, the first offset of an open transaction,
     * even with records after it from another producer; once the transaction commits it reads
     * on, in offset order. read_uncommitted's end is the high watermark all along. Admin's
     * listOffsets answers the same per isolation level.
     */
    public static void readCommittedStopsAtLso(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        Properties plainProps = new Properties();
        plainProps.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        plainProps.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        plainProps.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> plain = new KafkaProducer<>(plainProps);
                KafkaProducer<String, String> txn = transactional(bootstrap, AdminChecks.unique("lso"));
                KafkaConsumer<String, String> reader = consumer(bootstrap, null, COMMITTED)) {
            txn.initTransactions();
            for (int i = 0; i < 3; i++) {
                plain.send(new ProducerRecord<>(topic, 0, "k", "before" + i)).get(); // offsets 0-2
            }
            txn.beginTransaction();
            for (int i = 0; i < 5; i++) {
                txn.send(new ProducerRecord<>(topic, 0, "k", "txn" + i)); // offsets 3-7
            }
            txn.flush();
            for (int i = 0; i < 2; i++) {
                plain.send(new ProducerRecord<>(topic, 0, "k", "after" + i)).get(); // offsets 8-9
            }
            equal(3L, reader.endOffsets(List.of(tp)).get(tp), "read_committed end offset (the LSO)");
            equal(10L, endOffset(bootstrap, topic, UNCOMMITTED), "read_uncommitted end offset");
            try (Admin admin = AdminChecks.admin(bootstrap)) {
                for (IsolationLevel level : IsolationLevel.values()) {
                    long latest = admin.listOffsets(Map.of(tp, OffsetSpec.latest()), new ListOffsetsOptions(level))
                            .partitionResult(tp).get(30, TimeUnit.SECONDS).offset();
                    equal(level == IsolationLevel.READ_COMMITTED ? 3L : 10L, latest, "Admin's latest offset, " + level);
                }
            }

            reader.assign(List.of(tp));
            reader.seekToBeginning(List.of(tp));
            List<String> got = new ArrayList<>();
            long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1500);
            while (System.nanoTime() < until) {
                reader.poll(Duration.ofMillis(100)).forEach(r -> got.add(r.value()));
            }
            equal(List.of("before0", "before1", "before2"), got, "read_committed before the commit");
            equal(3L, reader.position(tp), "read_committed position before the commit");

            txn.commitTransaction(); // its marker at offset 10
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (reader.position(tp) < 11) {
                check(System.nanoTime() < deadline, "read_committed did not pass the commit: " + got);
                reader.poll(Duration.ofMillis(100)).forEach(r -> got.add(r.value()));
            }
            equal(List.of("before0", "before1", "before2", "txn0", "txn1", "txn2", "txn3", "txn4", "after0", "after1"),
                    got, "read_committed after the commit");
            equal(11L, reader.endOffsets(List.of(tp)).get(tp), "read_committed end offset after the commit");
        }
    }
}
