'use strict';

// The overview: sparklines (uPlot) of each queue's depth and completions per
// second from the samples the server keeps, and a refresh of the numbers
// every interval from the JSON endpoint (which serves the latest sample: no
// query per open page). Everything is set as text, never as markup.
(function () {
  var holder = document.getElementById('overview-data');
  if (!holder) return;
  var config = JSON.parse(holder.textContent);
  var charts = {};

  function seriesOf(series, queue, name) {
    var q = series.queues[queue];
    return [
      series.t,
      q
        ? q[name]
        : series.t.map(function () {
            return null;
          }),
    ];
  }

  function makeChart(el, data) {
    var color = el.getAttribute('data-series') === 'depth' ? '#3465a4' : '#4e9a06';
    var opts = {
      width: 140,
      height: 32,
      pxAlign: false,
      cursor: { show: false },
      legend: { show: false },
      select: { show: false },
      scales: {
        x: { time: false },
        y: {
          range: function (u, min, max) {
            return [0, Math.max(1, max || 0)];
          },
        },
      },
      axes: [{ show: false }, { show: false }],
      series: [{}, { stroke: color, width: 1.5, fill: color + '22', spanGaps: true }],
    };
    return new uPlot(opts, data, el);
  }

  function drawAll(series) {
    var els = document.querySelectorAll('.spark');
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      var key = el.getAttribute('data-queue') + '\u0000' + el.getAttribute('data-series');
      var data = seriesOf(series, el.getAttribute('data-queue'), el.getAttribute('data-series'));
      if (charts[key]) charts[key].setData(data);
      else if (window.uPlot) charts[key] = makeChart(el, data);
    }
  }

  function rowOf(queue) {
    var rows = document.querySelectorAll('#queues tbody tr');
    for (var i = 0; i < rows.length; i++) if (rows[i].getAttribute('data-queue') === queue) return rows[i];
    return null;
  }

  function update(body) {
    body.queues.forEach(function (q) {
      var row = rowOf(q.queue);
      if (!row) return; // a queue created since the page loaded: shown on the next load
      row.classList.toggle('paused', q.paused);
      Object.keys(q.cells).forEach(function (field) {
        var cell = row.querySelector('td[data-field="' + field + '"]');
        if (cell && cell.textContent !== q.cells[field]) cell.textContent = q.cells[field];
      });
    });
    drawAll(body.series);
  }

  function refresh() {
    fetch(config.api, { credentials: 'same-origin', headers: { accept: 'application/json' } })
      .then(function (res) {
        if (res.status === 401) {
          window.location.reload(); // the session ended: the page goes to the login form
          return null;
        }
        return res.ok ? res.json() : null;
      })
      .then(function (body) {
        if (body) update(body);
      })
      .catch(function () {}) // the next refresh tries again
      .then(function () {
        setTimeout(refresh, config.intervalMs);
      });
  }

  drawAll(config.series);
  setTimeout(refresh, config.intervalMs);
})();
