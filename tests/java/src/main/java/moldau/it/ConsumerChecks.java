package moldau.it;

import static moldau.it.Checks.check;
import static moldau.it.Checks.equal;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.NoOffsetForPartitionException;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka's consumer (classic group protocol) against Moldau: assignors, rebalances as
 * members come and go, static membership, commits, seeks, pause/resume, offsets by time,
 * auto.offset.reset. Members of one group run in threads of this JVM.
 */
public final class ConsumerChecks {
    private ConsumerChecks() {}

    public static void main(String[] args) {
        Checks.run(ConsumerChecks.class, args);
    }

    static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    static void eventually(BooleanSupplier condition, String what) throws InterruptedException {
        eventually(condition, what, 20);
    }

    static void eventually(BooleanSupplier condition, String what, int seconds) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("not within " + seconds + " s: " + what);
            }
            Thread.sleep(20);
        }
    }

    static String topic(String bootstrap, int partitions) throws Exception {
        String topic = unique("consumer");
        try (Admin admin = AdminChecks.admin(bootstrap)) {
            short rf = AdminChecks.rf(admin);
            admin.createTopics(List.of(new NewTopic(topic, partitions, rf))).all().get();
        }
        return topic;
    }

    /** Sends `count` records to each partition, with timestamps base, base+1000, ... */
    static void produce(String bootstrap, String topic, int partitions, int count, long base) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int partition = 0; partition < partitions; partition++) {
                for (int i = 0; i < count; i++) {
                    producer.send(new ProducerRecord<>(topic, partition, base + 1000L * i, "k" + i, partition + ":" + i));
                }
            }
            producer.flush();
        }
    }

    static Properties props(String bootstrap, String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        return p;
    }

    static Set<TopicPartition> partitions(String topic, int... ids) {
        return IntStream.of(ids).mapToObj(i -> new TopicPartition(topic, i)).collect(Collectors.toSet());
    }

    /** Polls records until `count` arrived (or 15 s passed). */
    static List<ConsumerRecord<String, String>> pollFor(KafkaConsumer<String, String> c, int count) {
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        while (out.size() < count && System.nanoTime() < deadline) {
            c.poll(Duration.ofMillis(100)).forEach(out::add);
        }
        return out;
    }

    /**
     * A group member polling in a thread of its own; what the consumer reports (its
     * assignment, its rebalance callbacks) is published for the checking thread.
     */
    static final class Member implements Runnable, ConsumerRebalanceListener {
        final String name;
        final Properties props;
        final String topic;
        final Thread thread;
        volatile Set<TopicPartition> assignment = Set.of();
        final ConcurrentLinkedQueue<String> events = new ConcurrentLinkedQueue<>();
        final AtomicInteger rebalances = new AtomicInteger();
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        final CountDownLatch done = new CountDownLatch(1);
        volatile boolean stop;
        /** Close without leaving the group (a static member's restart). */
        volatile boolean leave = true;
        KafkaConsumer<String, String> consumer;

        Member(String name, Properties props, String topic) {
            this.name = name;
            this.props = props;
            this.topic = topic;
            this.thread = new Thread(this, name);
        }

        Member start() {
            thread.start();
            return this;
        }

        @Override
        public void run() {
            try {
                consumer = new KafkaConsumer<>(props);
                consumer.subscribe(List.of(topic), this);
                while (!stop) {
                    consumer.poll(Duration.ofMillis(50));
                    assignment = Set.copyOf(consumer.assignment());
                }
            } catch (WakeupException e) {
                // stopped
            } catch (Throwable t) {
                failure.set(t);
            } finally {
                if (consumer != null) {
                    // A static member leaves only when told to (KIP-1092); REMAIN_IN_GROUP is
                    // a restart or a crash: no LeaveGroup.
                    consumer.close(CloseOptions.groupMembershipOperation(leave
                            ? CloseOptions.GroupMembershipOperation.LEAVE_GROUP
                            : CloseOptions.GroupMembershipOperation.REMAIN_IN_GROUP)
                            .withTimeout(Duration.ofSeconds(5)));
                }
                done.countDown();
            }
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            events.add("revoked " + partitions.stream().map(TopicPartition::partition).sorted().collect(Collectors.toList()));
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            rebalances.incrementAndGet();
            events.add("assigned " + partitions.stream().map(TopicPartition::partition).sorted().collect(Collectors.toList()));
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            events.add("lost " + partitions.stream().map(TopicPartition::partition).sorted().collect(Collectors.toList()));
        }

        void close() throws InterruptedException {
            stop = true;
            check(done.await(20, TimeUnit.SECONDS), name + " closes");
            if (failure.get() != null) {
                throw new AssertionError(name + " failed", failure.get());
            }
        }

        @Override
        public String toString() {
            return name + " " + assignment + " " + events;
        }
    }

    static Properties groupProps(String bootstrap, String group, Class<?> assignor) {
        Properties p = props(bootstrap, group);
        p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor.getName());
        return p;
    }

    /**
     * What the group's coordinator says of it, for a failed wait's message: a group that
     * never forms shows here whether a coordinator answers and who it counts as members.
     */
    static String groupAsTheBrokerSees(Member m) {
        String bootstrap = m.props.getProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG);
        String group = m.props.getProperty(ConsumerConfig.GROUP_ID_CONFIG);
        try (Admin admin = AdminChecks.admin(bootstrap)) {
            return admin.describeConsumerGroups(List.of(group)).all().get(10, TimeUnit.SECONDS).toString();
        } catch (Exception e) {
            return "describeConsumerGroups(" + group + ") failed: " + e;
        }
    }

    /** `wait`, and on a timeout the same failure with the group as its coordinator sees it. */
    static void awaitGroup(List<Member> members, CheckedRunnable wait) throws InterruptedException {
        try {
            wait.run();
        } catch (AssertionError e) {
            // The message's members are as they were when the wait began; add them now.
            throw new AssertionError(e.getMessage() + "; members at the timeout: " + members
                    + "; the coordinator's view: " + groupAsTheBrokerSees(members.get(0)), e.getCause());
        }
    }

    @FunctionalInterface
    interface CheckedRunnable {
        void run() throws InterruptedException;
    }

    /** Waits until the members' assignments are exactly these, and returns nothing else. */
    static void awaitAssignments(List<Member> members, List<Set<TopicPartition>> expected) throws InterruptedException {
        awaitGroup(members, () -> eventually(() -> {
            for (Member m : members) {
                if (m.failure.get() != null) {
                    throw new AssertionError(m.name + " failed", m.failure.get());
                }
            }
            for (int i = 0; i < members.size(); i++) {
                if (!members.get(i).assignment.equals(expected.get(i))) {
                    return false;
                }
            }
            return true;
        }, "assignments " + expected + "; members: " + members));
    }

    /** Waits until the members together hold every partition once, each `per` of them. */
    static void awaitBalanced(List<Member> members, String topic, int partitions, int per) throws InterruptedException {
        awaitGroup(members, () -> eventually(() -> {
            Set<TopicPartition> all = new HashSet<>();
            int total = 0;
            for (Member m : members) {
                if (m.failure.get() != null) {
                    throw new AssertionError(m.name + " failed", m.failure.get());
                }
                if (m.assignment.size() != per) {
                    return false;
                }
                all.addAll(m.assignment);
                total += m.assignment.size();
            }
            return total == partitions && all.size() == partitions;
        }, per + " partitions each; members: " + members));
    }

    // --- assignors and rebalances ---

    public static void rangeAssignor(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 4);
        String group = unique("range");
        Member a = new Member("a", groupProps(bootstrap, group, RangeAssignor.class), topic).start();
        awaitAssignments(List.of(a), List.of(partitions(topic, 0, 1, 2, 3)));
        // member ids order the range: start b only once a holds everything; then either
        // holds two consecutive partitions
        Member b = new Member("b", groupProps(bootstrap, group, RangeAssignor.class), topic).start();
        awaitBalanced(List.of(a, b), topic, 4, 2);
        for (Member m : List.of(a, b)) {
            Set<Integer> ids = m.assignment.stream().map(TopicPartition::partition).collect(Collectors.toSet());
            check(ids.equals(Set.of(0, 1)) || ids.equals(Set.of(2, 3)), "range gives consecutive partitions: " + m);
        }
        check(a.events.contains("revoked [0, 1, 2, 3]"), "the eager protocol revokes everything first: " + a);
        b.close();
        awaitAssignments(List.of(a), List.of(partitions(topic, 0, 1, 2, 3)));
        a.close();
    }

    public static void roundRobinAssignor(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 6);
        String group = unique("round-robin");
        List<Member> members = new ArrayList<>();
        for (String name : List.of("a", "b", "c")) {
            members.add(new Member(name, groupProps(bootstrap, group, RoundRobinAssignor.class), topic).start());
        }
        awaitBalanced(members, topic, 6, 2);
        for (Member m : members) {
            List<Integer> ids = m.assignment.stream().map(TopicPartition::partition).sorted().collect(Collectors.toList());
            equal(3, ids.get(1) - ids.get(0), "round robin deals every third partition to " + m.name);
        }
        members.remove(2).close();
        awaitBalanced(members, topic, 6, 3);
        for (Member m : members) {
            m.close();
        }
    }

    public static void cooperativeSticky(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 4);
        String group = unique("cooperative");
        Member a = new Member("a", groupProps(bootstrap, group, CooperativeStickyAssignor.class), topic).start();
        awaitAssignments(List.of(a), List.of(partitions(topic, 0, 1, 2, 3)));
        a.events.clear();
        Member b = new Member("b", groupProps(bootstrap, group, CooperativeStickyAssignor.class), topic).start();
        awaitBalanced(List.of(a, b), topic, 4, 2);
        Set<TopicPartition> kept = a.assignment;
        // Cooperative: a gives up only the two partitions b takes, never all four.
        List<String> revoked = a.events.stream().filter(e -> e.startsWith("revoked")).collect(Collectors.toList());
        check(!revoked.contains("revoked [0, 1, 2, 3]"), "a did not revoke everything: " + a);
        check(revoked.stream().anyMatch(e -> e.matches("revoked \\[\\d, \\d\\]")), "a revoked two partitions: " + a);
        Set<TopicPartition> movedToB = b.assignment;
        check(kept.stream().noneMatch(movedToB::contains), "no partition in two members");

        // b leaves: a gets b's partitions and revokes none of its own
        a.events.clear();
        b.close();
        awaitAssignments(List.of(a), List.of(partitions(topic, 0, 1, 2, 3)));
        check(a.events.stream().noneMatch(e -> e.startsWith("revoked [") && !e.equals("revoked []")),
                "nothing revoked from a when b left: " + a);
        a.close();
    }

    // --- static membership ---

    static Properties staticProps(String bootstrap, String group, String instance) {
        Properties p = groupProps(bootstrap, group, RangeAssignor.class);
        p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instance);
        return p;
    }

    public static void staticMembership(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 4);
        String group = unique("static");
        Member a = new Member("a", staticProps(bootstrap, group, "instance-a"), topic).start();
        awaitAssignments(List.of(a), List.of(partitions(topic, 0, 1, 2, 3)));
        Member b = new Member("b", staticProps(bootstrap, group, "instance-b"), topic).start();
        awaitBalanced(List.of(a, b), topic, 4, 2);
        Set<TopicPartition> aHad = a.assignment;
        Set<TopicPartition> bHad = b.assignment;
        int bRebalances = b.rebalances.get();

        // a goes away without leaving and comes back well within session.timeout.ms (10 s)
        a.leave = false;
        a.close();
        Member a2 = new Member("a2", staticProps(bootstrap, group, "instance-a"), topic).start();
        awaitAssignments(List.of(a2, b), List.of(aHad, bHad));
        Thread.sleep(1500); // several heartbeats of b's: a rebalance would have reached it
        equal(bRebalances, b.rebalances.get(), "b's rebalances while a restarted: " + b);
        equal(bHad, b.assignment, "b's assignment");

        // leaving for good (close with LeaveGroup) hands a's partitions to b
        a2.close();
        awaitAssignments(List.of(b), List.of(partitions(topic, 0, 1, 2, 3)));
        b.close();
    }

    public static void staticMemberFenced(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 2);
        String group = unique("fenced");
        Member a = new Member("a", staticProps(bootstrap, group, "instance-a"), topic).start();
        awaitAssignments(List.of(a), List.of(partitions(topic, 0, 1)));
        // A second consumer with the same group.instance.id takes the member's place; the
        // first is fenced at its next request to the coordinator.
        Member twin = new Member("twin", staticProps(bootstrap, group, "instance-a"), topic).start();
        eventually(() -> twin.assignment.equals(partitions(topic, 0, 1)), "the twin takes over: " + twin);
        eventually(() -> a.failure.get() != null, "the first one fails: " + a);
        check(a.failure.get() instanceof FencedInstanceIdException, "FencedInstanceIdException: " + a.failure.get());
        a.failure.set(null);
        a.close();
        twin.close();
    }

    // --- positions and commits ---

    public static void commitSyncAndAsync(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 2);
        produce(bootstrap, topic, 2, 10, System.currentTimeMillis());
        String group = unique("commit");
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props(bootstrap, group))) {
            c.subscribe(List.of(topic));
            equal(20, pollFor(c, 20).size(), "records");
            equal(10L, c.position(p0), "position of p0");
            c.commitSync();
            Map<TopicPartition, OffsetAndMetadata> committed = c.committed(Set.of(p0, p1));
            equal(10L, committed.get(p0).offset(), "committed p0 after commitSync()");
            equal(10L, committed.get(p1).offset(), "committed p1 after commitSync()");

            c.commitSync(Map.of(p0, new OffsetAndMetadata(4, "meta")));
            equal(new OffsetAndMetadata(4, committed.get(p0).leaderEpoch(), "meta").offset(),
                    c.committed(Set.of(p0)).get(p0).offset(), "explicit commitSync");
            equal("meta", c.committed(Set.of(p0)).get(p0).metadata(), "metadata kept");

            AtomicReference<Object> result = new AtomicReference<>();
            c.commitAsync(Map.of(p1, new OffsetAndMetadata(7)), (offsets, e) -> result.set(e == null ? offsets : e));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (result.get() == null && System.nanoTime() < deadline) {
                c.poll(Duration.ofMillis(50)); // callbacks run inside poll
            }
            check(result.get() instanceof Map, "commitAsync's callback: " + result.get());
            equal(7L, c.committed(Set.of(p1)).get(p1).offset(), "committed p1 after commitAsync");
            check(c.committed(Set.of(new TopicPartition(topic, 5))).get(new TopicPartition(topic, 5)) == null,
                    "nothing committed for a partition never consumed");
        }
        // a consumer of the group starts at the commits
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props(bootstrap, group))) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> records = pollFor(c, 9);
            equal(9, records.size(), "records after the commits (6 of p0, 3 of p1)");
            equal(4L, records.stream().filter(r -> r.partition() == 0).mapToLong(ConsumerRecord::offset).min()
                    .getAsLong(), "p0 starts at its commit");
            equal(7L, records.stream().filter(r -> r.partition() == 1).mapToLong(ConsumerRecord::offset).min()
                    .getAsLong(), "p1 starts at its commit");
        }
    }

    public static void positionAfterRestart(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 1);
        produce(bootstrap, topic, 1, 6, System.currentTimeMillis());
        String group = unique("restart");
        TopicPartition p0 = new TopicPartition(topic, 0);
        Properties p = props(bootstrap, group);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "3");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.assign(List.of(p0));
            List<ConsumerRecord<String, String>> first = new ArrayList<>();
            while (first.isEmpty()) {
                c.poll(Duration.ofMillis(100)).forEach(first::add);
            }
            equal(3, first.size(), "max.poll.records=3");
            c.commitSync();
        }
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.assign(List.of(p0));
            equal(3L, c.position(p0), "the position after a restart is the commit");
            List<ConsumerRecord<String, String>> rest = pollFor(c, 3);
            equal(3L, rest.get(0).offset(), "first record after the restart");
        }
    }

    public static void seek(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 1);
        produce(bootstrap, topic, 1, 10, System.currentTimeMillis());
        TopicPartition p0 = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props(bootstrap, null))) {
            c.assign(List.of(p0));
            c.seek(p0, 5);
            equal(5L, c.position(p0), "position after seek");
            List<ConsumerRecord<String, String>> records = pollFor(c, 5);
            equal(5L, records.get(0).offset(), "first record after seek(5)");
            equal("0:5", records.get(0).value(), "its value");
            c.seekToBeginning(List.of(p0));
            equal(0L, c.position(p0), "position after seekToBeginning");
            equal(0L, pollFor(c, 1).get(0).offset(), "first record after seekToBeginning");
            c.seekToEnd(List.of(p0));
            equal(10L, c.position(p0), "position after seekToEnd");
            equal(0, c.poll(Duration.ofMillis(300)).count(), "nothing after the end");
            equal(Map.of(p0, 0L), c.beginningOffsets(List.of(p0)), "beginningOffsets");
            equal(Map.of(p0, 10L), c.endOffsets(List.of(p0)), "endOffsets");
            // a seek past the end is reset by auto.offset.reset=earliest
            c.seek(p0, 50);
            equal(0L, pollFor(c, 1).get(0).offset(), "out of range resets to earliest");
        }
    }

    public static void pauseResume(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 2);
        produce(bootstrap, topic, 2, 5, System.currentTimeMillis());
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props(bootstrap, null))) {
            c.assign(List.of(p0, p1));
            c.pause(List.of(p1));
            equal(Set.of(p1), c.paused(), "paused");
            List<ConsumerRecord<String, String>> records = pollFor(c, 5);
            Thread.sleep(300);
            c.poll(Duration.ofMillis(300)).forEach(records::add);
            equal(5, records.size(), "records while p1 is paused");
            check(records.stream().allMatch(r -> r.partition() == 0), "only p0's");
            c.resume(List.of(p1));
            records = pollFor(c, 5);
            equal(5, records.size(), "records after resume");
            check(records.stream().allMatch(r -> r.partition() == 1), "p1's");
        }
    }

    public static void offsetsForTimes(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 1);
        long base = System.currentTimeMillis() - 60_000;
        produce(bootstrap, topic, 1, 5, base); // timestamps base, base+1000, ... base+4000
        TopicPartition p0 = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props(bootstrap, null))) {
            Map<TopicPartition, OffsetAndTimestamp> r = c.offsetsForTimes(Map.of(p0, base + 2500));
            equal(3L, r.get(p0).offset(), "first offset at or after base+2500");
            equal(base + 3000, r.get(p0).timestamp(), "its timestamp");
            r = c.offsetsForTimes(Map.of(p0, base));
            equal(0L, r.get(p0).offset(), "at the first timestamp");
            r = c.offsetsForTimes(Map.of(p0, base + 10_000));
            check(r.get(p0) == null, "null after the last timestamp: " + r);
            c.assign(List.of(p0));
            c.seek(p0, c.offsetsForTimes(Map.of(p0, base + 1000)).get(p0).offset());
            equal("0:1", pollFor(c, 1).get(0).value(), "seek to a time");
        }
    }

    public static void autoOffsetReset(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 1);
        produce(bootstrap, topic, 1, 4, System.currentTimeMillis());
        TopicPartition p0 = new TopicPartition(topic, 0);

        Properties earliest = props(bootstrap, unique("earliest"));
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(earliest)) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> records = pollFor(c, 4);
            equal(0L, records.get(0).offset(), "earliest starts at the log start");
        }

        Properties latest = props(bootstrap, unique("latest"));
        latest.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "latest");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(latest)) {
            c.assign(List.of(p0));
            equal(4L, c.position(p0), "latest starts at the log end");
            produce(bootstrap, topic, 1, 1, System.currentTimeMillis());
            List<ConsumerRecord<String, String>> records = pollFor(c, 1);
            equal(1, records.size(), "only the record produced after");
            equal(4L, records.get(0).offset(), "its offset");
        }

        Properties none = props(bootstrap, unique("none"));
        none.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(none)) {
            c.assign(List.of(p0));
            try {
                c.poll(Duration.ofSeconds(5));
                throw new AssertionError("poll with auto.offset.reset=none and no commit returned");
            } catch (NoOffsetForPartitionException e) {
                equal(Set.of(p0), e.partitions(), "the partition named");
            }
        }
    }

    public static void maxPollRecords(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 1);
        produce(bootstrap, topic, 1, 25, System.currentTimeMillis());
        Properties p = props(bootstrap, null);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "7");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.assign(List.of(new TopicPartition(topic, 0)));
            int total = 0;
            int polls = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
            while (total < 25 && System.nanoTime() < deadline) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(100));
                check(records.count() <= 7, "at most max.poll.records a poll: " + records.count());
                if (!records.isEmpty()) {
                    polls++;
                }
                total += records.count();
            }
            equal(25, total, "records");
            check(polls >= 4, "at least four polls: " + polls);
        }
    }

    /**
     * group.protocol=consumer (KIP-848) needs ConsumerGroupHeartbeat, which Moldau does not
     * have: the consumer must fail with Kafka's UnsupportedVersionException telling the user
     * to use group.protocol=classic, not hang or fail obscurely.
     */
    public static void consumerGroupProtocolRefused(String bootstrap) throws Exception {
        String topic = topic(bootstrap, 1);
        Properties p = props(bootstrap, unique("kip848"));
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        p.remove(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG); // not allowed with the consumer protocol
        p.remove(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(topic));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
            Throwable failure = null;
            while (failure == null && System.nanoTime() < deadline) {
                try {
                    c.poll(Duration.ofMillis(200));
                } catch (KafkaException e) {
                    failure = e;
                }
            }
            check(failure instanceof org.apache.kafka.common.errors.UnsupportedVersionException,
                    "UnsupportedVersionException: " + failure);
            check(String.valueOf(failure.getMessage()).contains("classic"),
                    "the message names the classic protocol: " + failure.getMessage());
            System.out.println("group.protocol=consumer: " + failure);
        }
    }
}
