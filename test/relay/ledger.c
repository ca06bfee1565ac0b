/*
 * The relay fault test's consumer (test/relay/run.sh): it sets up the
 * broker's side of the relay (what the relay publishes to and does not
 * declare itself) and records every delivery in a ledger file, one line per
 * delivery, written and flushed before the ack, so a delivery the broker
 * counts as consumed is always in the ledger (a crash of the broker between
 * the line and the ack gives a redelivery: a duplicate line, never a gap).
 *
 *   ledger amqp-setup PORTS EXCHANGE QUEUE [quorum|holds-one|unbound]
 *       durable topic EXCHANGE, durable QUEUE bound to it with "#"; with
 *       "quorum" a quorum queue (x-queue-type), replicated over the
 *       cluster's nodes (declare it once they have all joined); with
 *       "holds-one" a queue that takes one message and nacks the publishes
 *       beyond it (x-max-length 1, x-overflow reject-publish); with
 *       "unbound" the exchange and the queue without a binding (a message
 *       published to EXCHANGE with mandatory set comes back: 312 NO_ROUTE)
 *   ledger amqp-bind PORTS EXCHANGE QUEUE KEY
 *   ledger amqp-exchange PORTS EXCHANGE TYPE
 *       a durable EXCHANGE of that TYPE (fanout, direct...), nothing bound
 *       binds QUEUE to EXCHANGE with the binding key KEY
 *   ledger amqp PORTS QUEUE FILE [PREFETCH]
 *       consumes QUEUE (manual acks, PREFETCH unacked at most, default 200)
 *       into FILE until SIGTERM
 *   ledger nats-setup PORT STREAM SUBJECT CONSUMER
 *       file-stored STREAM on SUBJECT, duplicate window 2 minutes, and a
 *       durable pull CONSUMER (explicit acks, one unacked message at a time:
 *       see nats_setup)
 *   ledger nats PORT STREAM CONSUMER SUBJECT FILE
 *       consumes CONSUMER into FILE until SIGTERM
 *
 * A ledger line, tab-separated:
 *   receive time (ms since the epoch), message id, pgq-group-key,
 *   pgq-attempt, pgq-job-id, pgq-topic, redelivered (0/1), stream sequence
 *   (NATS; 0 for AMQP), routing key (AMQP) or subject (NATS), pgq-event-id,
 *   pgq-stream, pgq-stream-event-id, pgq-appended-at (the last three: a
 *   message of pgq-relay --stream), traceparent, tracestate (a traced job's
 *   or event's W3C trace context), body
 * (a header that is not there is written as "-"; a tab or newline inside a
 * field as a space: bodies are JSON text on one line anyway).
 *
 * PORTS: one AMQP port on 127.0.0.1, or a cluster's nodes' ports separated
 * by commas (25800,25810,25820): a connection goes to the node of the last
 * one, else to the others in turn.
 *
 * NATS over TLS (the relay's TLS tests, issue 31): with LEDGER_NATS_TLS_DIR
 * set to a directory of test/relay/make_certs.sh, the NATS commands connect
 * to tls://localhost:PORT, trusting its ca.pem and presenting client.pem.
 *
 * The consumers outlive a broker's kill -9, restart and SIGSTOP: AMQP by
 * reconnecting in a loop (to another node of a cluster when its node is
 * gone), NATS by the client's own endless reconnect.
 * Built by run.sh and cluster.sh: cc -O2 -o ledger ledger.c -lrabbitmq -lnats
 */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <nats/nats.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stopping;
static void on_term(int sig) {
  (void)sig;
  stopping = 1;
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void say(const char *what) {
  fprintf(stderr, "ledger: %s\n", what);
  fflush(stderr);
}

static int fail(const char *what) {
  say(what);
  return 1;
}

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A field as one token of a tab-separated line. */
static void put_field(FILE *f, const void *bytes, size_t len) {
  const char *p = bytes;
  for (size_t i = 0; i < len; i++)
    fputc(p[i] == '\t' || p[i] == '\n' || p[i] == '\r' ? ' ' : p[i], f);
}

static void put_str(FILE *f, const char *s) {
  if (!s || !*s) s = "-";
  put_field(f, s, strlen(s));
  fputc('\t', f);
}

/* ---------------------------------------------------------------- AMQP */

static int amqp_ok(amqp_rpc_reply_t r) { return r.reply_type == AMQP_RESPONSE_NORMAL; }

/* A cluster's nodes: "25800,25810,25820" (or one port). */
#define MAX_NODES 8
struct nodes {
  int port[MAX_NODES];
  int count;
  int current; /* the node of the last connection: tried first */
};

static int parse_nodes(const char *text, struct nodes *n) {
  memset(n, 0, sizeof *n);
  for (const char *p = text; *p && n->count < MAX_NODES;) {
    char *end;
    long port = strtol(p, &end, 10);
    if (end == p || port <= 0 || port > 65535 || (*end && *end != ',')) return 0;
    n->port[n->count++] = (int)port;
    p = *end ? end + 1 : end;
  }
  return n->count > 0;
}

static amqp_connection_state_t amqp_open(int port) {
  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t *sock = amqp_tcp_socket_new(conn);
  struct timeval tv = {5, 0};
  /* Heartbeat 0: a SIGSTOPped broker must look like a slow one, not a dead
   * one (the socket stays open; we wait for it). */
  if (!sock || amqp_socket_open_noblock(sock, "127.0.0.1", port, &tv) != AMQP_STATUS_OK ||
      !amqp_ok(amqp_login(conn, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest"))) {
    amqp_destroy_connection(conn);
    return NULL;
  }
  amqp_channel_open(conn, 1);
  if (!amqp_ok(amqp_get_rpc_reply(conn))) {
    amqp_destroy_connection(conn);
    return NULL;
  }
  return conn;
}

/* The current node, else the others in turn; NULL when none answers. */
static amqp_connection_state_t amqp_open_any(struct nodes *n) {
  for (int tried = 0; tried < n->count; tried++) {
    amqp_connection_state_t conn = amqp_open(n->port[n->current]);
    if (conn) return conn;
    n->current = (n->current + 1) % n->count;
  }
  return NULL;
}

static int amqp_bind(struct nodes *n, const char *exchange, const char *queue, const char *key) {
  amqp_connection_state_t conn = amqp_open_any(n);
  if (!conn) return fail("cannot connect to RabbitMQ");
  amqp_queue_bind(conn, 1, amqp_cstring_bytes(queue), amqp_cstring_bytes(exchange),
                  amqp_cstring_bytes(key), amqp_empty_table);
  if (!amqp_ok(amqp_get_rpc_reply(conn))) return fail("queue.bind failed");
  amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
  amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(conn);
  return 0;
}

static int amqp_exchange(struct nodes *n, const char *exchange, const char *type) {
  amqp_connection_state_t conn = amqp_open_any(n);
  if (!conn) return fail("cannot connect to RabbitMQ");
  amqp_exchange_declare(conn, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes(type), 0, 1, 0,
                        0, amqp_empty_table);
  if (!amqp_ok(amqp_get_rpc_reply(conn))) return fail("exchange.declare failed");
  amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
  amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(conn);
  return 0;
}

static int amqp_setup(struct nodes *n, const char *exchange, const char *queue, const char *kind) {
  amqp_connection_state_t conn = amqp_open_any(n);
  if (!conn) return fail("cannot connect to RabbitMQ");
  amqp_exchange_declare(conn, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes("topic"), 0, 1, 0,
                        0, amqp_empty_table);
  if (!amqp_ok(amqp_get_rpc_reply(conn))) return fail("exchange.declare failed");
  amqp_table_entry_t entries[2];
  amqp_table_t args = {0, entries};
  if (!strcmp(kind, "quorum")) {
    entries[0].key = amqp_cstring_bytes("x-queue-type");
    entries[0].value.kind = AMQP_FIELD_KIND_UTF8;
    entries[0].value.value.bytes = amqp_cstring_bytes("quorum");
    args.num_entries = 1;
  } else if (!strcmp(kind, "holds-one")) {
    entries[0].key = amqp_cstring_bytes("x-max-length");
    entries[0].value.kind = AMQP_FIELD_KIND_I32;
    entries[0].value.value.i32 = 1;
    entries[1].key = amqp_cstring_bytes("x-overflow");
    entries[1].value.kind = AMQP_FIELD_KIND_UTF8;
    entries[1].value.value.bytes = amqp_cstring_bytes("reject-publish");
    args.num_entries = 2;
  }
  amqp_queue_declare(conn, 1, amqp_cstring_bytes(queue), 0, 1, 0, 0, args);
  if (!amqp_ok(amqp_get_rpc_reply(conn))) return fail("queue.declare failed");
  amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
  amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(conn);
  return strcmp(kind, "unbound") ? amqp_bind(n, exchange, queue, "#") : 0;
}

static const char *amqp_header(const amqp_basic_properties_t *p, const char *key, char *buf,
                               size_t size) {
  buf[0] = '\0';
  if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG)) return buf;
  for (int i = 0; i < p->headers.num_entries; i++) {
    const amqp_table_entry_t *e = &p->headers.entries[i];
    if (e->key.len != strlen(key) || memcmp(e->key.bytes, key, e->key.len) != 0) continue;
    if (e->value.kind == AMQP_FIELD_KIND_UTF8 || e->value.kind == AMQP_FIELD_KIND_BYTES) {
      size_t n = e->value.value.bytes.len < size - 1 ? e->value.value.bytes.len : size - 1;
      memcpy(buf, e->value.value.bytes.bytes, n);
      buf[n] = '\0';
    } else if (e->value.kind == AMQP_FIELD_KIND_I64) {
      snprintf(buf, size, "%lld", (long long)e->value.value.i64);
    } else if (e->value.kind == AMQP_FIELD_KIND_I32) {
      snprintf(buf, size, "%d", e->value.value.i32);
    } else {
      snprintf(buf, size, "?kind=%c", e->value.kind);
    }
    break;
  }
  return buf;
}

static void amqp_record(FILE *f, const amqp_envelope_t *env) {
  const amqp_basic_properties_t *p = &env->message.properties;
  char id[600] = "", group[600], attempt[64], job[64], topic[600], event[64], stream[600],
       stream_event[64], appended[64], traceparent[64], tracestate[600];
  if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) {
    size_t n = p->message_id.len < sizeof id - 1 ? p->message_id.len : sizeof id - 1;
    memcpy(id, p->message_id.bytes, n);
    id[n] = '\0';
  }
  fprintf(f, "%lld\t", now_ms());
  put_str(f, id);
  put_str(f, amqp_header(p, "pgq-group-key", group, sizeof group));
  put_str(f, amqp_header(p, "pgq-attempt", attempt, sizeof attempt));
  put_str(f, amqp_header(p, "pgq-job-id", job, sizeof job));
  put_str(f, amqp_header(p, "pgq-topic", topic, sizeof topic));
  fprintf(f, "%d\t0\t", env->redelivered ? 1 : 0);
  put_field(f, env->routing_key.bytes, env->routing_key.len);
  fputc('\t', f);
  put_str(f, amqp_header(p, "pgq-event-id", event, sizeof event));
  put_str(f, amqp_header(p, "pgq-stream", stream, sizeof stream));
  put_str(f, amqp_header(p, "pgq-stream-event-id", stream_event, sizeof stream_event));
  put_str(f, amqp_header(p, "pgq-appended-at", appended, sizeof appended));
  put_str(f, amqp_header(p, "traceparent", traceparent, sizeof traceparent));
  put_str(f, amqp_header(p, "tracestate", tracestate, sizeof tracestate));
  put_field(f, env->message.body.bytes, env->message.body.len);
  fputc('\n', f);
}

static int amqp_consume(struct nodes *n, const char *queue, int prefetch, FILE *f) {
  long long deliveries = 0;
  int connects = 0;
  char line[80];
  while (!stopping) {
    amqp_connection_state_t conn = amqp_open_any(n);
    if (!conn) {
      nap_ms(300);
      continue;
    }
    amqp_basic_qos(conn, 1, 0, (uint16_t)prefetch, 0);
    amqp_basic_consume(conn, 1, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 0, 0,
                       amqp_empty_table);
    if (!amqp_ok(amqp_get_rpc_reply(conn))) {
      amqp_destroy_connection(conn);
      nap_ms(300);
      continue;
    }
    snprintf(line, sizeof line, "%s RabbitMQ 127.0.0.1:%d",
             connects++ > 0 ? "reconnected to" : "connected to", n->port[n->current]);
    say(line);
    while (!stopping) {
      amqp_envelope_t env;
      struct timeval tv = {0, 300000}; /* wake up to see SIGTERM */
      amqp_maybe_release_buffers(conn);
      amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
      if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
        continue;
      if (r.reply_type != AMQP_RESPONSE_NORMAL)
        break; /* closed, reset, or a close from the broker */
      amqp_record(f, &env);
      fflush(f);
      deliveries++;
      int acked = amqp_basic_ack(conn, 1, env.delivery_tag, 0);
      amqp_destroy_envelope(&env);
      if (acked != AMQP_STATUS_OK) break;
    }
    amqp_destroy_connection(conn);
    if (!stopping) {
      snprintf(line, sizeof line, "lost RabbitMQ 127.0.0.1:%d; reconnecting", n->port[n->current]);
      say(line);
    }
  }
  fprintf(stderr, "ledger: stopped after %lld deliveries\n", deliveries);
  return 0;
}

/* ---------------------------------------------------------------- NATS */

static void nats_on_event(natsConnection *nc, void *closure) {
  (void)nc;
  say((const char *)closure);
}

static jsCtx *nats_open(int port, natsConnection **nc, int forever) {
  char url[64];
  natsOptions *o = NULL;
  jsCtx *js = NULL;
  const char *tls = getenv("LEDGER_NATS_TLS_DIR");
  snprintf(url, sizeof url, "%s://%s:%d", tls ? "tls" : "nats", tls ? "localhost" : "127.0.0.1",
           port);
  if (natsOptions_Create(&o) != NATS_OK || natsOptions_SetURL(o, url) != NATS_OK) return NULL;
  if (tls) {
    char ca[512], cert[512], key[512];
    snprintf(ca, sizeof ca, "%s/ca.pem", tls);
    snprintf(cert, sizeof cert, "%s/client.pem", tls);
    snprintf(key, sizeof key, "%s/client.key", tls);
    if (natsOptions_SetSecure(o, true) != NATS_OK ||
        natsOptions_LoadCATrustedCertificates(o, ca) != NATS_OK ||
        natsOptions_LoadCertificatesChain(o, cert, key) != NATS_OK) {
      say(nats_GetLastError(NULL));
      return NULL;
    }
  }
  if (forever) {
    natsOptions_SetMaxReconnect(o, -1);
    natsOptions_SetReconnectWait(o, 200);
    natsOptions_SetDisconnectedCB(o, nats_on_event, "lost NATS");
    natsOptions_SetReconnectedCB(o, nats_on_event, "reconnected to NATS");
  }
  natsStatus s = natsConnection_Connect(nc, o);
  natsOptions_Destroy(o);
  if (s != NATS_OK || natsConnection_JetStream(&js, *nc, NULL) != NATS_OK) return NULL;
  return js;
}

static int nats_setup(int port, const char *stream, const char *subject, const char *consumer) {
  natsConnection *nc = NULL;
  jsCtx *js = nats_open(port, &nc, 0);
  if (!js) return fail("cannot connect to NATS JetStream");
  jsStreamConfig sc;
  jsStreamConfig_Init(&sc);
  const char *subjects[1] = {subject};
  sc.Name = stream;
  sc.Subjects = subjects;
  sc.SubjectsLen = 1;
  sc.Storage = js_FileStorage;
  sc.Duplicates = 120LL * 1000000000LL; /* the window in which a message id is deduplicated */
  jsErrCode jerr = 0;
  if (js_AddStream(NULL, js, &sc, NULL, &jerr) != NATS_OK) return fail(nats_GetLastError(NULL));
  jsConsumerConfig cc;
  jsConsumerConfig_Init(&cc);
  cc.Durable = consumer;
  cc.AckPolicy = js_AckExplicit;
  cc.DeliverPolicy = js_DeliverAll;
  /* One unacked message at a time: a message whose delivery was lost with a
   * broker crash is redelivered before any later one, so the ledger's order
   * is the stream's (with more in flight, a lost delivery would come back
   * after its key's next event: a reordering of our making, not the
   * relay's). AckWait bounds how late that redelivery comes. */
  cc.MaxAckPending = 1;
  cc.AckWait = 2LL * 1000000000LL;
  if (js_AddConsumer(NULL, js, stream, &cc, NULL, &jerr) != NATS_OK)
    return fail(nats_GetLastError(NULL));
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return 0;
}

static void nats_record(FILE *f, natsMsg *m) {
  const char *id = NULL, *group = NULL, *attempt = NULL, *job = NULL, *topic = NULL;
  const char *event = NULL, *stream = NULL, *stream_event = NULL, *appended = NULL;
  const char *traceparent = NULL, *tracestate = NULL;
  jsMsgMetaData *meta = NULL;
  natsMsgHeader_Get(m, "Nats-Msg-Id", &id);
  natsMsgHeader_Get(m, "pgq-group-key", &group);
  natsMsgHeader_Get(m, "pgq-attempt", &attempt);
  natsMsgHeader_Get(m, "pgq-job-id", &job);
  natsMsgHeader_Get(m, "pgq-topic", &topic);
  natsMsgHeader_Get(m, "pgq-event-id", &event);
  natsMsgHeader_Get(m, "pgq-stream", &stream);
  natsMsgHeader_Get(m, "pgq-stream-event-id", &stream_event);
  natsMsgHeader_Get(m, "pgq-appended-at", &appended);
  natsMsgHeader_Get(m, "traceparent", &traceparent);
  natsMsgHeader_Get(m, "tracestate", &tracestate);
  natsMsg_GetMetaData(&meta, m);
  fprintf(f, "%lld\t", now_ms());
  put_str(f, id);
  put_str(f, group);
  put_str(f, attempt);
  put_str(f, job);
  put_str(f, topic);
  fprintf(f, "%d\t%llu\t", meta && meta->NumDelivered > 1 ? 1 : 0,
          meta ? (unsigned long long)meta->Sequence.Stream : 0ULL);
  put_str(f, natsMsg_GetSubject(m));
  put_str(f, event);
  put_str(f, stream);
  put_str(f, stream_event);
  put_str(f, appended);
  put_str(f, traceparent);
  put_str(f, tracestate);
  put_field(f, natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m));
  fputc('\n', f);
  jsMsgMetaData_Destroy(meta);
}

static int nats_consume(int port, const char *stream, const char *consumer, const char *subject,
                        FILE *f) {
  natsConnection *nc = NULL;
  natsSubscription *sub = NULL;
  jsCtx *js = NULL;
  long long deliveries = 0;
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream;
  so.Consumer = consumer;
  /* The first connect may meet a broker that is down: try until it is up. */
  while (!stopping && !(js = nats_open(port, &nc, 1))) {
    natsConnection_Destroy(nc);
    nc = NULL;
    nap_ms(300);
  }
  while (!stopping && js_PullSubscribe(&sub, js, subject, consumer, NULL, &so, NULL) != NATS_OK)
    nap_ms(300);
  while (!stopping) {
    natsMsgList list = {0};
    jsErrCode jerr = 0;
    natsStatus s = natsSubscription_Fetch(&list, sub, 1, 300, &jerr);
    if (s != NATS_OK) {
      /* Time-out, or a broker away (the client reconnects on its own). */
      if (s != NATS_TIMEOUT) nap_ms(100);
      continue;
    }
    for (int i = 0; i < list.Count; i++) {
      nats_record(f, list.Msgs[i]);
      fflush(f);
      deliveries++;
      natsMsg_Ack(list.Msgs[i], NULL);
    }
    natsMsgList_Destroy(&list);
  }
  fprintf(stderr, "ledger: stopped after %lld deliveries\n", deliveries);
  natsSubscription_Destroy(sub);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return 0;
}

/* ---------------------------------------------------------------- main */

static FILE *open_ledger(const char *path) {
  FILE *f = fopen(path, "a");
  if (!f) perror(path);
  return f;
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : "";
  int port = argc > 2 ? atoi(argv[2]) : 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  struct nodes nodes;
  if (!strncmp(cmd, "amqp", 4) && !parse_nodes(argc > 2 ? argv[2] : "", &nodes)) {
    fprintf(stderr, "ledger: bad PORTS '%s' (a port, or ports separated by commas)\n",
            argc > 2 ? argv[2] : "");
    return 2;
  }
  if (!strcmp(cmd, "amqp-setup") &&
      (argc == 5 || (argc == 6 && (!strcmp(argv[5], "quorum") || !strcmp(argv[5], "holds-one") ||
                                   !strcmp(argv[5], "unbound")))))
    return amqp_setup(&nodes, argv[3], argv[4], argc == 6 ? argv[5] : "");
  if (!strcmp(cmd, "amqp-bind") && argc == 6) return amqp_bind(&nodes, argv[3], argv[4], argv[5]);
  if (!strcmp(cmd, "amqp-exchange") && argc == 5) return amqp_exchange(&nodes, argv[3], argv[4]);
  if (!strcmp(cmd, "nats-setup") && argc == 6) return nats_setup(port, argv[3], argv[4], argv[5]);
  if (!strcmp(cmd, "amqp") && (argc == 5 || argc == 6)) {
    int prefetch = argc == 6 ? atoi(argv[5]) : 200;
    if (prefetch < 1 || prefetch > 65535) {
      fprintf(stderr, "ledger: bad PREFETCH '%s' (1 to 65535)\n", argv[5]);
      return 2;
    }
    FILE *f = open_ledger(argv[4]);
    return f ? amqp_consume(&nodes, argv[3], prefetch, f) : 1;
  }
  if (!strcmp(cmd, "nats") && argc == 7) {
    FILE *f = open_ledger(argv[6]);
    return f ? nats_consume(port, argv[3], argv[4], argv[5], f) : 1;
  }
  fprintf(stderr, "usage: see the comment at the top of ledger.c\n");
  return 2;
}
