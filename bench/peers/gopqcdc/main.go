// Command gopqcdc-peer is the go-pq-cdc-kafka peer of bench/peers: it relays
// public.events_outbox with github.com/Trendyol/go-pq-cdc-kafka, configured
// as that project's production tutorial shows (an existing pgoutput slot and
// publication, producerBatchTickerDuration 200 ms, every other setting its
// default), and a handler of ours that turns each outbox INSERT into the
// record outbox-relay's defaults produce: topic the prefix of `type`
// (order.created -> order), key `aggregate_id`, header `event_id`, value the
// payload.
//
//	gopqcdc-peer -port 5432 -slot S -publication outbox_relay -brokers 127.0.0.1:9092
//
// go-pq-cdc-kafka hands the handler each row decoded by pgx: the payload
// (jsonb) as a Go value, re-encoded here with encoding/json as any user of
// the library would. It acknowledges the slot once a batch's write to Kafka
// has returned without error. SIGTERM or SIGINT closes the connector (its
// last batch flushed) and exits 0.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	cdc "github.com/Trendyol/go-pq-cdc-kafka"
	"github.com/Trendyol/go-pq-cdc-kafka/config"
	cdcconfig "github.com/Trendyol/go-pq-cdc/config"
	"github.com/Trendyol/go-pq-cdc/pq/publication"
	"github.com/Trendyol/go-pq-cdc/pq/slot"
	gokafka "github.com/segmentio/kafka-go"
)

func main() {
	host := flag.String("host", "127.0.0.1", "PostgreSQL host")
	port := flag.Int("port", 5432, "PostgreSQL port")
	user := flag.String("user", "postgres", "PostgreSQL user")
	password := flag.String("password", "", "PostgreSQL password")
	db := flag.String("db", "postgres", "database")
	slotName := flag.String("slot", "", "an existing pgoutput slot")
	pub := flag.String("publication", "outbox_relay", "an existing publication of public.events_outbox")
	brokers := flag.String("brokers", "", "Kafka bootstrap servers, comma-separated")
	metricPort := flag.Int("metric-port", 0, "the connector's HTTP port (/metrics, /status)")
	ticker := flag.Duration("ticker", 200*time.Millisecond, "producerBatchTickerDuration")
	flag.Parse()
	if *slotName == "" || *brokers == "" || *metricPort == 0 {
		fmt.Fprintln(os.Stderr, "gopqcdc-peer: -slot, -brokers and -metric-port are required")
		os.Exit(2)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))

	cfg := config.Connector{
		CDC: cdcconfig.Config{
			Host:     *host,
			Port:     *port,
			Username: *user,
			Password: *password,
			Database: *db,
			Publication: publication.Config{
				Name: *pub,
			},
			Slot: slot.Config{
				Name:                        *slotName,
				SlotActivityCheckerInterval: 3000,
			},
			Metric: cdcconfig.MetricConfig{Port: *metricPort},
			Logger: cdcconfig.LoggerConfig{LogLevel: slog.LevelWarn},
		},
		Kafka: config.Kafka{
			TableTopicMapping:           map[string]string{"public.events_outbox": "outbox"},
			Brokers:                     strings.Split(*brokers, ","),
			ProducerBatchTickerDuration: *ticker,
		},
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	connector, err := cdc.NewConnector(ctx, cfg, handler)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gopqcdc-peer: slot %s: %v\n", *slotName, err)
		os.Exit(1)
	}
	go func() {
		<-ctx.Done()
		connector.Close()
		os.Exit(0)
	}()
	// Start blocks until a signal, or returns early on an error it has
	// logged (a slot that cannot be had, a lost connection).
	connector.Start(ctx)
	select {
	case <-ctx.Done():
		select {} // the goroutine above closes the connector and exits
	case <-time.After(2 * time.Second):
		fmt.Fprintf(os.Stderr, "gopqcdc-peer: slot %s: the connector stopped without a signal "+
			"(its log above says why)\n", *slotName)
		os.Exit(1)
	}
}

// handler maps one outbox INSERT to one record; anything else to none.
func handler(msg *cdc.Message) []gokafka.Message {
	if !msg.Type.IsInsert() {
		return nil
	}
	row := msg.NewData
	id, ok := row["id"].(int64)
	if !ok {
		fmt.Fprintf(os.Stderr, "gopqcdc-peer: outbox row without an int8 id: %v\n", row["id"])
		os.Exit(1)
	}
	typ, _ := row["type"].(string)
	topic := typ
	if i := strings.IndexByte(typ, '.'); i >= 0 {
		topic = typ[:i]
	}
	value, err := json.Marshal(row["payload"])
	if err != nil {
		fmt.Fprintf(os.Stderr, "gopqcdc-peer: event %d: payload: %v\n", id, err)
		os.Exit(1)
	}
	return []gokafka.Message{{
		Topic:   topic,
		Key:     uuidText(row["aggregate_id"]),
		Value:   value,
		Headers: []gokafka.Header{{Key: "event_id", Value: []byte(strconv.FormatInt(id, 10))}},
	}}
}

// uuidText is the canonical text of a uuid column as pgx decodes it.
func uuidText(v any) []byte {
	switch u := v.(type) {
	case [16]byte:
		h := hex.EncodeToString(u[:])
		return []byte(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:])
	case string:
		return []byte(u)
	case nil:
		return nil
	default:
		return []byte(fmt.Sprint(u))
	}
}
