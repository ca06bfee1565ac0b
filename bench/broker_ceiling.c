/*
 * bench/relay.sh's physical ceiling: how fast the broker alone confirms
 * persistent messages like the relay's (a JSON body of the same size, seven
 * headers, a message id), with at most WINDOW unconfirmed, no database
 * involved. The relay cannot forward faster than this.
 *
 *   broker_ceiling amqp PORT EXCHANGE ROUTING_KEY COUNT WINDOW
 *   broker_ceiling nats PORT SUBJECT COUNT WINDOW
 *
 * Prints "N messages in S s: R/s". Built by bench/relay.sh:
 * cc -O2 -o broker_ceiling broker_ceiling.c -lrabbitmq -lnats
 */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *kBody = "{\"order\": 12345, \"total\": 99.5}";
static const char *kHeaders[][2] = {
    {"pgq-queue", "to_broker"},      {"pgq-job-id", "123456"},
    {"pgq-attempt", "1"},            {"pgq-group-key", "customer-1234"},
    {"pgq-enqueued-at", "2026-12-04T10:00:00.000001Z"},
    {"pgq-event-id", "123456"},      {"pgq-topic", "orders.created"}};
enum { kHeaderCount = 7 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int fail(const char *what) {
  fprintf(stderr, "broker_ceiling: %s\n", what);
  return 1;
}

static int amqp(int port, const char *exchange, const char *key, long count, long window) {
  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t *sock = amqp_tcp_socket_new(conn);
  struct timeval tv = {10, 0};
  if (amqp_socket_open_noblock(sock, "127.0.0.1", port, &tv) != AMQP_STATUS_OK) return fail("connect");
  if (amqp_login(conn, "/", 0, 131072, 30, AMQP_SASL_METHOD_PLAIN, "guest", "guest").reply_type !=
      AMQP_RESPONSE_NORMAL)
    return fail("login");
  amqp_channel_open(conn, 1);
  amqp_confirm_select(conn, 1);
  if (amqp_get_rpc_reply(conn).reply_type != AMQP_RESPONSE_NORMAL) return fail("confirm.select");
  amqp_table_entry_t entries[kHeaderCount];
  for (int i = 0; i < kHeaderCount; ++i) {
    entries[i].key = amqp_cstring_bytes(kHeaders[i][0]);
    entries[i].value.kind = AMQP_FIELD_KIND_UTF8;
    entries[i].value.value.bytes = amqp_cstring_bytes(kHeaders[i][1]);
  }
  long sent = 0, confirmed = 0;
  char id[64];
  const double start = now_s();
  while (confirmed < count) {
    while (sent < count && sent - confirmed < window) {
      amqp_basic_properties_t p;
      memset(&p, 0, sizeof p);
      p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                 AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_HEADERS_FLAG;
      p.content_type = amqp_cstring_bytes("application/json");
      p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
      snprintf(id, sizeof id, "ceiling-%d-%ld", (int)getpid(), sent);
      p.message_id = amqp_cstring_bytes(id);
      p.headers.num_entries = kHeaderCount;
      p.headers.entries = entries;
      if (amqp_basic_publish(conn, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes(key), 1, 0,
                             &p, amqp_cstring_bytes(kBody)) != AMQP_STATUS_OK)
        return fail("publish");
      ++sent;
    }
    amqp_frame_t frame;
    struct timeval wait = {30, 0};
    if (amqp_simple_wait_frame_noblock(conn, &frame, &wait) != AMQP_STATUS_OK) return fail("no confirm");
    if (frame.frame_type != AMQP_FRAME_METHOD) continue;
    if (frame.payload.method.id == AMQP_BASIC_ACK_METHOD) {
      const amqp_basic_ack_t *ack = frame.payload.method.decoded;
      /* Tags count from 1: a multiple ack confirms everything up to its tag. */
      confirmed = ack->multiple ? (long)ack->delivery_tag : confirmed + 1;
    } else if (frame.payload.method.id == AMQP_BASIC_NACK_METHOD ||
               frame.payload.method.id == AMQP_BASIC_RETURN_METHOD) {
      return fail("nacked or returned");
    }
    amqp_maybe_release_buffers(conn);
  }
  const double took = now_s() - start;
  printf("%ld messages in %.2f s: %.0f/s\n", count, took, count / took);
  amqp_destroy_connection(conn);
  return 0;
}

static volatile long nats_confirmed;

static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure) {
  (void)js; (void)closure;
  if (pa != NULL) __atomic_add_fetch(&nats_confirmed, 1, __ATOMIC_SEQ_CST);
  else if (pae != NULL) fprintf(stderr, "broker_ceiling: publish error %d\n", (int)pae->Err);
  natsMsg_Destroy(msg);
}

static int nats(int port, const char *subject, long count, long window) {
  char url[64];
  snprintf(url, sizeof url, "nats://127.0.0.1:%d", port);
  natsConnection *nc = NULL;
  if (natsConnection_ConnectTo(&nc, url) != NATS_OK) return fail("connect");
  jsOptions o;
  jsOptions_Init(&o);
  o.PublishAsync.AckHandler = on_ack;
  o.PublishAsync.MaxPending = window;
  jsCtx *js = NULL;
  if (natsConnection_JetStream(&js, nc, &o) != NATS_OK) return fail("jetstream");
  char id[64];
  const double start = now_s();
  for (long sent = 0; sent < count; ++sent) {
    natsMsg *msg = NULL;
    natsMsg_Create(&msg, subject, NULL, kBody, (int)strlen(kBody));
    for (int i = 0; i < kHeaderCount; ++i) natsMsgHeader_Set(msg, kHeaders[i][0], kHeaders[i][1]);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    snprintf(id, sizeof id, "ceiling-%d-%ld", (int)getpid(), sent);
    po.MsgId = id;
    /* With MaxPending = WINDOW, the call waits while WINDOW are unconfirmed. */
    if (js_PublishMsgAsync(js, &msg, &po) != NATS_OK) return fail("publish");
    natsMsg_Destroy(msg);
  }
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = 60000;
  if (js_PublishAsyncComplete(js, &po) != NATS_OK) return fail("not all confirmed");
  const double took = now_s() - start;
  printf("%ld messages in %.2f s: %.0f/s (%ld acked)\n", count, took, count / took, nats_confirmed);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 7 && !strcmp(argv[1], "amqp"))
    return amqp(atoi(argv[2]), argv[3], argv[4], atol(argv[5]), atol(argv[6]));
  if (argc == 6 && !strcmp(argv[1], "nats"))
    return nats(atoi(argv[2]), argv[3], atol(argv[4]), atol(argv[5]));
  fprintf(stderr, "usage: see the comment at the top of broker_ceiling.c\n");
  return 2;
}
