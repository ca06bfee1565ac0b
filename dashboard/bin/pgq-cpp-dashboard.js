#!/usr/bin/env node
'use strict';

// pgq-cpp-dashboard --database postgres://... --listen 127.0.0.1:8080 (--help for the rest)

const { createServer } = require('..');
const { parseCommandLine } = require('../lib/cli');

async function main() {
  let parsed;
  try {
    parsed = parseCommandLine(process.argv.slice(2), process.env);
  } catch (err) {
    console.error(`pgq-cpp-dashboard: ${err.message}`);
    process.exit(2);
  }
  if (parsed.help) {
    console.log(parsed.help);
    return;
  }
  const app = await createServer({
    ...parsed.options,
    logger: { level: process.env.PGQ_DASHBOARD_LOG_LEVEL || 'warn' },
  });
  const address = await app.listen({ host: parsed.host, port: parsed.port });
  console.log(`pgq-cpp-dashboard: listening on ${address}${parsed.options.prefix}/`);
  const stop = async () => {
    await app.close();
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

main().catch((err) => {
  console.error(`pgq-cpp-dashboard: ${err.message}`);
  process.exit(1);
});
