// Tries a broker with sarama 1.22 (Debian bookworm's golang-github-shopify-sarama-dev)
// speaking the protocol of the Kafka version given ("default": sarama's own, 0.8.2):
// topic admin (0.10.1 and later), 20 records produced with acks=all and snappy, then
// consumed (in a consumer group from 0.10.2, else partition by partition) with their
// offsets committed, and the committed offsets read back. Exits non-zero on failure.
//
// Usage: main BOOTSTRAP TOPIC VERSION (see scripts/try-sarama.sh)
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

type handler struct {
	want int
	got  int
	done chan struct{}
	once sync.Once
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		s.MarkMessage(m, "")
		h.got++
		if h.got == h.want {
			h.once.Do(func() { close(h.done) })
		}
	}
	return nil
}

func must(err error, what string) {
	if err != nil {
		fmt.Println("FAIL", what, err)
		os.Exit(1)
	}
}

func main() {
	addrs := []string{os.Args[1]}
	topic := os.Args[2]
	config := sarama.NewConfig()
	if os.Args[3] != "default" {
		v, err := sarama.ParseKafkaVersion(os.Args[3])
		must(err, "version")
		config.Version = v
	}
	fmt.Println("sarama with Kafka version", config.Version)
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	config.Producer.Compression = sarama.CompressionSnappy
	config.Consumer.Offsets.Initial = sarama.OffsetOldest

	if config.Version.IsAtLeast(sarama.V0_10_1_0) {
		admin, err := sarama.NewClusterAdmin(addrs, config)
		must(err, "admin")
		must(admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, false), "create topic")
		admin.Close()
	}
	producer, err := sarama.NewSyncProducer(addrs, config)
	must(err, "producer")
	for i := 0; i < 20; i++ {
		_, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("k%d", i)), Value: sarama.StringEncoder(fmt.Sprintf("v%d", i))})
		must(err, "produce")
	}
	producer.Close()
	fmt.Println("produced 20")

	client, err := sarama.NewClient(addrs, config)
	must(err, "client")
	parts, err := client.Partitions(topic)
	must(err, "partitions")
	if config.Version.IsAtLeast(sarama.V0_10_2_0) {
		group, err := sarama.NewConsumerGroup(addrs, "g-"+topic, config)
		must(err, "group")
		h := &handler{want: 20, done: make(chan struct{})}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		go func() {
			for ctx.Err() == nil {
				group.Consume(ctx, []string{topic}, h)
			}
		}()
		select {
		case <-h.done:
		case <-ctx.Done():
			must(fmt.Errorf("got %d of 20", h.got), "consume in group")
		}
		cancel()
		must(group.Close(), "group close") // commits the marked offsets
		fmt.Println("consumed 20 in a group")
	} else {
		consumer, err := sarama.NewConsumerFromClient(client)
		must(err, "consumer")
		om, err := sarama.NewOffsetManagerFromClient("g-"+topic, client)
		must(err, "offset manager")
		total := 0
		for _, p := range parts {
			pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
			must(err, "consume partition")
			pom, err := om.ManagePartition(topic, p)
			must(err, "manage partition")
			for total < 20 {
				m := <-pc.Messages()
				pom.MarkOffset(m.Offset+1, "")
				total++
				if m.Offset+1 >= pc.HighWaterMarkOffset() && pc.HighWaterMarkOffset() > 0 {
					break
				}
			}
			pom.Close()
			pc.Close()
		}
		om.Close()
		fmt.Println("consumed", total, "and committed")
	}
	om, err := sarama.NewOffsetManagerFromClient("g-"+topic, client)
	must(err, "offset manager")
	sum := int64(0)
	for _, p := range parts {
		pom, err := om.ManagePartition(topic, p)
		must(err, "manage partition")
		off, _ := pom.NextOffset()
		sum += off
		pom.Close()
	}
	fmt.Println("committed offsets sum", sum)
	client.Close()
	if sum != 20 {
		os.Exit(1)
	}
}
