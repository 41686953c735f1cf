package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/strata-log/strata/client"
)

// Produce a keyed record and read its partition from the start.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Brokers: []string{"localhost:9092"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	p, err := c.NewProducer(client.ProducerConfig{Compression: client.CompressionZstd})
	if err != nil {
		log.Fatal(err)
	}
	rec, err := p.ProduceSync(ctx, client.NewRecord("events", []byte("user-1"), []byte("hello")))
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}

	cons, err := c.NewConsumer(client.ConsumerConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer cons.Close()
	tp := client.TopicPartition{Topic: "events", Partition: rec.Partition}
	if err := cons.Assign(ctx, map[client.TopicPartition]client.Offset{tp: client.OffsetEarliest()}); err != nil {
		log.Fatal(err)
	}
	recs, err := cons.Poll(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range recs {
		fmt.Printf("%s@%d: %s=%s\n", tp, r.Offset, r.Key, r.Value)
	}
}

// Asynchronous produce with a callback per record.
func ExampleProducer_Produce() {
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Brokers: []string{"localhost:9092"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(client.ProducerConfig{Linger: 10 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	for i := range 100 {
		r := client.NewRecord("events", nil, fmt.Appendf(nil, "event %d", i))
		err := p.Produce(ctx, r, func(r *client.Record, err error) {
			if err != nil {
				log.Printf("record %s lost: %v", r.Value, err)
			}
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		log.Fatal(err)
	}
}
