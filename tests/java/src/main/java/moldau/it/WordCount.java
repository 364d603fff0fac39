package moldau.it;

import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.processor.StateRestoreListener;

/**
 * Kafka Streams' word count, a real application run as its own process:
 *
 * <pre>kafka-run-class moldau.it.WordCount BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR [RF [GUARANTEE]]</pre>
 *
 * <p>Lines of INPUT are split into words, re-keyed by word (a repartition topic,
 * APPLICATION_ID-counts-repartition) and counted in the state store "counts" (its changelog,
 * APPLICATION_ID-counts-changelog); each new count goes to OUTPUT as word -> 8-byte long.
 * RF is the internal topics' replication.factor (default -1: the broker's
 * default.replication.factor); GUARANTEE is processing.guarantee, at_least_once (the default)
 * or exactly_once_v2 (transactions: each commit writes the output, the changelog and the
 * consumed offsets in one transaction).
 *
 * <p>It prints one line per event a test waits for: {@code STATE RUNNING} (and every other
 * state change), {@code RESTORED counts N} when the store was rebuilt from its changelog, and
 * {@code CLOSED} when a SIGTERM's clean close has committed and flushed everything.
 */
public final class WordCount {
    private WordCount() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: WordCount BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR [RF [GUARANTEE]]");
            System.exit(2);
        }
        String input = args[2];
        String output = args[3];

        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, args.length > 5 ? args[5] : "-1");
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args.length > 6 ? args[6] : StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        // Commit (and so emit the cached counts) often: a test waits for them, and a kill
        // then loses at most a fraction of a second of progress.
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        // Purge the repartition topic's consumed records (DeleteRecords) soon after each
        // commit instead of every 30 s, so a test run sees Streams do it.
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, "1000");
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        // A stopped instance's partitions move to its restarted self (a new member: its
        // state dir is new) after the session timeout, which every restart of a test waits
        // out: 3 s (the test brokers allow down to 1 s) rather than Streams' 45 s. Streams'
        // consumer does not leave the group when it closes. Six heartbeats a session: a
        // loaded machine's pause does not expire a live member.
        props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), "3000");
        props.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), "500");

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
                .filter((key, word) -> !word.isEmpty())
                .groupBy((key, word) -> word, Grouped.with("counts", Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(TopicPartition partition, String store, long start, long end) {}

            @Override
            public void onBatchRestored(TopicPartition partition, String store, long end, long n) {}

            @Override
            public void onRestoreEnd(TopicPartition partition, String store, long total) {
                System.out.printf("RESTORED %s %s %d%n", store, partition, total);
            }
        });
        streams.setStateListener((now, before) -> System.out.println("STATE " + now));
        streams.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });

        CountDownLatch closed = new CountDownLatch(1);
        // SIGTERM runs the shutdown hooks: a clean close commits the offsets of what was
        // processed, after the producer flushed its output, so nothing is counted twice.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            boolean done = streams.close(Duration.ofSeconds(60));
            System.out.println(done ? "CLOSED" : "CLOSE TIMED OUT");
            System.out.flush();
            closed.countDown();
        }));
        streams.start();
        // A failed application exits non-zero so that a test sees it at once.
        while (!closed.await(500, TimeUnit.MILLISECONDS)) {
            KafkaStreams.State state = streams.state();
            if (state == KafkaStreams.State.ERROR || state == KafkaStreams.State.PENDING_ERROR) {
                System.out.println("FAILED " + state);
                System.exit(1);
            }
        }
    }
}
