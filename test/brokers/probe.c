/*
 * The brokers smoke test's client: one persistent message through each broker
 * with the client libraries the relay uses (Debian's librabbitmq-dev, i.e.
 * rabbitmq-c, and libnats-dev, i.e. cnats), acknowledged by the broker before
 * it returns: a publisher confirm from RabbitMQ, a PubAck from JetStream.
 *
 *   probe amqp-publish PORT QUEUE BODY   durable QUEUE, persistent BODY, confirmed
 *   probe amqp-get PORT QUEUE            prints one message's body (exit 3: empty)
 *   probe nats-publish PORT STREAM SUBJECT BODY MSGID
 *                                        file-stored STREAM on SUBJECT; prints
 *                                        "seq=N duplicate=0|1"
 *   probe nats-count PORT STREAM         prints the stream's message count
 *
 * Built by test/brokers/smoke.sh: cc -o probe probe.c -lrabbitmq -lnats
 * Exit 0 on success, 1 on any error (with a line on stderr).
 */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static int fail(const char *what) {
  fprintf(stderr, "probe: %s\n", what);
  return 1;
}

static int amqp_ok(amqp_rpc_reply_t r) { return r.reply_type == AMQP_RESPONSE_NORMAL; }

static amqp_connection_state_t amqp_open(int port) {
  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t *sock = amqp_tcp_socket_new(conn);
  struct timeval tv = {10, 0};
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

static void amqp_done(amqp_connection_state_t conn) {
  amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
  amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(conn);
}

static int amqp_publish(int port, const char *queue, const char *body) {
  amqp_connection_state_t conn = amqp_open(port);
  if (!conn) return fail("cannot connect to RabbitMQ");
  amqp_queue_declare(conn, 1, amqp_cstring_bytes(queue), 0, 1, 0, 0, amqp_empty_table);
  if (!amqp_ok(amqp_get_rpc_reply(conn))) return fail("queue.declare failed");
  amqp_confirm_select(conn, 1);
  if (!amqp_ok(amqp_get_rpc_reply(conn))) return fail("confirm.select failed");
  amqp_basic_properties_t props;
  memset(&props, 0, sizeof props);
  props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
  props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  if (amqp_basic_publish(conn, 1, amqp_empty_bytes, amqp_cstring_bytes(queue), 1, 0, &props,
                         amqp_cstring_bytes(body)) != AMQP_STATUS_OK)
    return fail("basic.publish failed");
  /* The confirm: basic.ack once the message is on disk in the queue
   * (basic.return first if it was unroutable, basic.nack if lost). */
  for (;;) {
    amqp_frame_t frame;
    struct timeval tv = {30, 0};
    if (amqp_simple_wait_frame_noblock(conn, &frame, &tv) != AMQP_STATUS_OK)
      return fail("no confirm within 30 s");
    if (frame.frame_type != AMQP_FRAME_METHOD) continue;
    if (frame.payload.method.id == AMQP_BASIC_ACK_METHOD) break;
    if (frame.payload.method.id == AMQP_BASIC_RETURN_METHOD)
      return fail("message returned (unroutable)");
    if (frame.payload.method.id == AMQP_BASIC_NACK_METHOD) return fail("message nacked");
  }
  amqp_done(conn);
  return 0;
}

static int amqp_get(int port, const char *queue) {
  amqp_connection_state_t conn = amqp_open(port);
  if (!conn) return fail("cannot connect to RabbitMQ");
  amqp_rpc_reply_t r = amqp_basic_get(conn, 1, amqp_cstring_bytes(queue), 1);
  if (!amqp_ok(r)) return fail("basic.get failed");
  if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD) {
    amqp_done(conn);
    return 3;
  }
  amqp_message_t msg;
  if (!amqp_ok(amqp_read_message(conn, 1, &msg, 0))) return fail("reading the message failed");
  printf("%.*s\n", (int)msg.body.len, (const char *)msg.body.bytes);
  amqp_destroy_message(&msg);
  amqp_done(conn);
  return 0;
}

static jsCtx *nats_open(int port, natsConnection **nc) {
  char url[64];
  jsCtx *js = NULL;
  snprintf(url, sizeof url, "nats://127.0.0.1:%d", port);
  if (natsConnection_ConnectTo(nc, url) != NATS_OK) return NULL;
  if (natsConnection_JetStream(&js, *nc, NULL) != NATS_OK) return NULL;
  return js;
}

static void nats_done(jsCtx *js, natsConnection *nc) {
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  nats_Close();
}

static int nats_publish(int port, const char *stream, const char *subject, const char *body,
                        const char *msgid) {
  natsConnection *nc = NULL;
  jsCtx *js = nats_open(port, &nc);
  if (!js) return fail("cannot connect to NATS JetStream");
  jsStreamConfig sc;
  jsStreamConfig_Init(&sc);
  const char *subjects[1] = {subject};
  sc.Name = stream;
  sc.Subjects = subjects;
  sc.SubjectsLen = 1;
  sc.Storage = js_FileStorage;
  jsErrCode jerr = 0;
  natsStatus s = js_AddStream(NULL, js, &sc, NULL, &jerr);
  if (s != NATS_OK && jerr != JSStreamNameExistErr) return fail(nats_GetLastError(NULL));
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MsgId = msgid; /* JetStream drops a second publish with this id inside its duplicate window */
  jsPubAck *pa = NULL;
  if (js_Publish(&pa, js, subject, body, (int)strlen(body), &po, &jerr) != NATS_OK)
    return fail(nats_GetLastError(NULL));
  printf("seq=%llu duplicate=%d\n", (unsigned long long)pa->Sequence, pa->Duplicate ? 1 : 0);
  jsPubAck_Destroy(pa);
  nats_done(js, nc);
  return 0;
}

static int nats_count(int port, const char *stream) {
  natsConnection *nc = NULL;
  jsCtx *js = nats_open(port, &nc);
  if (!js) return fail("cannot connect to NATS JetStream");
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  if (js_GetStreamInfo(&si, js, stream, NULL, &jerr) != NATS_OK)
    return fail(nats_GetLastError(NULL));
  printf("%llu\n", (unsigned long long)si->State.Msgs);
  jsStreamInfo_Destroy(si);
  nats_done(js, nc);
  return 0;
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : "";
  int port = argc > 2 ? atoi(argv[2]) : 0;
  if (!strcmp(cmd, "amqp-publish") && argc == 5) return amqp_publish(port, argv[3], argv[4]);
  if (!strcmp(cmd, "amqp-get") && argc == 4) return amqp_get(port, argv[3]);
  if (!strcmp(cmd, "nats-publish") && argc == 7)
    return nats_publish(port, argv[3], argv[4], argv[5], argv[6]);
  if (!strcmp(cmd, "nats-count") && argc == 4) return nats_count(port, argv[3]);
  fprintf(stderr, "usage: see the comment at the top of probe.c\n");
  return 2;
}
