package moldau.it;

import static moldau.it.Checks.check;
import static moldau.it.Checks.equal;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ListConsumerGroupsOptions;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.InvalidReplicaAssignmentException;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicIdException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka's AdminClient against Moldau: each check does what an operator's tool would, and
 * asserts what Kafka would answer. Runs on one broker and on a three-broker cluster; checks
 * that need more brokers than there are assert the error Kafka gives instead.
 */
public final class AdminChecks {
    private AdminChecks() {}

    public static void main(String[] args) {
        Checks.run(AdminChecks.class, args);
    }

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        return Admin.create(p);
    }

    static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    /** The cause of a failed future, which is what a user's code catches. */
    static Throwable failure(org.apache.kafka.common.KafkaFuture<?> future) throws InterruptedException {
        try {
            future.get(30, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            return e.getCause();
        } catch (java.util.concurrent.TimeoutException e) {
            throw new AssertionError("no answer in 30 s", e);
        }
        return null;
    }

    static void expect(Class<? extends Throwable> kind, org.apache.kafka.common.KafkaFuture<?> future, String what)
            throws InterruptedException {
        Throwable t = failure(future);
        check(kind.isInstance(t), what + ": expected " + kind.getSimpleName() + ", got " + t);
    }

    /** A condition that may throw, which counts as "not yet". */
    interface Condition {
        boolean holds() throws Exception;
    }

    static void eventually(Condition condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        Exception last = null;
        while (true) {
            try {
                if (condition.holds()) {
                    return;
                }
            } catch (Exception e) {
                last = e;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("not within 15 s: " + what, last);
            }
            Thread.sleep(50);
        }
    }

    /**
     * Waits until describeTopics shows the topic with all its partitions led. Kafka's
     * brokers, as Moldau's, learn of a new topic or partition each in its own time after
     * the answer to CreateTopics or CreatePartitions (the AdminClient's javadoc says so),
     * and describeTopics asks any of them.
     */
    static TopicDescription awaitTopic(Admin admin, String topic, int partitions) throws Exception {
        AtomicReference<TopicDescription> found = new AtomicReference<>();
        eventually(() -> {
            TopicDescription d = describe(admin, topic);
            found.set(d);
            return d.partitions().size() == partitions
                    && d.partitions().stream().allMatch(p -> p.leader() != null && p.leader().id() >= 0);
        }, topic + " with " + partitions + " partitions led, on the broker asked");
        return found.get();
    }

    static int brokers(Admin admin) throws Exception {
        return admin.describeCluster().nodes().get().size();
    }

    static short rf(Admin admin) throws Exception {
        return (short) Math.min(3, brokers(admin));
    }

    static TopicDescription describe(Admin admin, String topic) throws Exception {
        return admin.describeTopics(List.of(topic)).topicNameValues().get(topic).get();
    }

    static void produce(String bootstrap, String topic, int partition, List<Long> timestamps) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < timestamps.size(); i++) {
                // one send at a time: each record its own batch, so max-timestamp names it
                producer.send(new ProducerRecord<>(topic, partition, timestamps.get(i), "k" + i, "v" + i)).get();
            }
        }
    }

    static void createTopic(Admin admin, String topic, int partitions, short rf) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, rf))).all().get();
        awaitTopic(admin, topic, partitions);
    }

    // --- topics ---

    public static void createDescribeDeleteTopics(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            String topic = unique("admin-topic");
            short rf = rf(admin);
            CreateTopicsResult created = admin.createTopics(List.of(
                    new NewTopic(topic, 3, rf).configs(Map.of("retention.ms", "3600000"))));
            created.all().get();
            Uuid id = created.topicId(topic).get();
            check(!Uuid.ZERO_UUID.equals(id), "CreateTopics answers the topic id");
            equal(3, created.numPartitions(topic).get(), "numPartitions");
            equal((int) rf, created.replicationFactor(topic).get(), "replicationFactor");
            Config createdConfig = created.config(topic).get();
            equal("3600000", createdConfig.get("retention.ms").value(), "retention.ms in CreateTopics' answer");
            equal(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, createdConfig.get("retention.ms").source(),
                    "source of retention.ms");

            TopicDescription byName = awaitTopic(admin, topic, 3);
            check(admin.listTopics().names().get().contains(topic), "listTopics names the new topic");
            equal(id, byName.topicId(), "describeTopics(name).topicId");
            equal(3, byName.partitions().size(), "partitions");
            Set<Integer> nodeIds = admin.describeCluster().nodes().get().stream().map(Node::id)
                    .collect(Collectors.toSet());
            for (TopicPartitionInfo p : byName.partitions()) {
                equal((int) rf, p.replicas().size(), "replicas of " + p.partition());
                equal((int) rf, p.isr().size(), "isr of " + p.partition());
                check(p.leader() != null && nodeIds.contains(p.leader().id()), "a live leader for " + p);
                equal(p.replicas().get(0), p.leader(), "the preferred replica leads " + p.partition());
            }
            check(!byName.isInternal(), "not internal");

            TopicDescription byId = admin.describeTopics(TopicCollection.ofTopicIds(List.of(id)))
                    .topicIdValues().get(id).get();
            equal(topic, byId.name(), "describeTopics(id).name");
            equal(byName.partitions(), byId.partitions(), "the same partitions by id and by name");

            admin.deleteTopics(TopicCollection.ofTopicIds(List.of(id))).all().get();
            eventually(() -> {
                return !admin.listTopics().names().get().contains(topic);
            }, "the deleted topic leaves listTopics");
            expect(UnknownTopicOrPartitionException.class,
                    admin.describeTopics(List.of(topic)).topicNameValues().get(topic), "describe a deleted topic");
            expect(UnknownTopicIdException.class,
                    admin.describeTopics(TopicCollection.ofTopicIds(List.of(id))).topicIdValues().get(id),
                    "describe a deleted topic id");
        }
    }

    public static void deleteTopicByName(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            String topic = unique("admin-delete");
            createTopic(admin, topic, 2, rf(admin));
            admin.deleteTopics(List.of(topic)).all().get();
            eventually(() -> {
                return !admin.listTopics().names().get().contains(topic);
            }, "the deleted topic leaves listTopics");
            // A topic of the same name can be created again once the deletion is done (as
            // with Kafka's ZooKeeper-era brokers, the name stays taken while the replicas
            // are being deleted: TopicExistsException "is marked for deletion").
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
            while (true) {
                Throwable t = failure(admin.createTopics(List.of(new NewTopic(topic, 1, rf(admin)))).all());
                if (t == null) {
                    break;
                }
                check(t instanceof TopicExistsException && System.nanoTime() < deadline, "create it again: " + t);
                Thread.sleep(50);
            }
            awaitTopic(admin, topic, 1);
            admin.deleteTopics(List.of(topic)).all().get();
        }
    }

    public static void createTopicValidateOnly(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            String topic = unique("admin-validate");
            CreateTopicsResult r = admin.createTopics(List.of(new NewTopic(topic, 4, rf(admin))),
                    new CreateTopicsOptions().validateOnly(true));
            r.all().get();
            equal(4, r.numPartitions(topic).get(), "validateOnly answers the partitions");
            check(!admin.listTopics().names().get().contains(topic), "validateOnly creates nothing");
            expect(UnknownTopicOrPartitionException.class,
                    admin.describeTopics(List.of(topic)).topicNameValues().get(topic), "describe it");
            // validateOnly still refuses what a real creation would
            expect(InvalidReplicationFactorException.class, admin.createTopics(
                    List.of(new NewTopic(topic, 1, (short) (brokers(admin) + 1))),
                    new CreateTopicsOptions().validateOnly(true)).all(), "validateOnly with too many replicas");
        }
    }

    public static void createTopicErrors(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            String topic = unique("admin-errors");
            createTopic(admin, topic, 1, rf(admin));
            expect(TopicExistsException.class,
                    admin.createTopics(List.of(new NewTopic(topic, 1, rf(admin)))).all(), "create it twice");
            expect(InvalidReplicationFactorException.class, admin.createTopics(
                    List.of(new NewTopic(unique("admin-rf"), 1, (short) (brokers(admin) + 1)))).all(),
                    "more replicas than brokers");
            expect(InvalidPartitionsException.class,
                    admin.createTopics(List.of(new NewTopic(unique("admin-p0"), 0, rf(admin)))).all(),
                    "zero partitions");
            expect(InvalidConfigurationException.class, admin.createTopics(List.of(
                    new NewTopic(unique("admin-cfg"), 1, rf(admin)).configs(Map.of("retention.ms", "soon")))).all(),
                    "a config value of the wrong type");
            expect(InvalidConfigurationException.class, admin.createTopics(List.of(
                    new NewTopic(unique("admin-cfg"), 1, rf(admin)).configs(Map.of("no.such.config", "1")))).all(),
                    "an unknown config");
            expect(InvalidReplicaAssignmentException.class, admin.createTopics(List.of(
                    new NewTopic(unique("admin-assign"), Map.of(0, List.of(0, 0))))).all(),
                    "a duplicate replica in an assignment");
            expect(UnknownTopicOrPartitionException.class,
                    admin.deleteTopics(List.of(unique("admin-none"))).all(), "delete an unknown topic");
            expect(UnknownTopicIdException.class,
                    admin.deleteTopics(TopicCollection.ofTopicIds(List.of(Uuid.randomUuid()))).all(),
                    "delete an unknown topic id");
            admin.deleteTopics(List.of(topic)).all().get();
        }
    }

    public static void createPartitions(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            String topic = unique("admin-partitions");
            createTopic(admin, topic, 2, rf(admin));
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get();
            TopicDescription d = awaitTopic(admin, topic, 5);
            for (TopicPartitionInfo p : d.partitions()) {
                check(p.leader() != null, "a leader for new partition " + p.partition());
                equal((int) rf(admin), p.replicas().size(), "replicas of new partition " + p.partition());
            }
            expect(InvalidPartitionsException.class,
                    admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all(), "decrease");
            expect(InvalidPartitionsException.class,
                    admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all(), "the same count");
            expect(UnknownTopicOrPartitionException.class,
                    admin.createPartitions(Map.of(unique("admin-none"), NewPartitions.increaseTo(5))).all(),
                    "an unknown topic");
            admin.deleteTopics(List.of(topic)).all().get();
        }
    }

    // --- cluster ---

    public static void describeCluster(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            DescribeClusterResult r = admin.describeCluster();
            Collection<Node> nodes = r.nodes().get();
            int expected = bootstrap.split(",").length;
            equal(expected, nodes.size(), "nodes");
            Node controller = r.controller().get();
            check(controller != null && nodes.contains(controller), "the controller is one of the nodes: " + controller);
            String clusterId = r.clusterId().get();
            check(clusterId != null && !clusterId.isEmpty(), "a cluster id");
            // Every broker names the same cluster and the same controller.
            for (Node n : nodes) {
                try (Admin one = admin(n.host() + ":" + n.port())) {
                    equal(clusterId, one.describeCluster().clusterId().get(), "cluster id from broker " + n.id());
                    equal(controller.id(), one.describeCluster().controller().get().id(),
                            "controller from broker " + n.id());
                }
            }
        }
    }

    public static void describeFeatures(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            FeatureMetadata f = admin.describeFeatures().featureMetadata().get();
            check(f != null, "describeFeatures answers");
        }
    }

    /**
     * Asked for (KIP-430), the operations a client may perform: with no authorizer, as on
     * Moldau, Kafka allows everything a resource supports; not asked, none are named.
     */
    public static void authorizedOperations(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            String topic = unique("admin-acl-ops");
            createTopic(admin, topic, 1, rf(admin));
            Set<AclOperation> topicOps = Set.of(AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                    AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                    AclOperation.ALTER_CONFIGS);
            TopicDescription d = admin.describeTopics(List.of(topic),
                    new DescribeTopicsOptions().includeAuthorizedOperations(true)).topicNameValues().get(topic).get();
            equal(topicOps, d.authorizedOperations(), "a topic's authorized operations");
            equal(null, describe(admin, topic).authorizedOperations(), "not asked for");

            Set<AclOperation> clusterOps = Set.of(AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                    AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE,
                    AclOperation.ALTER, AclOperation.DESCRIBE);
            equal(clusterOps, admin.describeCluster(new DescribeClusterOptions().includeAuthorizedOperations(true))
                    .authorizedOperations().get(), "the cluster's authorized operations");
            equal(null, admin.describeCluster().authorizedOperations().get(), "not asked for");

            String group = unique("admin-acl-group");
            admin.alterConsumerGroupOffsets(group, Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(0)))
                    .all().get();
            Set<AclOperation> groupOps = Set.of(AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                    AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS);
            equal(groupOps, admin.describeConsumerGroups(List.of(group),
                    new DescribeConsumerGroupsOptions().includeAuthorizedOperations(true)).describedGroups().get(group)
                    .get().authorizedOperations(), "a group's authorized operations");
            admin.deleteConsumerGroups(List.of(group)).all().get();
            admin.deleteTopics(List.of(topic)).all().get();
        }
    }

    // --- configs ---

    static Config topicConfig(Admin admin, String topic) throws Exception {
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        return admin.describeConfigs(List.of(r)).all().get().get(r);
    }

    static void alter(Admin admin, ConfigResource r, AlterConfigOp... ops) throws Exception {
        admin.incrementalAlterConfigs(Map.of(r, List.of(ops))).all().get();
    }

    public static void topicConfigs(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            String topic = unique("admin-configs");
            createTopic(admin, topic, 1, rf(admin));
            ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config c = topicConfig(admin, topic);
            ConfigEntry retention = c.get("retention.ms");
            equal("604800000", retention.value(), "default retention.ms");
            equal(ConfigEntry.ConfigSource.DEFAULT_CONFIG, retention.source(), "its source");
            equal("delete", c.get("cleanup.policy").value(), "default cleanup.policy");

            alter(admin, r, new AlterConfigOp(new ConfigEntry("retention.ms", "1000000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("max.message.bytes", "200000"), AlterConfigOp.OpType.SET));
            c = topicConfig(admin, topic);
            equal("1000000", c.get("retention.ms").value(), "retention.ms after SET");
            equal(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, c.get("retention.ms").source(), "source after SET");
            equal("200000", c.get("max.message.bytes").value(), "max.message.bytes after SET");

            alter(admin, r, new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE));
            c = topicConfig(admin, topic);
            equal("604800000", c.get("retention.ms").value(), "retention.ms after DELETE");
            equal(ConfigEntry.ConfigSource.DEFAULT_CONFIG, c.get("retention.ms").source(), "source after DELETE");
            equal("200000", c.get("max.message.bytes").value(), "DELETE of one leaves the others");

            alter(admin, r, new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND));
            equal("delete,compact", topicConfig(admin, topic).get("cleanup.policy").value(), "cleanup.policy after APPEND");
            alter(admin, r, new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.SUBTRACT));
            equal("compact", topicConfig(admin, topic).get("cleanup.policy").value(), "cleanup.policy after SUBTRACT");
            alter(admin, r, new AlterConfigOp(new ConfigEntry("leader.replication.throttled.replicas", "0:0,1:0"),
                    AlterConfigOp.OpType.APPEND));
            equal("0:0,1:0", topicConfig(admin, topic).get("leader.replication.throttled.replicas").value(),
                    "APPEND to an empty list");

            expect(InvalidConfigurationException.class, admin.incrementalAlterConfigs(Map.of(r, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "100"), AlterConfigOp.OpType.APPEND)))).all(),
                    "APPEND to a config that is not a list");
            expect(InvalidConfigurationException.class, admin.incrementalAlterConfigs(Map.of(r, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET)))).all(),
                    "a value of the wrong type");
            expect(InvalidConfigurationException.class, admin.incrementalAlterConfigs(Map.of(r, List.of(
                    new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all(),
                    "an unknown config");
            ConfigResource none = new ConfigResource(ConfigResource.Type.TOPIC, unique("admin-none"));
            expect(UnknownTopicOrPartitionException.class, admin.describeConfigs(List.of(none)).values().get(none),
                    "describe an unknown topic's configs");
            expect(UnknownTopicOrPartitionException.class, admin.incrementalAlterConfigs(Map.of(none, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "1"), AlterConfigOp.OpType.SET)))).all(),
                    "alter an unknown topic's configs");
            admin.deleteTopics(List.of(topic)).all().get();
        }
    }

    public static void brokerConfigs(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            List<Node> nodes = new ArrayList<>(admin.describeCluster().nodes().get());
            for (Node n : nodes) {
                ConfigResource r = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(n.id()));
                Config c = admin.describeConfigs(List.of(r)).all().get().get(r);
                equal(String.valueOf(n.id()), c.get("broker.id").value(), "broker.id of " + n.id());
                check(c.get("broker.id").isReadOnly(), "broker.id is read-only");
                check(c.get("log.retention.hours") != null, "log.retention.hours is described");
            }
            ConfigResource r = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(nodes.get(0).id()));
            String name = "leader.replication.throttled.rate";
            alter(admin, r, new AlterConfigOp(new ConfigEntry(name, "1000000"), AlterConfigOp.OpType.SET));
            ConfigEntry e = admin.describeConfigs(List.of(r)).all().get().get(r).get(name);
            equal("1000000", e.value(), name + " after SET");
            equal(ConfigEntry.ConfigSource.DYNAMIC_BROKER_CONFIG, e.source(), "its source");
            alter(admin, r, new AlterConfigOp(new ConfigEntry(name, ""), AlterConfigOp.OpType.DELETE));
            e = admin.describeConfigs(List.of(r)).all().get().get(r).get(name);
            equal(ConfigEntry.ConfigSource.DEFAULT_CONFIG, e.source(), name + " source after DELETE");

            // cluster-wide default: the empty broker name
            ConfigResource all = new ConfigResource(ConfigResource.Type.BROKER, "");
            alter(admin, all, new AlterConfigOp(new ConfigEntry(name, "2000000"), AlterConfigOp.OpType.SET));
            // Another broker than the one asked learns of a cluster default through
            // ZooKeeper's notifications (Kafka's brokers likewise).
            eventually(() -> {
                ConfigEntry d = admin.describeConfigs(List.of(r)).all().get().get(r).get(name);
                return "2000000".equals(d.value())
                        && d.source() == ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG;
            }, name + " from the cluster default");
            alter(admin, all, new AlterConfigOp(new ConfigEntry(name, ""), AlterConfigOp.OpType.DELETE));

            expect(InvalidRequestException.class, admin.incrementalAlterConfigs(Map.of(r, List.of(
                    new AlterConfigOp(new ConfigEntry("broker.id", "77"), AlterConfigOp.OpType.SET)))).all(),
                    "a read-only broker config");
        }
    }

    // --- groups and offsets ---

    static Properties consumerProps(String bootstrap, String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        return p;
    }

    /** Consumes the records of a topic in a group and commits them; returns how many. */
    static int consumeAndCommit(KafkaConsumer<String, String> c, String topic, int expected) {
        c.subscribe(List.of(topic));
        int n = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (n < expected && System.nanoTime() < deadline) {
            ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
            n += records.count();
        }
        c.commitSync();
        return n;
    }

    public static void consumerGroups(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            String topic = unique("admin-groups");
            createTopic(admin, topic, 2, rf(admin));
            produce(bootstrap, topic, 0, List.of(1L, 2L, 3L));
            produce(bootstrap, topic, 1, List.of(4L));
            String group = unique("admin-group");
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerProps(bootstrap, group))) {
                equal(4, consumeAndCommit(c, topic, 4), "records consumed");

                GroupListing listed = admin.listGroups().all().get().stream()
                        .filter(g -> g.groupId().equals(group)).findFirst().orElse(null);
                check(listed != null, "listGroups names the group");
                equal(Optional.of(GroupType.CLASSIC), listed.type(), "its type");
                equal("consumer", listed.protocol(), "its protocol type");
                equal(Optional.of(GroupState.STABLE), listed.groupState(), "its state");

                Collection<GroupListing> stable = admin.listGroups(
                        ListGroupsOptions.forConsumerGroups().inGroupStates(Set.of(GroupState.STABLE))).all().get();
                check(stable.stream().anyMatch(g -> g.groupId().equals(group)), "in the STABLE filter");
                Collection<GroupListing> empty = admin.listGroups(
                        ListGroupsOptions.forConsumerGroups().inGroupStates(Set.of(GroupState.EMPTY))).all().get();
                check(empty.stream().noneMatch(g -> g.groupId().equals(group)), "not in the EMPTY filter");
                @SuppressWarnings("deprecation")
                Collection<ConsumerGroupListing> legacy = admin.listConsumerGroups(
                        new ListConsumerGroupsOptions().inGroupStates(Set.of(GroupState.STABLE))).all().get();
                check(legacy.stream().anyMatch(g -> g.groupId().equals(group)), "listConsumerGroups names it");

                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups()
                        .get(group).get();
                equal(GroupState.STABLE, d.groupState(), "described state");
                equal(GroupType.CLASSIC, d.type(), "described type");
                equal("range", d.partitionAssignor(), "the assignor");
                equal(1, d.members().size(), "members");
                equal(Set.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1)),
                        d.members().iterator().next().assignment().topicPartitions(), "the member's assignment");
                check(d.coordinator() != null && d.coordinator().id() >= 0, "a coordinator");
                check(!d.isSimpleConsumerGroup(), "not a simple group");

                expect(GroupNotEmptyException.class, admin.deleteConsumerGroups(List.of(group)).all(),
                        "delete a group with a member");
            }
            eventually(() -> {
                return admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get()
                        .groupState() == GroupState.EMPTY;
            }, "the group is empty once its member left");
            Collection<GroupListing> empty = admin.listGroups(
                    ListGroupsOptions.forConsumerGroups().inGroupStates(Set.of(GroupState.EMPTY))).all().get();
            check(empty.stream().anyMatch(g -> g.groupId().equals(group)), "in the EMPTY filter");

            Map<TopicPartition, OffsetAndMetadata> offsets =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            equal(3L, offsets.get(new TopicPartition(topic, 0)).offset(), "committed offset of partition 0");
            equal(1L, offsets.get(new TopicPartition(topic, 1)).offset(), "committed offset of partition 1");

            admin.deleteConsumerGroups(List.of(group)).all().get();
            expect(GroupIdNotFoundException.class, admin.deleteConsumerGroups(List.of(group)).all(),
                    "delete it again");
            ConsumerGroupDescription dead = admin.describeConsumerGroups(List.of(group)).describedGroups()
                    .get(group).get();
            equal(GroupState.DEAD, dead.groupState(), "a deleted group is described as DEAD");
            check(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().isEmpty(),
                    "no offsets left");
            admin.deleteTopics(List.of(topic)).all().get();
        }
    }

    public static void consumerGroupOffsets(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            String topic = unique("admin-offsets");
            createTopic(admin, topic, 2, rf(admin));
            produce(bootstrap, topic, 0, List.of(1L, 2L, 3L, 4L, 5L));
            String group = unique("admin-offsets-group");
            TopicPartition p0 = new TopicPartition(topic, 0);
            TopicPartition p1 = new TopicPartition(topic, 1);
            // An empty (never joined) group's offsets are set by the admin client.
            admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(2, "two"),
                    p1, new OffsetAndMetadata(0))).all().get();
            Map<TopicPartition, OffsetAndMetadata> got =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            equal(2L, got.get(p0).offset(), "offset of p0");
            equal("two", got.get(p0).metadata(), "metadata of p0");
            equal(0L, got.get(p1).offset(), "offset of p1");

            // Only the partitions asked for.
            Map<TopicPartition, OffsetAndMetadata> some = admin.listConsumerGroupOffsets(Map.of(group,
                    new ListConsumerGroupOffsetsSpec().topicPartitions(List.of(p1)))).partitionsToOffsetAndMetadata(group)
                    .get();
            equal(Set.of(p1), some.keySet(), "partitions listed");

            // A consumer of the group starts where the admin client put it.
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerProps(bootstrap, group))) {
                c.assign(List.of(p0));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
                ConsumerRecords<String, String> records = ConsumerRecords.empty();
                while (records.isEmpty() && System.nanoTime() < deadline) {
                    records = c.poll(Duration.ofMillis(200));
                }
                equal(2L, records.iterator().next().offset(), "first offset consumed");
            }

            admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all().get();
            got = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            check(!got.containsKey(p0) || got.get(p0) == null, "p0's offset deleted: " + got);
            equal(0L, got.get(p1).offset(), "p1's offset kept");

            expect(GroupIdNotFoundException.class,
                    admin.deleteConsumerGroupOffsets(unique("admin-none"), Set.of(p0)).all(),
                    "delete offsets of an unknown group");
            admin.deleteConsumerGroups(List.of(group)).all().get();
            admin.deleteTopics(List.of(topic)).all().get();
        }
    }

    public static void consumerGroupOffsetsOfActiveGroup(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            String topic = unique("admin-active");
            createTopic(admin, topic, 1, rf(admin));
            produce(bootstrap, topic, 0, List.of(1L, 2L));
            String group = unique("admin-active-group");
            TopicPartition p0 = new TopicPartition(topic, 0);
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerProps(bootstrap, group))) {
                consumeAndCommit(c, topic, 2);
                // Kafka refuses to move the offsets of a group with members (UNKNOWN_MEMBER_ID),
                // and to delete those of a partition the group consumes.
                Throwable t = failure(admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(0))).all());
                check(t instanceof org.apache.kafka.common.errors.UnknownMemberIdException,
                        "alter the offsets of an active group: " + t);
                expect(org.apache.kafka.common.errors.GroupSubscribedToTopicException.class,
                        admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all(),
                        "delete offsets of a subscribed topic");
            }
            admin.deleteConsumerGroups(List.of(group)).all().get();
            admin.deleteTopics(List.of(topic)).all().get();
        }
    }

    public static void listOffsets(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            String topic = unique("admin-list-offsets");
            createTopic(admin, topic, 1, rf(admin));
            TopicPartition p = new TopicPartition(topic, 0);
            Map<TopicPartition, ListOffsetsResultInfo> empty =
                    admin.listOffsets(Map.of(p, OffsetSpec.latest())).all().get();
            equal(0L, empty.get(p).offset(), "latest of an empty partition");
            long base = System.currentTimeMillis() - 100_000;
            // out of time order: the max timestamp is the second record
            produce(bootstrap, topic, 0, List.of(base, base + 5000, base + 1000, base + 3000));

            equal(0L, admin.listOffsets(Map.of(p, OffsetSpec.earliest())).all().get().get(p).offset(), "earliest");
            equal(4L, admin.listOffsets(Map.of(p, OffsetSpec.latest())).all().get().get(p).offset(), "latest");
            ListOffsetsResultInfo max = admin.listOffsets(Map.of(p, OffsetSpec.maxTimestamp())).all().get().get(p);
            equal(1L, max.offset(), "max-timestamp offset");
            equal(base + 5000, max.timestamp(), "max timestamp");
            ListOffsetsResultInfo at = admin.listOffsets(Map.of(p, OffsetSpec.forTimestamp(base + 2000))).all().get()
                    .get(p);
            equal(1L, at.offset(), "first offset with a timestamp at or after base+2000");
            equal(base + 5000, at.timestamp(), "its timestamp");
            ListOffsetsResultInfo after = admin.listOffsets(Map.of(p, OffsetSpec.forTimestamp(base + 9000))).all()
                    .get().get(p);
            equal(-1L, after.offset(), "no offset after the newest timestamp");
            ListOffsetsResultInfo first = admin.listOffsets(Map.of(p, OffsetSpec.forTimestamp(0))).all().get().get(p);
            equal(0L, first.offset(), "timestamp 0");
            // (A partition that does not exist in a topic that does is retried until the
            // call times out, by Kafka's client against Kafka too.)
            expect(UnknownTopicOrPartitionException.class,
                    admin.listOffsets(Map.of(new TopicPartition(unique("admin-none"), 0), OffsetSpec.latest())).all(),
                    "a topic that does not exist");
            admin.deleteTopics(List.of(topic)).all().get();
        }
    }

    // --- reassignment and elections ---

    public static void reassignPartitions(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            List<Integer> ids = admin.describeCluster().nodes().get().stream().map(Node::id).sorted()
                    .collect(Collectors.toList());
            String topic = unique("admin-reassign");
            TopicPartition p = new TopicPartition(topic, 0);
            if (ids.size() < 2) {
                createTopic(admin, topic, 1, (short) 1);
                int absent = ids.get(0) + 100;
                expect(InvalidReplicaAssignmentException.class, admin.alterPartitionReassignments(Map.of(p,
                        Optional.of(new NewPartitionReassignment(List.of(absent))))).all(),
                        "a reassignment to a broker that does not exist");
                equal(Map.of(), admin.listPartitionReassignments().reassignments().get(), "none in progress");
                admin.deleteTopics(List.of(topic)).all().get();
                return;
            }
            admin.createTopics(List.of(new NewTopic(topic, Map.of(0, List.of(ids.get(0)))))).all().get();
            awaitTopic(admin, topic, 1);
            produce(bootstrap, topic, 0, List.of(1L, 2L, 3L));
            List<Integer> target = List.of(ids.get(1), ids.get(2));
            admin.alterPartitionReassignments(Map.of(p, Optional.of(new NewPartitionReassignment(target)))).all().get();
            eventually(() -> {
                TopicPartitionInfo info = describe(admin, topic).partitions().get(0);
                List<Integer> replicas = info.replicas().stream().map(Node::id).collect(Collectors.toList());
                return replicas.equals(target) && info.isr().size() == 2
                        && admin.listPartitionReassignments().reassignments().get().isEmpty();
            }, "the partition moves to " + target);
            equal(ids.get(1), describe(admin, topic).partitions().get(0).leader().id(), "the new preferred leader");
            equal(3L, admin.listOffsets(Map.of(p, OffsetSpec.latest())).all().get().get(p).offset(),
                    "the records moved with it");

            expect(InvalidReplicaAssignmentException.class, admin.alterPartitionReassignments(Map.of(p,
                    Optional.of(new NewPartitionReassignment(List.of(ids.get(0), ids.get(0)))))).all(),
                    "a duplicate replica");
            expect(InvalidReplicaAssignmentException.class, admin.alterPartitionReassignments(Map.of(p,
                    Optional.of(new NewPartitionReassignment(List.of(ids.get(2) + 100))))).all(),
                    "a broker that does not exist");
            expect(UnknownTopicOrPartitionException.class, admin.alterPartitionReassignments(Map.of(
                    new TopicPartition(topic, 5), Optional.of(new NewPartitionReassignment(target)))).all(),
                    "a partition that does not exist");
            expect(org.apache.kafka.common.errors.NoReassignmentInProgressException.class,
                    admin.alterPartitionReassignments(Map.of(p, Optional.empty())).all(),
                    "cancel when none is in progress");
            admin.deleteTopics(List.of(topic)).all().get();
        }
    }

    /**
     * Partition 0 of the topic named by MOLDAU_TOPIC has lost its leader, its only ISR
     * member, while its other replica, behind, is live (tests/kafka sets this up with
     * kills): no preferred election can help, an unclean one elects the stale replica.
     */
    public static void uncleanElection(String bootstrap) throws Exception {
        String topic = System.getenv("MOLDAU_TOPIC");
        check(topic != null, "MOLDAU_TOPIC names the topic");
        TopicPartition p = new TopicPartition(topic, 0);
        try (Admin admin = admin(bootstrap)) {
            TopicPartitionInfo before = describe(admin, topic).partitions().get(0);
            check(before.leader() == null || before.leader().id() < 0, "no leader before: " + before);
            int stale = before.replicas().get(1).id();
            Map<TopicPartition, Optional<Throwable>> r =
                    admin.electLeaders(ElectionType.PREFERRED, Set.of(p)).partitions().get();
            check(r.get(p).isPresent()
                            && r.get(p).get() instanceof org.apache.kafka.common.errors.PreferredLeaderNotAvailableException,
                    "a preferred election with the preferred replica dead: " + r);
            r = admin.electLeaders(ElectionType.UNCLEAN, Set.of(p)).partitions().get();
            equal(Optional.empty(), r.get(p), "the unclean election's result");
            eventually(() -> {
                TopicPartitionInfo info = describe(admin, topic).partitions().get(0);
                return info.leader() != null && info.leader().id() == stale
                        && info.isr().stream().map(Node::id).collect(Collectors.toList()).equals(List.of(stale));
            }, "the stale replica " + stale + " leads, alone in the ISR");
            r = admin.electLeaders(ElectionType.UNCLEAN, Set.of(p)).partitions().get();
            check(r.get(p).isPresent() && r.get(p).get() instanceof ElectionNotNeededException,
                    "an unclean election of a partition with a leader: " + r);
        }
    }

    /** A reassignment held up by a replication throttle is listed, then cancelled. */
    public static void reassignmentInProgress(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            List<Integer> ids = admin.describeCluster().nodes().get().stream().map(Node::id).sorted()
                    .collect(Collectors.toList());
            if (ids.size() < 2) {
                return; // reassignPartitions checks the single broker's answer
            }
            String topic = unique("admin-throttled");
            TopicPartition p = new TopicPartition(topic, 0);
            int from = ids.get(0);
            int to = ids.get(1);
            admin.createTopics(List.of(new NewTopic(topic, Map.of(0, List.of(from))).configs(Map.of(
                    "leader.replication.throttled.replicas", "*",
                    "follower.replication.throttled.replicas", "*")))).all().get();
            awaitTopic(admin, topic, 1);
            // 1 B/s: the new replica takes one fetch (at most replica.fetch.max.bytes) and
            // then waits, far behind, so the reassignment stays in progress.
            for (int id : List.of(from, to)) {
                ConfigResource r = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(id));
                alter(admin, r,
                        new AlterConfigOp(new ConfigEntry("leader.replication.throttled.rate", "1"),
                                AlterConfigOp.OpType.SET),
                        new AlterConfigOp(new ConfigEntry("follower.replication.throttled.rate", "1"),
                                AlterConfigOp.OpType.SET));
            }
            try {
                Properties pp = new Properties();
                pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
                pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
                try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp,
                        new org.apache.kafka.common.serialization.ByteArraySerializer(),
                        new org.apache.kafka.common.serialization.ByteArraySerializer())) {
                    byte[] value = new byte[1024];
                    for (int i = 0; i < 3000; i++) {
                        producer.send(new ProducerRecord<>(topic, 0, null, value));
                    }
                    producer.flush();
                }
                admin.alterPartitionReassignments(Map.of(p, Optional.of(new NewPartitionReassignment(List.of(to)))))
                        .all().get();
                Map<TopicPartition, PartitionReassignment> listed =
                        admin.listPartitionReassignments().reassignments().get();
                PartitionReassignment r = listed.get(p);
                check(r != null, "the reassignment is listed: " + listed);
                equal(List.of(to, from), r.replicas(), "replicas while moving (target first, then the old)");
                equal(List.of(to), r.addingReplicas(), "adding");
                equal(List.of(from), r.removingReplicas(), "removing");
                Map<TopicPartition, PartitionReassignment> one =
                        admin.listPartitionReassignments(Set.of(p)).reassignments().get();
                equal(Set.of(p), one.keySet(), "listed by partition");
                equal(r.replicas(), one.get(p).replicas(), "the same replicas listed by partition");
                Thread.sleep(500);
                check(admin.listPartitionReassignments().reassignments().get().containsKey(p),
                        "still in progress under the throttle");

                admin.alterPartitionReassignments(Map.of(p, Optional.empty())).all().get();
                eventually(() -> {
                    List<Integer> replicas = describe(admin, topic).partitions().get(0).replicas().stream()
                            .map(Node::id).collect(Collectors.toList());
                    return replicas.equals(List.of(from))
                            && !admin.listPartitionReassignments().reassignments().get().containsKey(p);
                }, "the cancelled reassignment reverts to " + from);
            } finally {
                for (int id : List.of(from, to)) {
                    ConfigResource r = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(id));
                    alter(admin, r,
                            new AlterConfigOp(new ConfigEntry("leader.replication.throttled.rate", ""),
                                    AlterConfigOp.OpType.DELETE),
                            new AlterConfigOp(new ConfigEntry("follower.replication.throttled.rate", ""),
                                    AlterConfigOp.OpType.DELETE));
                }
                admin.deleteTopics(List.of(topic)).all().get();
            }
        }
    }

    public static void electLeaders(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            List<Integer> ids = admin.describeCluster().nodes().get().stream().map(Node::id).sorted()
                    .collect(Collectors.toList());
            String topic = unique("admin-elect");
            TopicPartition p = new TopicPartition(topic, 0);
            createTopic(admin, topic, 1, rf(admin));
            // The preferred replica leads already: nothing to elect.
            Map<TopicPartition, Optional<Throwable>> r = admin.electLeaders(ElectionType.PREFERRED, Set.of(p))
                    .partitions().get();
            check(r.get(p).isPresent() && r.get(p).get() instanceof ElectionNotNeededException,
                    "preferred election of a partition led by its preferred replica: " + r);
            r = admin.electLeaders(ElectionType.UNCLEAN, Set.of(p)).partitions().get();
            check(r.get(p).isPresent() && r.get(p).get() instanceof ElectionNotNeededException,
                    "unclean election of a partition with a leader: " + r);
            r = admin.electLeaders(ElectionType.PREFERRED, Set.of(new TopicPartition(topic, 3))).partitions().get();
            check(r.get(new TopicPartition(topic, 3)).isPresent()
                            && r.get(new TopicPartition(topic, 3)).get() instanceof UnknownTopicOrPartitionException,
                    "election of a partition that does not exist: " + r);
            if (ids.size() >= 3) {
                // Reorder the replicas: the first becomes preferred but does not lead until elected.
                List<Integer> replicas = describe(admin, topic).partitions().get(0).replicas().stream().map(Node::id)
                        .collect(Collectors.toList());
                List<Integer> reordered = List.of(replicas.get(1), replicas.get(0), replicas.get(2));
                admin.alterPartitionReassignments(Map.of(p, Optional.of(new NewPartitionReassignment(reordered))))
                        .all().get();
                eventually(() -> {
                    return describe(admin, topic).partitions().get(0).replicas().stream().map(Node::id)
                            .collect(Collectors.toList()).equals(reordered);
                }, "the replicas reordered");
                equal(replicas.get(0), describe(admin, topic).partitions().get(0).leader().id(),
                        "the old leader still leads");
                r = admin.electLeaders(ElectionType.PREFERRED, Set.of(p)).partitions().get();
                equal(Optional.empty(), r.get(p), "preferred election result");
                eventually(() -> {
                    return describe(admin, topic).partitions().get(0).leader().id() == reordered.get(0);
                }, "the preferred replica leads");
                // electLeaders with no partitions: every partition that needs it (none now)
                Map<TopicPartition, Optional<Throwable>> all = admin.electLeaders(ElectionType.PREFERRED, null)
                        .partitions().get();
                check(!all.containsKey(p), "an election of all partitions leaves the elected one out: " + all);
            }
            admin.deleteTopics(List.of(topic)).all().get();
        }
    }
}
