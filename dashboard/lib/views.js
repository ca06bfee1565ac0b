'use strict';

// The pages, as functions of their data. Every value goes through html``
// (lib/html.js), which escapes it; scripts are static files (the
// Content-Security-Policy allows no inline script).

const { html, jsonScript } = require('./html');
const { JOB_STATES, DEAD_REASONS, TRACE_ID, traceLink } = require('./validate');
const { EXACT_UP_TO } = require('./data');

// ---- Formatting -------------------------------------------------------------

function time(value) {
  if (value === null || value === undefined) return html`<span class="none">—</span>`;
  const d = value instanceof Date ? value : new Date(value);
  if (Number.isNaN(d.getTime())) return String(value); // ±infinity
  const iso = d.toISOString();
  return html`<time datetime="${iso}">${iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z')}</time>`;
}

function seconds(value) {
  if (value === null || value === undefined) return '—';
  const s = Math.abs(value);
  const sign = value < 0 ? '-' : '';
  if (s < 60) return `${sign}${s.toFixed(s < 10 && s % 1 ? 1 : 0)} s`;
  if (s < 3600) return `${sign}${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  if (s < 86400) return `${sign}${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${sign}${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

function rate(value) {
  if (value === null || value === undefined) return '—';
  return value >= 10 ? value.toFixed(0) : value.toFixed(2);
}

function yesNo(value) {
  return value ? 'yes' : 'no';
}

function truncate(text, max) {
  if (text === null || text === undefined) return text;
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

// ---- Layout -----------------------------------------------------------------

/**
 * ctx: {base, user, readOnly, traceUrl, authMode, csrf()} — base is the path
 * the dashboard is mounted at ('' at the root), traceUrl the --trace-url
 * template (or undefined), csrf() the token for forms.
 */
function layout(ctx, { title, body, notice = null, error = null, scripts = [] }) {
  const link = (path) => `${ctx.base}${path}`;
  const nav =
    ctx.user === null
      ? ''
      : html`<nav>
    <a href="${link('/')}">Queues</a>
    <a href="${link('/schedules')}">Schedules</a>
    <a href="${link('/streams')}">Streams</a>
    <a href="${link('/workers')}">Workers</a>
    <a href="${link('/coordination')}">Teams, switches, ladders</a>
  </nav>
  <form method="get" action="${link('/search')}" class="search" role="search">
    <input type="search" name="q" placeholder="Job id, dedupe or group key" aria-label="Find a job" maxlength="200">
    <button type="submit">Find</button>
  </form>
  <span class="who">${ctx.readOnly ? html`<span class="badge">read-only</span>` : ''}
    ${ctx.authMode === 'none' ? html`<span class="badge warn">no login</span>` : html`<span>${ctx.user}</span>`}
    ${ctx.authMode === 'password' ? logoutForm(ctx) : ''}</span>`;
  return html`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · pgq_cpp</title>
<link rel="icon" href="${link('/static/favicon.svg')}" type="image/svg+xml">
<link rel="stylesheet" href="${link('/static/uPlot.min.css')}">
<link rel="stylesheet" href="${link('/static/style.css')}">
</head>
<body>
<header class="top">
  <a class="brand" href="${link('/')}">pgq_cpp</a>
  ${nav}
</header>
<main>
${notice ? html`<p class="notice" role="status">${notice}</p>` : ''}
${error ? errorBox(error) : ''}
${body}
</main>
${scripts.map((s) => html`<script src="${link(s)}"></script>`)}
<script src="${link('/static/app.js')}"></script>
</body>
</html>`;
}

function logoutForm(ctx) {
  return html`<form method="post" action="${ctx.base}/logout" class="inline">${csrfField(ctx)}<button type="submit">Log out</button></form>`;
}

function csrfField(ctx) {
  return html`<input type="hidden" name="_csrf" value="${ctx.csrf()}">`;
}

/** A readable error: the server's message, detail, hint and SQLSTATE; never a stack. */
function errorBox(e) {
  return html`<div class="error" role="alert"${e.kind ? html` data-unavailable="${e.kind}"` : ''}>
  <strong>${e.title}</strong>
  <p class="message">${e.message}${e.code ? html` <span class="code">(SQLSTATE ${e.code})</span>` : ''}</p>
  ${e.detail ? html`<p class="detail">${e.detail}</p>` : ''}
  ${e.hint ? html`<p class="hint">Hint: ${e.hint}</p>` : ''}
  ${e.checks ? html`<p>What to check:</p><ul class="checks">${e.checks.map((c) => html`<li>${c}</li>`)}</ul>` : ''}
</div>`;
}

/** A POST button: a form with the CSRF token, optionally confirmed by app.js. */
function actionButton(ctx, path, label, { confirm = null, fields = null, danger = false } = {}) {
  const confirmAttr = confirm ? html` data-confirm="${confirm}"` : '';
  const buttonClass = danger ? html` class="danger"` : '';
  return html`<form method="post" action="${ctx.base}${path}" class="inline"${confirmAttr}>${csrfField(ctx)}${fields}<button type="submit"${buttonClass}>${label}</button></form>`;
}

function errorPage(ctx, e) {
  return layout(ctx, { title: e.title, body: html`<p><a href="${ctx.base}/">Back to the queues</a></p>`, error: e });
}

// ---- Login ------------------------------------------------------------------

function loginPage(ctx, { failed = false, next = '' } = {}) {
  return layout(ctx, {
    title: 'Log in',
    error: failed ? { title: 'Wrong password', message: 'The password is not the dashboard’s.' } : null,
    body: html`<h1>Log in</h1>
<form method="post" action="${ctx.base}/login" class="login">
  ${csrfField(ctx)}
  <input type="hidden" name="next" value="${next}">
  <label>Password <input type="password" name="password" autocomplete="current-password" autofocus required></label>
  <button type="submit">Log in</button>
</form>`,
  });
}

// ---- Overview ---------------------------------------------------------------

const OVERVIEW_FIELDS = [
  ['ready', 'Ready'],
  ['scheduled', 'Scheduled'],
  ['running', 'Running / max'],
  ['expired', 'Expired'],
  ['dead', 'Dead'],
  ['awaiting_parents', 'Awaiting parents'],
  ['done_recent', 'Done (retention)'],
  ['oldest_ready', 'Oldest ready'],
  ['completed_rate', 'Completed/s'],
  ['failed_rate', 'Failed/s'],
  ['paused', 'Paused'],
  ['rate_limit', 'Rate limit'],
];

/**
 * A count of a queue_overview row: past EXACT_UP_TO in a row marked estimated
 * it is the planner's estimate, shown as "≈ 1,234,000"; EXACT_UP_TO + 1 there
 * means "more" (no statistics yet to estimate from), shown as "1,000+".
 */
function count(row, value) {
  if (!row.estimated || value <= EXACT_UP_TO) return String(value);
  if (value === EXACT_UP_TO + 1) return `${EXACT_UP_TO.toLocaleString('en-US')}+`;
  return `≈ ${value.toLocaleString('en-US')}`;
}

/** The cells of one queue's row, as text: shared by the page and by overview.js's refresh (via JSON). */
function overviewCells(row) {
  const running = count(row, row.running);
  return {
    ready: count(row, row.ready),
    scheduled: count(row, row.scheduled),
    running: row.max_running === null ? running : `${running} / ${row.max_running}`,
    expired: count(row, row.expired),
    dead: count(row, row.dead),
    awaiting_parents: count(row, row.awaiting_parents),
    done_recent: String(row.done_recent),
    oldest_ready: row.ready > 0 ? seconds(row.oldest_ready_seconds) : '—',
    completed_rate: rate(row.completed_rate),
    failed_rate: rate(row.failed_rate),
    paused: row.paused ? 'paused' : 'no',
    rate_limit: row.rate_limit === null || row.rate_limit === undefined ? '—' : `${row.rate_limit}/s`,
  };
}

function overviewRow(ctx, row) {
  const cells = overviewCells(row);
  return html`<tr data-queue="${row.queue}"${row.paused ? html` class="paused"` : ''}>
  <td><a href="${ctx.base}/queues/${encodeURIComponent(row.queue)}">${row.queue}</a></td>
  ${OVERVIEW_FIELDS.map(([field]) => html`<td data-field="${field}">${cells[field]}</td>`)}
  <td><div class="spark" data-queue="${row.queue}" data-series="depth"></div></td>
  <td><div class="spark" data-queue="${row.queue}" data-series="completed"></div></td>
</tr>`;
}

function overviewPage(ctx, { rows, who, live, notes }) {
  const table =
    rows.length === 0
      ? html`<p class="empty">No queue to show: this role holds no right on any queue (<code>pgq.grant</code>).</p>`
      : html`<div class="wide"><table class="queues" id="queues">
<thead><tr><th>Queue</th>${OVERVIEW_FIELDS.map(([, label]) => html`<th>${label}</th>`)}<th>Depth (chart)</th><th>Completed/s (chart)</th></tr></thead>
<tbody>
${rows.map((row) => overviewRow(ctx, row))}
</tbody>
</table></div>`;
  const body = html`<h1>Queues</h1>
<p class="meta">As role <b>${who.role}</b> on database <b>${who.database}</b>: the queues this role holds a right on.
Numbers refresh every ${Math.round(live.intervalMs / 1000)} s; the charts show the last ${Math.round(live.windowMs / 60000)} minutes.
Counts are exact up to ${EXACT_UP_TO.toLocaleString('en-US')}; past that, ≈ marks PostgreSQL's estimate (from the statistics autovacuum keeps).</p>
${notes.map((n) => html`<p class="note">${n}</p>`)}
${table}
${jsonScript('overview-data', { api: `${ctx.base}/api/overview`, intervalMs: live.intervalMs, series: live.series })}`;
  return layout(ctx, { title: 'Queues', body, scripts: ['/static/uPlot.iife.min.js', '/static/overview.js'] });
}

// ---- A queue ----------------------------------------------------------------

const NOTICES = {
  paused: () => 'The queue is paused: claims return no job until it is resumed.',
  resumed: () => 'The queue is resumed.',
  retried: (n) => `${n} dead job(s) requeued.`,
  purged: (n) => `${n} dead job(s) deleted.`,
  cancelled: () => 'The job is cancelled.',
  job_retried: () => 'The job is pending again, with fresh attempts.',
  job_purged: (n) => `Dead job ${n} deleted.`,
};

// What pgq.cancel_job, retry_dead_job and purge_dead_job answer when nothing
// happened (3.0), per action: "not <verb>: <why>".
const NOT_DONE = {
  cancel: 'not cancelled',
  retry: 'not requeued',
  purge: 'not deleted',
};
const DONE = { cancel: 'cancelled', retry: 'requeued', purge: 'deleted' };
const DONE_WORDS = { cancel: 'cancelled', retry: 'retried', purge: 'purged' };
const WHY = {
  not_found: 'not found (no such job, its history was not kept, or this role holds no right on its queue)',
  already_completed: 'already completed',
  already_dead: 'already dead',
  already_cancelled: 'already cancelled',
  not_dead: {
    retry: 'not dead (live, or retried by someone else first)',
    purge: 'not dead: only dead jobs are deleted',
  },
  dedupe_key_taken: 'a live job holds its dedupe key: it stays dead',
};

function why(action, outcome) {
  const text = Object.hasOwn(WHY, outcome) ? WHY[outcome] : null;
  if (text === null) return outcome; // a word a later pgq may add: shown as is
  return typeof text === 'string' ? text : (text[action] ?? outcome);
}

/** A bulk result's text for the outcome word of `action` (cancel, retry, purge). */
function outcomeText(action, outcome) {
  if (outcome === DONE_WORDS[action]) return DONE[action];
  return `${NOT_DONE[action]}: ${why(action, outcome)}`;
}

// The notices of a job's buttons: one per action and outcome word.
const JOB_DONE_NOTICE = { cancel: 'cancelled', retry: 'job_retried', purge: 'job_purged' };
for (const action of Object.keys(NOT_DONE)) {
  for (const outcome of Object.keys(WHY)) {
    NOTICES[`${action}_${outcome}`] = () => `Nothing done: ${outcomeText(action, outcome)}.`;
  }
  NOTICES[`${action}_other`] = () => `Nothing done: ${NOT_DONE[action]}.`;
}

/** The notice code of a job's button for the outcome word pgq answered. */
function jobNoticeCode(action, outcome) {
  if (outcome === DONE_WORDS[action]) return JOB_DONE_NOTICE[action];
  return Object.hasOwn(WHY, outcome) ? `${action}_${outcome}` : `${action}_other`;
}

/** A notice from a redirect's query (?notice=code&n=count): only the texts above. */
function notice(query) {
  if (typeof query.notice !== 'string' || !Object.hasOwn(NOTICES, query.notice)) return null;
  const n = typeof query.n === 'string' && /^[0-9]{1,12}$/.test(query.n) ? query.n : '?';
  return NOTICES[query.notice](n);
}

function jobStateBadge(state) {
  return html`<span class="state state-${state}">${state}</span>`;
}

/** Why a dead job is dead, after its state (nothing for a live or done job). */
function deadReason(job) {
  // a cancelled job's reason is its state: said once
  if (!job.dead_reason || job.dead_reason === job.state) return '';
  return html` <span class="reason" data-reason="${job.dead_reason}">${job.dead_reason}</span>`;
}

function rightsLine(rights) {
  const held = ['produce', 'consume', 'admin'].filter((r) => rights[r]);
  return held.length ? held.join(', ') : 'none';
}

function queueStatsBlock(stats) {
  if (!stats) return '';
  return html`<dl class="stats">
  <div><dt>Ready</dt><dd>${count(stats, stats.ready)}</dd></div>
  <div><dt>Scheduled</dt><dd>${count(stats, stats.scheduled)}</dd></div>
  <div><dt>Running</dt><dd>${count(stats, stats.running)}${stats.max_running === null ? '' : ` / ${stats.max_running}`}</dd></div>
  <div><dt>Expired</dt><dd>${count(stats, stats.expired)}</dd></div>
  <div><dt>Dead</dt><dd>${count(stats, stats.dead)}</dd></div>
  <div><dt>Awaiting parents</dt><dd>${count(stats, stats.awaiting_parents)}</dd></div>
  <div><dt>Done (retention)</dt><dd>${stats.done_recent}</dd></div>
  <div><dt>Oldest ready</dt><dd>${stats.ready > 0 ? seconds(stats.oldest_ready_seconds) : '—'}</dd></div>
</dl>`;
}

// A fair queue's busiest keys (pgq.fair_keys): weight, ready jobs held in
// fair order (+ when more wait), running, claims since active, and how long
// the next one has waited.
function fairKeysBlock(keys) {
  if (!keys || keys.length === 0) return '';
  const rows = keys.map(
    (k) => html`<tr data-key="${k.group_key ?? ''}"><td>${k.group_key === null ? html`<i>none</i>` : k.group_key}</td><td>${k.weight}</td><td>${k.held}${k.more ? '+' : ''}</td><td>${k.running}</td><td>${k.served}</td><td>${seconds(k.waiting_seconds)}</td></tr>`,
  );
  return html`<h2>Group keys in fair order</h2>
<table class="fair-keys"><thead><tr><th>Group key</th><th>Weight</th><th>Ready (held)</th><th>Running</th><th>Served</th><th>Next waited</th></tr></thead>
<tbody>${rows}</tbody></table>
<p class="meta">The busiest keys first (claims since each became active); “+”: more of its ready jobs wait on the ring.</p>`;
}

function queueActions(ctx, queue, stats) {
  const path = `/queues/${encodeURIComponent(queue)}`;
  return html`<div class="actions">
  ${stats?.paused ? actionButton(ctx, `${path}/resume`, 'Resume') : actionButton(ctx, `${path}/pause`, 'Pause')}
  ${actionButton(ctx, `${path}/retry-dead`, 'Retry dead jobs', {
    fields: html`<label>up to <input type="number" name="max" value="1000" min="1" max="1000000" class="small"></label>`,
    confirm: 'Requeue the dead jobs of this queue?',
  })}
  ${actionButton(ctx, `${path}/purge-dead`, 'Purge dead jobs', {
    confirm: 'Delete every dead job of this queue? This cannot be undone.',
    danger: true,
  })}
</div>`;
}

function filterForm(action, filter) {
  const stateOptions = JOB_STATES.map(
    (s) => html`<option value="${s}"${filter.state === s ? html` selected` : ''}>${s}</option>`,
  );
  const reasonOptions = DEAD_REASONS.map(
    (r) => html`<option value="${r}"${filter.reason === r ? html` selected` : ''}>${r}</option>`,
  );
  const limitOptions = [20, 50, 100, 500].map(
    (n) => html`<option value="${n}"${filter.limit === n ? html` selected` : ''}>${n}</option>`,
  );
  return html`<form method="get" action="${action}" class="filter">
  <label>State <select name="state"><option value="">all</option>${stateOptions}</select></label>
  <label>Dead reason <select name="reason"><option value="">any</option>${reasonOptions}</select></label>
  <label>Per page <select name="limit">${limitOptions}</select></label>
  <button type="submit">Show</button>
</form>`;
}

function jobsTable(ctx, jobs, seesPayload, { selectable = false } = {}) {
  const rows = jobs.map(
    (j) => html`<tr data-job-id="${j.id}">
  ${selectable ? html`<td><input type="checkbox" name="ids" value="${j.id}" form="bulk" aria-label="Select job ${j.id}"></td>` : ''}
  <td><a href="${ctx.base}/jobs/${j.id}">${j.id}</a></td>
  <td>${jobStateBadge(j.state)}${deadReason(j)}</td>
  <td>${j.attempt} / ${j.max_attempts}</td>
  <td>${j.priority}</td>
  <td>${time(j.run_at)}</td>
  <td>${time(j.enqueued_at)}</td>
  <td>${time(j.finished_at)}</td>
  <td>${j.group_key}</td>
  <td class="error-text">${truncate(j.last_error, 200)}</td>
  ${seesPayload ? html`<td><code class="payload">${truncate(j.payload, 200)}</code></td>` : ''}
</tr>`,
  );
  return html`<table class="jobs">
<thead><tr>${selectable ? html`<th></th>` : ''}<th>Id</th><th>State</th><th>Attempt</th><th>Priority</th><th>Run at</th><th>Enqueued</th><th>Finished</th><th>Group</th><th>Last error</th>${seesPayload ? html`<th>Payload</th>` : ''}</tr></thead>
<tbody>
${rows}
</tbody>
</table>`;
}

/** The form the jobs' checkboxes belong to (form="bulk"): a first step, confirmed on the next page. */
function bulkForm(ctx, queue, rights) {
  return html`<form method="post" action="${ctx.base}/queues/${encodeURIComponent(queue)}/bulk" id="bulk" class="bulk">${csrfField(ctx)}
  <span>Selected jobs (at most 100):</span>
  ${rights.admin ? html`<button type="submit" name="action" value="retry">Retry…</button>` : ''}
  <button type="submit" name="action" value="cancel" class="danger">Cancel…</button>
  ${rights.admin ? html`<button type="submit" name="action" value="purge" class="danger">Purge…</button>` : ''}
</form>`;
}

function queuePage(ctx, { queue, stats, rights, jobs, filter, nextBeforeId, error, notice: text, keys = [] }) {
  const base = `${ctx.base}/queues/${encodeURIComponent(queue)}`;
  const seesPayload = rights.produce || rights.consume;
  const pageLink = (params) => {
    const q = new URLSearchParams();
    if (filter.state) q.set('state', filter.state);
    if (filter.reason) q.set('reason', filter.reason);
    if (filter.limit !== filter.defaultLimit) q.set('limit', String(filter.limit));
    for (const [k, v] of Object.entries(params)) q.set(k, v);
    const s = q.toString();
    return s ? `${base}?${s}` : base;
  };
  let list = '';
  if (jobs !== null && jobs.length === 0) {
    list = html`<p class="empty">No job${filter.state ? ` in state ${filter.state}` : ''}${filter.reason ? ` dead for reason ${filter.reason}` : ''}${filter.beforeId ? ' older than these' : ''}.</p>`;
  } else if (jobs !== null) {
    // retry_dead takes admin, cancel produce or admin: a role with neither gets no selection
    const selectable = !ctx.readOnly && (rights.admin || rights.produce);
    list = html`${selectable ? bulkForm(ctx, queue, rights) : ''}${jobsTable(ctx, jobs, seesPayload, { selectable })}`;
  }
  const body = html`<h1>Queue ${queue} ${stats?.paused ? html`<span class="badge warn">paused</span>` : ''}</h1>
${queueStatsBlock(stats)}
${fairKeysBlock(keys)}
<p class="meta">This role’s rights on the queue: <b>${rightsLine(rights)}</b>${seesPayload ? '' : ' — payloads, progress and results are not shown to it'}.</p>
${rights.admin && !ctx.readOnly ? queueActions(ctx, queue, stats) : ''}
${filterForm(base, filter)}
${list}
<nav class="pager">
  ${filter.beforeId ? html`<a href="${pageLink({})}">Newest</a>` : ''}
  ${nextBeforeId ? html`<a href="${pageLink({ before_id: nextBeforeId })}" rel="next">Older</a>` : ''}
</nav>`;
  return layout(ctx, { title: `Queue ${queue}`, body, error, notice: text });
}

// ---- A job ------------------------------------------------------------------

const LIVE_STATES = ['scheduled', 'ready', 'waiting', 'running'];

function jsonBlock(label, pretty, visible) {
  if (!visible) return html`<p class="none">${label}: not shown to this role (it holds the admin right only).</p>`;
  if (pretty === null || pretty === undefined) return html`<p class="none">${label}: none.</p>`;
  return html`<h2>${label}</h2><pre class="json">${pretty}</pre>`;
}

function jobLinks(ctx, jobs) {
  return html`<ul class="workflow">${jobs.map(
    (j) =>
      html`<li data-job-id="${j.id}"><a href="${ctx.base}/jobs/${j.id}">Job ${j.id}</a> ${jobStateBadge(j.state)} in <a href="${ctx.base}/queues/${encodeURIComponent(j.queue)}">${j.queue}</a>${j.open_parents ? ` — waits for ${j.open_parents} parent${j.open_parents === 1 ? '' : 's'}` : ''}</li>`,
  )}</ul>`;
}

/** Parents, children and the dependents a dead parent took with it (SPEC §8). */
function workflowBlock(ctx, job, w) {
  if (!w) return '';
  const parts = [];
  const list = (rows, none) =>
    rows.length === 0
      ? html`<p class="none">${none}</p>`
      : html`${jobLinks(ctx, rows)}${rows.length >= w.max ? html`<p class="note">The first ${w.max} shown.</p>` : ''}`;
  if (w.failedParent) {
    parts.push(
      html`<p class="failed-parent">Dead-lettered because its parent <a href="${ctx.base}/jobs/${w.failedParent}">job ${w.failedParent}</a> did not complete (reason dependency_failed).</p>`,
    );
  }
  if (job.open_parents || w.parents.length) {
    parts.push(html`<h3>Waits for</h3>${list(w.parents, 'No parent of a queue this role may read.')}`);
  }
  parts.push(html`<h3>Children waiting for it</h3>${list(w.children, 'None.')}`);
  if (w.taken) {
    parts.push(html`<h3>Dependents it took with it</h3>${list(w.taken, 'None: no job was dead-lettered with it (reason dependency_failed).')}`);
  }
  if (parts.length === 0) return '';
  return html`<section id="workflow"><h2>Workflow</h2>
<p class="meta">Jobs of queues this role holds no right on are not shown. pgq keeps a parent–child link only until it settles: the children of a completed parent are not listed.</p>
${parts}</section>`;
}

const PURGE_ONE = 'Delete this dead job? This cannot be undone.';

function jobPage(ctx, { job, rights, workflow = null, copySql, error, notice: text }) {
  const seesPayload = rights.produce || rights.consume;
  const path = `/jobs/${job.id}`;
  const canCancel = !ctx.readOnly && (rights.produce || rights.admin) && LIVE_STATES.includes(job.state);
  const canRetry = !ctx.readOnly && rights.admin && job.state === 'dead';
  const canPurge = !ctx.readOnly && rights.admin && (job.state === 'dead' || job.state === 'cancelled');
  const actions =
    canCancel || canRetry || canPurge
      ? html`<div class="actions">
  ${canCancel ? actionButton(ctx, `${path}/cancel`, 'Cancel', { confirm: 'Cancel this job?', danger: true }) : ''}
  ${canRetry ? actionButton(ctx, `${path}/retry`, 'Retry') : ''}
  ${canPurge ? actionButton(ctx, `${path}/purge`, 'Purge', { confirm: PURGE_ONE, danger: true }) : ''}
</div>`
      : '';
  const leaseLeft =
    job.state === 'running' && job.lease_left_seconds !== null ? ` (${seconds(job.lease_left_seconds)} left)` : '';
  const copy = copySql
    ? html`<h2>Copy as SQL</h2>
<p class="meta">Enqueues the same payload again (a new job), in psql:</p>
<textarea class="sql" id="copy-sql" readonly rows="4">${copySql}</textarea>
<button type="button" class="copy" data-copy="copy-sql">Copy</button>`
    : '';
  const body = html`<h1>Job ${job.id} ${jobStateBadge(job.state)}</h1>
<p class="meta">Queue <a href="${ctx.base}/queues/${encodeURIComponent(job.queue)}">${job.queue}</a> — this role’s rights: <b>${rightsLine(rights)}</b>.${workflowLinkNeeded(workflow, job) ? html` <a href="#workflow">Workflow</a>` : ''}</p>
${actions}
<dl class="fields">
  <dt>State</dt><dd>${job.state}</dd>
  <dt>Dead reason</dt><dd data-field="dead_reason">${job.dead_reason ?? '—'}</dd>
  <dt>Attempt</dt><dd>${job.attempt} of ${job.max_attempts}</dd>
  <dt>Priority</dt><dd>${job.priority}</dd>
  <dt>Group key</dt><dd>${job.group_key ?? '—'}</dd>
  <dt>Dedupe key</dt><dd>${job.dedupe_key ?? '—'}</dd>
  <dt>Open parents</dt><dd>${job.open_parents ?? '—'}</dd>
  <dt>Trace</dt><dd data-field="trace_id">${traceField(ctx, job.trace_id)}</dd>
  <dt>Run at</dt><dd>${time(job.run_at)}</dd>
  <dt>Enqueued</dt><dd>${time(job.enqueued_at)}</dd>
  <dt>Claimed</dt><dd>${time(job.claimed_at)}</dd>
  <dt>Lease until</dt><dd>${time(job.lease_until)}${leaseLeft}</dd>
  <dt>Finished</dt><dd>${time(job.finished_at)}</dd>
</dl>
<h2>Last error</h2>
${job.last_error === null ? html`<p class="none">none.</p>` : html`<pre class="error-text">${job.last_error}</pre>`}
${jsonBlock('Progress', job.progress_pretty, seesPayload)}
${jsonBlock('Result', job.result_pretty, seesPayload)}
${jsonBlock('Payload', job.payload_pretty, seesPayload)}
${workflowBlock(ctx, job, workflow)}
${copy}`;
  return layout(ctx, { title: `Job ${job.id}`, body, error, notice: text });
}

// The job's trace id (pgq.job_info.trace_id), a link to the tracing UI with
// --trace-url. Only an id of 32 lowercase hex digits goes into the template
// (html`` escapes the whole href all the same); anything else is text.
function traceField(ctx, traceId) {
  if (traceId === null || traceId === undefined) return '—';
  if (!ctx.traceUrl || !TRACE_ID.test(traceId)) return html`<code>${traceId}</code>`;
  return html`<a href="${traceLink(ctx.traceUrl, traceId)}" rel="noreferrer"><code>${traceId}</code></a>`;
}

function workflowLinkNeeded(w, job) {
  return Boolean(w);
}

// ---- Search -------------------------------------------------------------------

function searchPage(ctx, { q, queue, id = null, jobs, more = false, window = 0 }) {
  let results = '';
  if (jobs !== null) {
    const scope = queue ? html`queue <a href="${ctx.base}/queues/${encodeURIComponent(queue)}">${queue}</a>` : 'each queue this role holds a right on';
    results = html`${id !== null && !queue ? html`<p class="none">No job ${id} that this role may read.</p>` : ''}
<p class="meta">Jobs whose dedupe key or group key is “${q}” in ${scope}: every pending, running or waiting one (<code>pgq.find_jobs</code>), and the done, dead or cancelled ones among the newest ${window} jobs of each queue.</p>
${jobs.length === 0 ? html`<p class="empty">No job found.</p>` : jobsTable(ctx, jobs, false)}
${more ? html`<p class="note">The first ${jobs.length} shown.</p>` : ''}`;
  }
  const body = html`<h1>Find a job</h1>
<form method="get" action="${ctx.base}/search" class="filter">
  <label>Job id, dedupe key or group key <input type="search" name="q" value="${q}" maxlength="200" required></label>
  ${queue ? html`<input type="hidden" name="queue" value="${queue}">` : ''}
  <button type="submit">Find</button>
</form>
${results}`;
  return layout(ctx, { title: 'Find a job', body });
}

// ---- Bulk actions ---------------------------------------------------------------

function bulkConfirmPage(ctx, { queue, action, label, jobs }) {
  const rows = jobs.map(
    ({ id, job }) => html`<tr data-job-id="${id}">
  <td><a href="${ctx.base}/jobs/${id}">${id}</a></td>
  <td>${job ? html`${jobStateBadge(job.state)}${deadReason(job)}` : html`<span class="none">not found</span>`}</td>
  <td>${job ? job.queue : '—'}</td>
</tr>`,
  );
  const body = html`<h1>${label} ${jobs.length} job${jobs.length === 1 ? '' : 's'}?</h1>
<p class="meta">Queue <a href="${ctx.base}/queues/${encodeURIComponent(queue)}">${queue}</a>. Nothing has been done yet. The database decides for each job, with this role’s rights; the next page says what happened to each.</p>
<table class="jobs bulk-confirm"><thead><tr><th>Id</th><th>State now</th><th>Queue</th></tr></thead><tbody>${rows}</tbody></table>
<div class="actions">
<form method="post" action="${ctx.base}/queues/${encodeURIComponent(queue)}/bulk/run" class="inline" id="bulk-confirm">${csrfField(ctx)}
  <input type="hidden" name="action" value="${action}">
  ${jobs.map(({ id }) => html`<input type="hidden" name="ids" value="${id}">`)}
  <button type="submit"${action === 'retry' ? '' : html` class="danger"`}>${label} ${jobs.length} job${jobs.length === 1 ? '' : 's'}</button>
</form>
<a href="${ctx.base}/queues/${encodeURIComponent(queue)}">Back, do nothing</a>
</div>`;
  return layout(ctx, { title: `${label} jobs`, body });
}

const outcomeClass = (r) => (r.ok ? 'done' : r.error ? 'refused' : 'unchanged');

function bulkResultPage(ctx, { queue, action, label, results }) {
  const done = results.filter((r) => r.ok).length;
  const rows = results.map(
    // data-word: the outcome word pgq answered, or the refusal's SQLSTATE
    (r) => html`<tr data-job-id="${r.id}" data-outcome="${outcomeClass(r)}" data-word="${r.outcome ?? r.error?.code}">
  <td><a href="${ctx.base}/jobs/${r.id}">${r.id}</a></td>
  <td>${r.error ? html`refused: ${r.error.message} <span class="code">(SQLSTATE ${r.error.code})</span>` : r.text}</td>
</tr>`,
  );
  const body = html`<h1>${label}: ${done} of ${results.length} job${results.length === 1 ? '' : 's'}</h1>
<p class="meta">Queue <a href="${ctx.base}/queues/${encodeURIComponent(queue)}">${queue}</a>.</p>
<table class="jobs bulk-result" data-action="${action}"><thead><tr><th>Id</th><th>What happened</th></tr></thead><tbody>${rows}</tbody></table>`;
  return layout(ctx, { title: `${label} jobs`, body, notice: `${done} of ${results.length} done.` });
}

// ---- Streams --------------------------------------------------------------------

function bytes(n) {
  if (n === null || n === undefined) return '—';
  if (n < 1024) return `${n} B`;
  const units = ['kB', 'MB', 'GB', 'TB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

function streamsPage(ctx, { consumers, segments, max }) {
  const more = (part) => (part.rows && part.rows.length >= max ? html`<p class="note">The first ${max} shown.</p>` : '');
  let consumersPart;
  if (consumers.error) consumersPart = errorBox(consumers.error);
  else if (consumers.rows.length === 0) consumersPart = html`<p class="empty">No consumer of a stream this role holds a right on.</p>`;
  else {
    consumersPart = html`<table class="consumers">
<thead><tr><th>Stream</th><th>Consumer</th><th>Lag (age)</th><th>Lag (events)</th><th>Open batch</th><th>Finished events</th><th>Last finished</th></tr></thead><tbody>
${consumers.rows.map(
  (c) => html`<tr data-stream="${c.stream}" data-consumer="${c.consumer}">
  <td>${c.stream}</td><td>${c.consumer}</td>
  <td>${seconds(c.lag_seconds)}</td>
  <td>${c.pending_capped ? html`<span title="counted up to pgq.monitoring_count_limit">≥ ${c.pending_events}</span>` : c.pending_events}</td>
  <td>${c.batch_open ? html`<span class="badge">open</span> ${seconds(c.batch_age_seconds)}` : 'no'}</td>
  <td>${c.finished_events}</td>
  <td>${time(c.last_finished_at)}</td>
</tr>`,
)}
</tbody></table>${more(consumers)}`;
  }
  let segmentsPart;
  if (segments.error) segmentsPart = errorBox(segments.error);
  else if (segments.rows.length === 0) segmentsPart = html`<p class="empty">No stream.</p>`;
  else {
    const byStream = new Map();
    for (const r of segments.rows) {
      if (!byStream.has(r.stream)) byStream.set(r.stream, []);
      byStream.get(r.stream).push(r);
    }
    segmentsPart = [...byStream].map(([stream, rows]) => {
      const ring = rows[0];
      const total = rows.reduce((a, r) => a + (r.bytes || 0), 0);
      return html`<h3 data-ring="${stream}">${stream}</h3>
<p class="meta">Rotates every ${ring.rotation}; ${ring.generation} rotation${ring.generation === 1 ? '' : 's'} so far, the last at ${time(ring.rotated_at)}; ${ring.segments} segments, ${bytes(total)} in all.</p>
<table class="segments"><thead><tr><th>Segment</th><th>State</th><th>Size</th><th>Opened</th><th>Sealed</th><th>Truncated</th></tr></thead><tbody>
${rows.map(
  (g) => html`<tr data-stream="${stream}" data-segment="${g.segment}">
  <td>${g.segment}</td>
  <td>${g.is_current ? html`<span class="badge">current</span>` : g.empty ? (g.truncated_at ? 'empty (truncated)' : 'empty') : 'sealed, awaiting its readers'}</td>
  <td>${bytes(g.bytes)}</td><td>${time(g.opened_at)}</td><td>${time(g.sealed_at)}</td><td>${time(g.truncated_at)}</td>
</tr>`,
)}
</tbody></table>`;
    });
    segmentsPart = html`${segmentsPart}${more(segments)}`;
  }
  const body = html`<h1>Streams</h1>
<h2>Consumers</h2>
<p class="meta">From pgq.stream_stats: the consumers of the streams this role holds a right on. Lag: the age of its oldest unfinished event, and how many events it has not finished.</p>
${consumersPart}
<h2>Segments, rotation and truncation</h2>
<p class="meta">From pgq.stream_segments(): the streams this role holds a right on. Each stream is a ring of segment tables: new events go to the current one; maintenance turns the ring every rotation interval and truncates a sealed segment once every consumer has passed it.</p>
${segmentsPart}`;
  return layout(ctx, { title: 'Streams', body });
}

// ---- Schedules, workers, coordination ---------------------------------------

function scheduleRunsBlock(ctx, runs, max) {
  if (runs.error) return errorBox(runs.error);
  if (runs.rows.length === 0) return html`<p class="empty">No run of a schedule of a queue this role administers.</p>`;
  const row = (r) => html`<tr data-schedule="${r.schedule_name}">
  <td>${r.schedule_name}</td>
  <td><a href="${ctx.base}/queues/${encodeURIComponent(r.queue)}">${r.queue}</a></td>
  <td>${time(r.slot)}</td>
  <td>${time(r.fired_at)}</td>
  <td>${r.job_id ? html`<a href="${ctx.base}/jobs/${r.job_id}">${r.job_id}</a>` : '—'}</td>
</tr>`;
  return html`${runs.rows.length >= max ? html`<p class="note">The newest ${max}.</p>` : ''}<table class="schedule-runs">
<thead><tr><th>Schedule</th><th>Queue</th><th>Slot</th><th>Fired</th><th>Job</th></tr></thead>
<tbody>
${runs.rows.map(row)}
</tbody></table>`;
}

function schedulesPage(ctx, { rows, error, runs = null, runsMax = 0 }) {
  const row = (s) => html`<tr data-schedule="${s.name}">
  <td>${s.name}</td>
  <td><a href="${ctx.base}/queues/${encodeURIComponent(s.queue)}">${s.queue}</a></td>
  <td><code>${s.spec}</code></td>
  <td>${s.timezone}</td>
  <td>${time(s.next_run_at)}</td>
  <td>${time(s.last_run_at)}</td>
  <td>${s.last_job_id ? html`<a href="${ctx.base}/jobs/${s.last_job_id}">${s.last_job_id}</a>` : '—'}</td>
  <td>${yesNo(s.running)}</td>
  <td><code class="payload">${truncate(s.payload, 200)}</code></td>
</tr>`;
  let table = '';
  if (rows !== null && rows.length === 0) table = html`<p class="empty">No schedule.</p>`;
  else if (rows !== null) {
    table = html`<table class="schedules">
<thead><tr><th>Name</th><th>Queue</th><th>Spec</th><th>Time zone</th><th>Next run</th><th>Last run</th><th>Last job</th><th>Last run still live</th><th>Payload</th></tr></thead>
<tbody>
${rows.map(row)}
</tbody></table>`;
  }
  const body = html`<h1>Schedules</h1>
<p class="meta">Schedules of the queues this role holds a right on. “Last run still live”: the job of the last firing is pending or running (an <code>@every</code> schedule waits for it; a cron one may overlap it).</p>
${table}
${runs ? html`<h2>Recent runs</h2>
<p class="meta">Each firing, newest first, of the schedules of the queues this role administers (<code>pgq.list_schedule_runs()</code>).</p>
${scheduleRunsBlock(ctx, runs, runsMax)}` : ''}`;
  return layout(ctx, { title: 'Schedules', body, error });
}

function workersTable(workers) {
  if (workers.length === 0) {
    return html`<p class="empty">No pgq background worker is running (is pgq_cpp in <code>shared_preload_libraries</code>?).</p>`;
  }
  const row = (w) =>
    html`<tr data-pid="${w.pid}"><td>${w.pid}</td><td>${w.kind}</td><td>${w.database ?? '—'}</td><td>${time(w.started_at)}</td><td>${time(w.last_pass_at)}</td><td>${w.state ?? '—'}</td><td>${w.wait_event ?? '—'}</td></tr>`;
  return html`<table class="workers">
<thead><tr><th>Pid</th><th>Kind</th><th>Database</th><th>Started</th><th>Last pass</th><th>State</th><th>Wait event</th></tr></thead>
<tbody>
${workers.map(row)}
</tbody></table>`;
}

function runningTable(ctx, running, runningMax) {
  if (running.length === 0) return html`<p class="empty">No job is running.</p>`;
  const row = (r) => html`<tr data-job-id="${r.id}"${r.expired ? html` class="expired"` : ''}>
  <td><a href="${ctx.base}/jobs/${r.id}">${r.id}</a></td>
  <td><a href="${ctx.base}/queues/${encodeURIComponent(r.queue)}">${r.queue}</a></td>
  <td>${r.attempt} / ${r.max_attempts}</td>
  <td>${time(r.claimed_at)}</td>
  <td>${seconds(r.running_seconds)}</td>
  <td data-field="lease_left">${r.expired ? html`<span class="badge warn">expired</span> ` : ''}${seconds(r.lease_left_seconds)}</td>
  <td data-field="claimer">${r.claimer_role ?? '?'} (pid ${r.claimer_pid ?? '?'})</td>
  <td>${r.claimer_application ?? '—'}</td>
  <td>${r.claimer_address ?? 'local'}</td>
  <td>${yesNo(r.claimer_connected)}</td>
</tr>`;
  return html`${running.length >= runningMax ? html`<p class="note">The ${runningMax} longest running.</p>` : ''}<table class="running">
<thead><tr><th>Job</th><th>Queue</th><th>Attempt</th><th>Claimed</th><th>Running for</th><th>Lease left</th><th>Claimer</th><th>Application</th><th>Address</th><th>Connected</th></tr></thead>
<tbody>
${running.map(row)}
</tbody></table>`;
}

function claimersTable(ctx, claimers, max) {
  if (claimers.length === 0) {
    return html`<p class="empty">No session holds a claim on a queue this role administers.</p>`;
  }
  const row = (c) => html`<tr data-queue="${c.queue}" data-pid="${c.claimer_pid ?? ''}">
  <td><a href="${ctx.base}/queues/${encodeURIComponent(c.queue)}">${c.queue}</a></td>
  <td data-field="claimer">${c.claimer_role ?? '?'} (pid ${c.claimer_pid ?? '?'})</td>
  <td>${c.claimer_application ?? '—'}</td>
  <td>${c.claimer_address ?? 'local'}</td>
  <td>${yesNo(c.claimer_connected)}</td>
  <td>${time(c.connected_since)}</td>
  <td data-field="running">${c.running}</td>
  <td>${c.expired ? html`<span class="badge warn">${c.expired}</span>` : '0'}</td>
  <td>${time(c.oldest_claimed_at)}</td>
  <td>${time(c.newest_claimed_at)}</td>
</tr>`;
  return html`${claimers.length >= max ? html`<p class="note">The first ${max} shown.</p>` : ''}<table class="claimers">
<thead><tr><th>Queue</th><th>Session</th><th>Application</th><th>Address</th><th>Connected</th><th>Since</th><th>Running</th><th>Expired leases</th><th>Oldest claim</th><th>Newest claim</th></tr></thead>
<tbody>
${claimers.map(row)}
</tbody></table>`;
}

function workersPage(
  ctx,
  { workers, workersError, running, runningError, runningMax, claimers = [], claimersError = null },
) {
  const body = html`<h1>Workers</h1>
<h2>Claiming sessions</h2>
<p class="meta">Per queue this role administers, each session holding claims (<code>pgq.queue_workers()</code>).</p>
${claimersError ? errorBox(claimersError) : claimersTable(ctx, claimers, runningMax)}
<h2>Background workers</h2>
${workersError ? errorBox(workersError) : workersTable(workers)}
<h2>Running jobs</h2>
${runningError ? errorBox(runningError) : runningTable(ctx, running, runningMax)}`;
  return layout(ctx, { title: 'Workers', body });
}

function coordinationPage(ctx, { teams, switches, ladders, max }) {
  const section = (title, part, render) => {
    let content;
    if (part.error) content = errorBox(part.error);
    else if (part.rows.length === 0) content = html`<p class="empty">None.</p>`;
    else content = render(part.rows);
    const more = part.rows && part.rows.length >= max ? html`<p class="note">The first ${max} shown.</p>` : '';
    return html`<h2>${title}</h2>
${content}
${more}`;
  };
  const teamsTable = (rows) => html`<table class="teams">
<thead><tr><th>Team</th><th>Turns spent</th><th>Last turn</th><th>Active members</th><th>Inactive members</th></tr></thead><tbody>
${rows.map(
  (t) =>
    html`<tr data-team="${t.name}"><td>${t.name}</td><td>${t.turn}</td><td>${t.last_member ?? '—'}</td><td>${t.active_members.join(', ')}</td><td>${t.inactive_members.join(', ')}</td></tr>`,
)}
</tbody></table>`;
  const switchesTable = (rows) => html`<table class="switches">
<thead><tr><th>Switch</th><th>Value</th><th>Updated</th></tr></thead><tbody>
${rows.map((s) => html`<tr data-switch="${s.name}"><td>${s.name}</td><td>${s.value ? 'on' : 'off'}</td><td>${time(s.updated_at)}</td></tr>`)}
</tbody></table>`;
  const laddersTable = (rows) => html`<table class="ladders">
<thead><tr><th>Subject</th><th>Step</th><th>Updated</th></tr></thead><tbody>
${rows.map((l) => html`<tr data-ladder="${l.subject}"><td>${l.subject}</td><td>${l.step}</td><td>${time(l.updated_at)}</td></tr>`)}
</tbody></table>`;
  const body = html`<h1>Teams, switches, ladders</h1>
<p class="meta">Read-only. Coordination is not about queues: its readers (<code>pgq.list_teams</code>, <code>list_switches</code>, <code>list_ladders</code>) are granted with <code>GRANT EXECUTE</code>, as its other functions (see the dashboard’s README).</p>
${section('Teams', teams, teamsTable)}
${section('Switches', switches, switchesTable)}
${section('Ladders', ladders, laddersTable)}`;
  return layout(ctx, { title: 'Teams, switches, ladders', body });
}

module.exports = {
  layout,
  errorPage,
  errorBox,
  loginPage,
  overviewPage,
  overviewCells,
  queuePage,
  jobPage,
  searchPage,
  bulkConfirmPage,
  bulkResultPage,
  outcomeText,
  jobNoticeCode,
  streamsPage,
  schedulesPage,
  workersPage,
  coordinationPage,
  notice,
};
