'use strict';

// index.d.ts and the typed usage example (test/typed-usage.ts) pass `tsc --noEmit`.
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const path = require('node:path');
const { test } = require('node:test');
const { promisify } = require('node:util');

test('tsc --noEmit accepts the types and the typed usage, and rejects the misuses', async () => {
  const root = path.join(__dirname, '..');
  const tsc = require.resolve('typescript/bin/tsc');
  const result = await promisify(execFile)(process.execPath, [tsc, '-p', root]).catch((err) => err);
  assert.equal(result.code ?? 0, 0, `tsc failed:\n${result.stdout}${result.stderr}`);
});
