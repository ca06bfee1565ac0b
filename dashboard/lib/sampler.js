'use strict';

// The overview's history: one sample of every visible queue every interval
// (5 s by default), kept in memory for a window (10 minutes). One statement
// per interval whatever the number of open pages: the live JSON endpoint
// serves the latest sample instead of querying.

const data = require('./data');

class Sampler {
  /**
   * @param {object} db a pg.Pool (or anything with query())
   * @param {{intervalMs?: number, windowMs?: number, logger?: {warn: Function}}} options
   */
  constructor(db, { intervalMs = 5000, windowMs = 600_000, logger = console } = {}) {
    this.db = db;
    this.intervalMs = intervalMs;
    this.capacity = Math.max(2, Math.ceil(windowMs / intervalMs) + 1);
    this.logger = logger;
    this.samples = []; // oldest first: {at, rows, counters: Map|null, rateLimits: Map|null}
    this.timer = null;
    this.inFlight = null;
    this.lastError = null;
  }

  start() {
    if (this.timer) return;
    this.timer = setInterval(() => {
      this.sampleNow().catch(() => {}); // logged by sampleNow
    }, this.intervalMs);
    this.timer.unref();
    this.sampleNow().catch(() => {});
  }

  async stop() {
    clearInterval(this.timer);
    this.timer = null;
    if (this.inFlight) await this.inFlight.catch(() => {});
  }

  /** Takes a sample now (or joins the one being taken); resolves to it. */
  sampleNow() {
    if (!this.inFlight) {
      this.inFlight = this.take().finally(() => {
        this.inFlight = null;
      });
    }
    return this.inFlight;
  }

  async take() {
    try {
      const caps = await data.capabilities(this.db);
      // One statement after the other: one connection, and a pg.Client works too.
      const rows = await data.overview(this.db);
      const counters = caps.counters ? await data.counters(this.db) : null;
      const rateLimits = caps.rate_limits ? await data.rateLimits(this.db) : null;
      const sample = { at: Date.now(), rows, counters, rateLimits };
      this.samples.push(sample);
      if (this.samples.length > this.capacity) this.samples.splice(0, this.samples.length - this.capacity);
      this.lastError = null;
      return sample;
    } catch (err) {
      if (this.lastError?.message !== err.message) this.logger.warn(`pgq dashboard: sampling failed: ${err.message}`);
      this.lastError = err;
      throw err;
    }
  }

  latest() {
    return this.samples[this.samples.length - 1] || null;
  }

  /**
   * The series per queue, oldest first: t (seconds since the epoch), depth
   * (ready + scheduled + awaiting parents), running, and the rates between
   * consecutive samples: completed/s (from the completion counters, or from
   * done_recent when the role may not read them) and failed/s (counters
   * only; null without them).
   */
  series() {
    const t = this.samples.map((s) => s.at / 1000);
    const queues = {};
    const names = new Set();
    for (const s of this.samples) for (const r of s.rows) names.add(r.queue);
    for (const name of names) {
      const depth = [];
      const running = [];
      const completed = [];
      const failed = [];
      this.samples.forEach((s, i) => {
        const row = s.rows.find((r) => r.queue === name);
        depth.push(row ? row.ready + row.scheduled + row.awaiting_parents : null);
        running.push(row ? row.running : null);
        const prev = i > 0 ? this.samples[i - 1] : null;
        const rates = prev && row ? rate(prev, s, name) : { completed: null, failed: null };
        completed.push(rates.completed);
        failed.push(rates.failed);
      });
      queues[name] = { depth, running, completed, failed };
    }
    return { t, queues };
  }

  /** The latest rates of one queue: {completed, failed} per second, null when unknown. */
  latestRates(name) {
    const n = this.samples.length;
    if (n < 2) return { completed: null, failed: null };
    return rate(this.samples[n - 2], this.samples[n - 1], name);
  }
}

function rate(prev, cur, name) {
  const dt = (cur.at - prev.at) / 1000;
  if (dt <= 0) return { completed: null, failed: null };
  const a = prev.counters?.get(name);
  const b = cur.counters?.get(name);
  if (a && b && a.completions !== null && b.completions !== null) {
    // Counters restart from 0 with the server: a drop is a restart, not a negative rate.
    return {
      completed: Math.max(0, b.completions - a.completions) / dt,
      failed: Math.max(0, b.failures - a.failures) / dt,
    };
  }
  // done_recent also loses the completions that leave the retention window:
  // without the counters the rate is a lower bound.
  const ra = prev.rows.find((r) => r.queue === name);
  const rb = cur.rows.find((r) => r.queue === name);
  if (!ra || !rb) return { completed: null, failed: null };
  return { completed: Math.max(0, rb.done_recent - ra.done_recent) / dt, failed: null };
}

module.exports = { Sampler };
