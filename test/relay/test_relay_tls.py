"""pgq-relay over TLS to real brokers (issue 31), started by test/relay/run.sh
on certificates test/relay/make_certs.sh made with openssl: a RabbitMQ node
whose amqps:// listener requires a client certificate (its plain port is for
the tests' consumers), a NATS server that requires one and a NATS server
that does not (tls:// only, both). Each case: a good CA connects and relays;
a wrong CA, a host name the certificate does not list, a missing client
certificate are refused, saying so, and nothing is claimed meanwhile.

Environment (set by run.sh, besides test_relay_cli's): PGQ_RELAY_TLS_CERTS
(make_certs.sh's directory), PGQ_AMQPS_PORT, PGQ_AMQPS_PLAIN_PORT,
PGQ_NATS_TLS_PORT (client certificate required), PGQ_NATS_TLS_OPTIONAL_PORT.
Without them the cases are skipped.
"""

import os
import signal
import subprocess
import threading
import unittest

import test_relay_cli as base

CERTS = os.environ.get("PGQ_RELAY_TLS_CERTS", "")
PORTS = {name: int(os.environ.get(name, "0")) for name in
         ("PGQ_AMQPS_PORT", "PGQ_AMQPS_PLAIN_PORT", "PGQ_NATS_TLS_PORT",
          "PGQ_NATS_TLS_OPTIONAL_PORT")}
AMQPS, AMQPS_PLAIN = PORTS["PGQ_AMQPS_PORT"], PORTS["PGQ_AMQPS_PLAIN_PORT"]
NATS_TLS, NATS_TLS_OPTIONAL = PORTS["PGQ_NATS_TLS_PORT"], PORTS["PGQ_NATS_TLS_OPTIONAL_PORT"]


def cert(name):
    return os.path.join(CERTS, name)


GOOD_CA = ("--broker-ca", cert("ca.pem"))
CLIENT = ("--broker-cert", cert("client.pem"), "--broker-key", cert("client.key"))


class TlsLedger(base.Ledger):
    """ledger.c, its NATS connection over TLS (LEDGER_NATS_TLS_DIR)."""

    def __init__(self, name, argv):
        self.path = os.path.join(base.SCRATCH, name + ".ledger")
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.process = subprocess.Popen([base.LEDGER, *argv, self.path], stderr=subprocess.DEVNULL,
                                        env=dict(os.environ, LEDGER_NATS_TLS_DIR=CERTS))


class RelayTlsTest(unittest.TestCase):
    counter = 0

    @classmethod
    def setUpClass(cls):
        if not CERTS or not all(PORTS.values()):
            raise unittest.SkipTest("no TLS brokers (run.sh starts them)")
        base.sql("DROP EXTENSION IF EXISTS pgq_cpp CASCADE")
        base.sql("CREATE EXTENSION pgq_cpp")

    def setUp(self):
        RelayTlsTest.counter += 1
        self.n = RelayTlsTest.counter
        self.queue = f"tls_{base.RUN}_{self.n}"
        self.topic = f"tls{base.RUN}_{self.n}"
        base.sql("SELECT pgq.create_queue(%s, lease => '5 seconds')", self.queue)
        base.sql("SELECT pgq.create_topic(%s)", self.topic)
        base.sql("SELECT pgq.subscribe(%s, %s)", self.topic, self.queue)

    def publish(self, n):
        for i in range(n):
            base.sql("SELECT pgq.publish(%s, %s::jsonb)", self.topic, f'{{"i": {i}}}')

    def amqp_ledger(self):
        exchange, queue = f"xtls{base.RUN}_{self.n}", f"qtls{base.RUN}_{self.n}"
        subprocess.run([base.LEDGER, "amqp-setup", str(AMQPS_PLAIN), exchange, queue], check=True,
                       timeout=30)
        ledger = base.Ledger(queue, ["amqp", str(AMQPS_PLAIN), queue])
        self.addCleanup(ledger.close)
        return exchange, ledger

    def nats_ledger(self, port):
        stream, consumer = f"STLS{base.RUN}_{self.n}", f"c{base.RUN}_{self.n}"
        subject = f"{self.topic}.>"
        subprocess.run([base.LEDGER, "nats-setup", str(port), stream, subject, consumer],
                       check=True, timeout=30, env=dict(os.environ, LEDGER_NATS_TLS_DIR=CERTS))
        ledger = TlsLedger(stream, ["nats", str(port), stream, consumer, subject])
        self.addCleanup(ledger.close)
        return ledger

    def relays(self, url, *args, ledger, target=(), env=None):
        """The relay forwards 2 events over TLS and exits 0; both delivered."""
        self.publish(2)
        status, err = base.relay("--broker", url, "--queue", self.queue, *target, *args,
                                 "--max-jobs", "2", env=env)
        self.assertEqual(status, 0, err)
        lines = ledger.wait_for(2)
        self.assertEqual(sorted(line["body"]["i"] for line in lines), [0, 1])
        self.assertEqual(base.sql("SELECT count(*) FROM pgq.list_jobs(%s)", self.queue)[0][0], 0)
        return err

    def refused(self, url, *args, says):
        """The relay cannot connect: it says why (each of `says` in one line),
        claims nothing, and exits 0 on SIGTERM. Its stderr."""
        self.publish(1)
        process = base.start_relay("--broker", url, "--queue", self.queue, *args)
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(process.stderr))
        reader.start()
        try:
            try:
                base.wait_for(lambda: any(all(s in line for s in says) for line in list(lines)),
                              f"a line saying {says}", seconds=30)
            except AssertionError as e:
                raise AssertionError(f"{e}; the relay said: {''.join(lines)!r}") from None
            self.assertEqual(base.sql("SELECT state FROM pgq.list_jobs(%s)", self.queue),
                             [("ready",)], "nothing is claimed while the broker is out of reach")
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            finally:
                if process.poll() is None:
                    process.kill()
                reader.join(timeout=20)
        self.assertEqual(process.returncode, 0, "".join(lines))
        self.assertNotIn("connected to", "".join(lines))
        return "".join(lines)

    # ------------------------------------------------------------ RabbitMQ

    def amqps(self, host="localhost"):
        return f"amqps://guest:guest@{host}:{AMQPS}/"

    def test_tls_amqps_good_ca_and_client_certificate_relay(self):
        exchange, ledger = self.amqp_ledger()
        err = self.relays(self.amqps(), *GOOD_CA, *CLIENT, ledger=ledger,
                          target=("--exchange", exchange))
        self.assertIn(f"connected to RabbitMQ (TLS) localhost:{AMQPS}", err)

    def test_tls_amqps_wrong_ca_is_refused(self):
        err = self.refused(self.amqps(), "--broker-ca", cert("other_ca.pem"), *CLIENT,
                           says=["cannot connect to RabbitMQ (TLS)",
                                 "certificate is not trusted",
                                 "--broker-ca " + cert("other_ca.pem")])
        self.assertEqual(err.count("not trusted"), 1, "the same error is logged once")

    def test_tls_amqps_host_name_not_in_the_certificate_is_refused(self):
        # The certificate lists DNS:localhost only; 127.0.0.1 reaches the same
        # listener under a name it does not list.
        self.refused(self.amqps("127.0.0.1"), *GOOD_CA, *CLIENT,
                     says=["certificate is not for the host name \"127.0.0.1\""])

    def test_tls_amqps_without_the_required_client_certificate_is_refused(self):
        self.refused(self.amqps(), *GOOD_CA,
                     says=["cannot log in to RabbitMQ (TLS)",
                           "it may require a client certificate: --broker-cert, --broker-key"])

    def test_tls_amqps_insecure_connects_and_warns(self):
        # The opt-out: neither the CA nor the host name is checked.
        exchange, ledger = self.amqp_ledger()
        err = self.relays(self.amqps("127.0.0.1"), "--broker-insecure", *CLIENT, ledger=ledger,
                          target=("--exchange", exchange))
        self.assertIn("warning: --broker-insecure", err)

    def test_tls_amqp_url_on_the_tls_port_is_refused(self):
        # amqp:// (plain) against a TLS listener: a clear failure, no hang.
        self.refused(f"amqp://guest:guest@localhost:{AMQPS}/", says=["cannot"])

    # ------------------------------------------------------------ NATS

    def test_tls_nats_good_ca_relays(self):
        ledger = self.nats_ledger(NATS_TLS_OPTIONAL)
        err = self.relays(f"tls://localhost:{NATS_TLS_OPTIONAL}", *GOOD_CA, ledger=ledger,
                          target=("--subject-prefix", f"{self.topic}."))
        self.assertIn(f"connected to NATS (TLS) localhost:{NATS_TLS_OPTIONAL}", err)

    def test_tls_nats_client_certificate_when_required(self):
        ledger = self.nats_ledger(NATS_TLS)
        self.relays(f"tls://localhost:{NATS_TLS}", *GOOD_CA, *CLIENT, ledger=ledger,
                    target=("--subject-prefix", f"{self.topic}."))

    def test_tls_nats_without_the_required_client_certificate_is_refused(self):
        self.refused(f"tls://localhost:{NATS_TLS}", *GOOD_CA,
                     says=["cannot connect to NATS (TLS)",
                           "it may require a client certificate: --broker-cert, --broker-key"])

    def test_tls_nats_wrong_ca_is_refused(self):
        self.refused(f"tls://localhost:{NATS_TLS_OPTIONAL}", "--broker-ca", cert("other_ca.pem"),
                     says=["cannot connect to NATS (TLS)", "certificate is not trusted",
                           "--broker-ca " + cert("other_ca.pem")])

    def test_tls_nats_host_name_not_in_the_certificate_is_refused(self):
        self.refused(f"tls://127.0.0.1:{NATS_TLS_OPTIONAL}", *GOOD_CA,
                     says=["cannot connect to NATS (TLS)",
                           "certificate is not for the host name \"127.0.0.1\""])

    def test_tls_nats_system_trust_store_by_default(self):
        # No --broker-ca: the system's CAs, which do not include the test CA.
        self.refused(f"tls://localhost:{NATS_TLS_OPTIONAL}",
                     says=["cannot connect to NATS (TLS)",
                           "does not chain to a CA of the system's trust store"])

    def test_tls_options_from_the_environment(self):
        ledger = self.nats_ledger(NATS_TLS)
        self.publish(1)
        done = subprocess.run(
            [base.RELAY, "--dsn", base.DSN, "--queue", self.queue, "--subject-prefix",
             f"{self.topic}.", "--max-jobs", "1", "--stats-interval", "0"],
            capture_output=True, text=True, timeout=30,
            env=dict(os.environ, PGQ_RELAY_BROKER=f"tls://localhost:{NATS_TLS}",
                     PGQ_RELAY_BROKER_CA=cert("ca.pem"), PGQ_RELAY_BROKER_CERT=cert("client.pem"),
                     PGQ_RELAY_BROKER_KEY=cert("client.key")))
        self.assertEqual(done.returncode, 0, done.stderr)
        ledger.wait_for(1)

    # ------------------------------------------------------------ bad input

    def test_tls_usage_errors(self):
        missing = os.path.join(base.SCRATCH, "no_such_ca.pem")
        cases = [
            (("--broker", f"amqp://localhost:{AMQPS_PLAIN}/", *GOOD_CA), "are for TLS"),
            (("--broker", self.amqps(), "--broker-cert", cert("client.pem")),
             "--broker-cert and --broker-key go together"),
            (("--broker", self.amqps(), "--broker-ca", missing),
             f"--broker-ca: cannot read {missing}: No such file or directory"),
            (("--broker", f"tls://localhost:{NATS_TLS},nats://localhost:1"),
             "all use TLS (amqps://, tls://) or none does"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                status, err = base.relay(*args)
                self.assertEqual(status, 2, err)
                self.assertIn(message, err)
        status, err = base.relay("--broker", self.amqps(),
                                 env={"PGQ_RELAY_BROKER_INSECURE": "yes"})
        self.assertEqual(status, 2, err)
        self.assertIn("PGQ_RELAY_BROKER_INSECURE must be 0 or 1", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
