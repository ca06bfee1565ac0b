'use strict';

// lib/redirect.js alone (no server): which `next` values the login follows,
// at the root and under a prefix.

const test = require('node:test');
const assert = require('node:assert/strict');
const { sameOriginPath } = require('../lib/redirect');
const { OFFSITE_NEXTS } = require('./helpers');

test('every off-site `next` ends on the front page, at the root and under a prefix', () => {
  for (const next of OFFSITE_NEXTS) {
    assert.equal(sameOriginPath(next, ''), '/', JSON.stringify(next));
    assert.equal(sameOriginPath(`/ops/pgq${next}`, '/ops/pgq'), '/ops/pgq/', JSON.stringify(next));
  }
  for (const next of [undefined, null, 42, ['/queues/q', '//evil.example'], { toString: () => '/x' }]) {
    assert.equal(sameOriginPath(next, ''), '/', String(next));
  }
  assert.equal(sameOriginPath(`/${'a'.repeat(5000)}`, ''), '/', 'too long');
});

test('a page of the dashboard is kept, as the URL parser writes it', () => {
  assert.equal(sameOriginPath('/queues/q?state=ready', ''), '/queues/q?state=ready');
  assert.equal(sameOriginPath('/', ''), '/');
  assert.equal(sameOriginPath('/ops/pgq/jobs/7?notice=cancelled', '/ops/pgq'), '/ops/pgq/jobs/7?notice=cancelled');
  assert.equal(sameOriginPath('/ops/pgq/queues/a%2Eb', '/ops/pgq'), '/ops/pgq/queues/a%2Eb');
  assert.equal(sameOriginPath('/queues/q?x=%2F%2Fevil', ''), '/queues/q?x=%2F%2Fevil', 'a query is data');
});

test('only under the prefix, once the parser has resolved the dot segments', () => {
  const outside = ['/', '/queues/q', '/ops/pgqx/', '/ops/pgq', '/ops/pgq/../../evil', '/ops/pgq/%2e%2e/x'];
  for (const next of outside) {
    assert.equal(sameOriginPath(next, '/ops/pgq'), '/ops/pgq/', next);
  }
  assert.equal(sameOriginPath('/ops/pgq/queues/q/../../workers', '/ops/pgq'), '/ops/pgq/workers');
});

test('the Locations the dashboard builds pass the check (else its onSend guard replaces them)', () => {
  const built = ['/login?next=%2Fqueues%2Fq%3Fstate%3Dready', '/queues/q?notice=paused', '/jobs/12?notice=cancelled'];
  for (const location of built) {
    assert.equal(sameOriginPath(location, ''), location);
  }
  // The login link of a request whose URL has a raw ' (the URL parser
  // encodes it in a query): form encoding, as the onRequest hook builds it.
  const login = `/login?${new URLSearchParams({ next: "/queues/q?x='a b'" })}`;
  assert.equal(sameOriginPath(login, ''), login);
});
