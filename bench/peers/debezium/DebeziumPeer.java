/*
 * DebeziumPeer.java — the Debezium peer of bench/peers/run.sh: Debezium's
 * embedded engine with the PostgreSQL connector and the outbox event router
 * SMT, producing the router's output to Kafka with a KafkaProducer of ours
 * (acks=all, idempotence on) and marking a batch's records processed (so
 * the engine may commit their offsets and confirm the slot) only after
 * Kafka acknowledged every one of them.
 *
 *   java -cp "$LIB/*:$CLASSES" DebeziumPeer PROPERTIES_FILE BOOTSTRAP
 *
 * PROPERTIES_FILE holds the engine's and connector's settings (run.sh
 * writes them: plugin.name=pgoutput, the publication and slot made before
 * the backlog, table.include.list, the EventRouter with our column names).
 * Everything else is the engine's, the connector's and the producer's
 * defaults. Runs until SIGTERM; exits 1 when the engine stops with an error
 * or a send fails.
 */

import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;
import java.io.FileReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.source.SourceRecord;

public final class DebeziumPeer {
    private static byte[] bytes(Object o) {
        if (o == null) {
            return null;
        }
        if (o instanceof byte[] b) {
            return b;
        }
        return o.toString().getBytes(StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: DebeziumPeer PROPERTIES_FILE BOOTSTRAP");
            System.exit(2);
        }
        Properties props = new Properties();
        try (FileReader r = new FileReader(args[0], StandardCharsets.UTF_8)) {
            props.load(r);
        }
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp);

        CountDownLatch done = new CountDownLatch(1);
        int[] status = {0};
        DebeziumEngine<RecordChangeEvent<SourceRecord>> engine =
            DebeziumEngine.create(ChangeEventFormat.of(Connect.class))
                .using(props)
                .notifying((records, committer) -> {
                    List<Future<RecordMetadata>> acks = new ArrayList<>(records.size());
                    for (RecordChangeEvent<SourceRecord> ev : records) {
                        SourceRecord sr = ev.record();
                        if (sr == null || sr.topic() == null || sr.value() == null) {
                            continue; // the router drops what is not an outbox insert
                        }
                        RecordHeaders hs = new RecordHeaders();
                        for (Header h : sr.headers()) {
                            hs.add(h.key(), bytes(h.value()));
                        }
                        acks.add(producer.send(new ProducerRecord<>(sr.topic(), null, null,
                            bytes(sr.key()), bytes(sr.value()), hs)));
                    }
                    producer.flush();
                    for (Future<RecordMetadata> f : acks) {
                        try {
                            f.get();
                        } catch (Exception e) {
                            throw new InterruptedException("send failed: " + e);
                        }
                    }
                    for (RecordChangeEvent<SourceRecord> ev : records) {
                        committer.markProcessed(ev);
                    }
                    committer.markBatchFinished();
                })
                .using((success, message, error) -> {
                    if (!success) {
                        System.err.println("DebeziumPeer: engine stopped: " + message
                            + (error != null ? ": " + error : ""));
                        status[0] = 1;
                    }
                    done.countDown();
                })
                .build();

        ExecutorService exec = Executors.newSingleThreadExecutor();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                engine.close();
                done.await();
                producer.close();
            } catch (Exception e) {
                System.err.println("DebeziumPeer: close: " + e);
            }
        }));
        exec.execute(engine);
        done.await();
        exec.shutdown();
        System.exit(status[0]);
    }
}
