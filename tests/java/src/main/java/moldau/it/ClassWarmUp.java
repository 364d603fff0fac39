package moldau.it;

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Loads the classes most JVMs of the tests load (Kafka's admin client, producer, consumer
 * and tools), against no broker, for {@code -XX:ArchiveClassesAtExit}: the archive of
 * them (moldau.testing.kafka_java) lets every later JVM start without loading and
 * verifying them again from the jars.
 */
public final class ClassWarmUp {
    private ClassWarmUp() {}

    /** Main classes of the tools the tests run (tests/kafka/tools.py); loading runs nothing. */
    private static final List<String> TOOLS = List.of(
            "org.apache.kafka.tools.TopicCommand",
            "org.apache.kafka.tools.ConsoleProducer",
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "kafka.admin.ConfigCommand",
            "org.apache.kafka.tools.GetOffsetShell",
            "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
            "org.apache.kafka.tools.LeaderElectionCommand",
            "org.apache.kafka.tools.VerifiableProducer",
            "org.apache.kafka.tools.VerifiableConsumer");

    /** A client call that fails with no broker there; its classes are loaded all the same. */
    private interface Attempt {
        void run() throws Exception;
    }

    private static void failing(Attempt attempt) {
        try {
            attempt.run();
        } catch (Exception e) {
            // expected: no broker
        }
    }

    public static void main(String[] args) {
        for (String tool : TOOLS) {
            try {
                Class.forName(tool);
            } catch (ClassNotFoundException | LinkageError e) {
                System.err.println("not loaded: " + tool + ": " + e);
            }
        }
        // Port 1: nothing listens, every request fails at once; the clients still load
        // their configs, metrics, network and request classes on the way.
        String nowhere = "127.0.0.1:1";
        Properties a = new Properties();
        a.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, nowhere);
        a.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "1000");
        a.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "500");
        failing(() -> {
            try (Admin admin = Admin.create(a)) {
                admin.listTopics(new ListTopicsOptions().timeoutMs(500)).names().get();
            }
        });
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, nowhere);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "500");
        failing(() -> {
            try (KafkaProducer<byte[], byte[]> producer =
                    new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
                producer.send(new ProducerRecord<>("warm-up", new byte[1])).get();
            }
        });
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, nowhere);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, "warm-up");
        failing(() -> {
            try (KafkaConsumer<byte[], byte[]> consumer =
                    new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                consumer.subscribe(List.of("warm-up"));
                consumer.poll(Duration.ofMillis(300));
            }
        });
    }
}
