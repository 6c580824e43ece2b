// The script of the `mitra report` page (report_page.h), embedded at build time. It reads the
// JSON of <script id="report-data"> and draws the charts with Chart.js; see report_page.h for
// the attributes it leaves on <body>.
(function () {
  const errors = window.reportErrors || [];
  let drawn = 0;
  try {
    const data = JSON.parse(document.getElementById('report-data').textContent);
    const colors = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b',
                    '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
    Chart.defaults.animation = false;
    Chart.defaults.maintainAspectRatio = false;
    const clock = function (seconds) {
      const s = Math.max(0, Math.round(seconds));
      const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
      return (h ? h + ':' + String(m).padStart(2, '0') : String(m)) + ':' +
             String(r).padStart(2, '0');
    };
    const seconds = function (v) { return v < 1 ? (v * 1000).toFixed(1) + ' ms' : v.toFixed(2) + ' s'; };
    const draw = function (id, make) {
      const canvas = document.getElementById(id);
      if (!canvas) return;
      try { new Chart(canvas, make()); drawn++; }
      catch (e) { errors.push(id + ': ' + (e && e.stack ? e.stack : e)); }
    };
    const axis = function (title, extra) {
      return Object.assign({ title: { display: true, text: title } }, extra || {});
    };
    // m:ss, or seconds for a run shorter than a minute (whose ticks fall between seconds).
    const timeTick = function (value, index, ticks) {
      if (this.max - this.min >= 60) return clock(value);
      return Chart.Ticks.formatters.numeric.call(this, value, index, ticks) + ' s';
    };
    const timeAxis = function () {
      return axis('wall time since start', { type: 'linear', ticks: { callback: timeTick } });
    };
    const stepAxis = function () { return axis('step', { type: 'linear' }); };
    const titled = function (text) { return { title: { display: true, text: text } }; };

    const s = data.steps;
    const shapes = {};
    data.generations.forEach(function (g) { shapes[g.generation] = g.shape; });
    const gens = Array.from(new Set(s.generation));
    // One series per generation: a step trained again after a recovery is its own line.
    const perGeneration = function (xs, ys, asLine) {
      return gens.map(function (g, k) {
        const points = [];
        s.generation.forEach(function (v, i) { if (v === g) points.push({ x: xs[i], y: ys[i] }); });
        const mean = points.reduce(function (a, p) { return a + p.y; }, 0) / points.length;
        return {
          label: 'gen ' + g + (shapes[g] ? ' (' + shapes[g] + ')' : '') +
                 (asLine ? '' : ': mean ' + seconds(mean)),
          data: points, borderColor: colors[k % 10], backgroundColor: colors[k % 10],
          showLine: asLine, pointRadius: asLine ? 0 : 2, borderWidth: 1.5
        };
      });
    };
    const evalSet = function (key) {
      return { label: 'evaluation loss', showLine: false, pointRadius: 4, pointStyle: 'rectRot',
               borderColor: '#000', backgroundColor: '#000',
               data: data.evals.map(function (e) { return { x: e[key], y: e.loss }; }) };
    };
    const plot = function (id, title, x, datasets, yTitle, fromZero) {
      draw(id, function () {
        return { type: 'scatter', data: { datasets: datasets },
                 options: { plugins: titled(title),
                            scales: { x: x, y: axis(yTitle, { beginAtZero: !!fromZero }) } } };
      });
    };
    const withEvals = function (sets, key) { return data.evals.length ? sets.concat([evalSet(key)]) : sets; };
    plot('loss_step', 'Loss over steps', stepAxis(), withEvals(perGeneration(s.step, s.loss, true), 'step'), 'loss');
    plot('rate_step', 'Throughput over steps', stepAxis(), perGeneration(s.step, s.rate, true), data.rate_unit);
    plot('loss_time', 'Loss over wall time', timeAxis(), withEvals(perGeneration(s.time, s.loss, true), 'time'), 'loss');
    plot('rate_time', 'Throughput over wall time', timeAxis(), perGeneration(s.time, s.rate, true), data.rate_unit);
    plot('step_time', 'Step time of each step, by generation', stepAxis(),
         perGeneration(s.step, s.step_time, false), 'seconds per step', true);

    draw('timeline', function () {
      const rows = ['downtime', 'checkpoints'].concat(data.generations.map(function (g) {
        return 'gen ' + g.generation + ' (' + g.shape + ')';
      }));
      let end = 1;
      data.generations.forEach(function (g) { end = Math.max(end, g.end); });
      const thin = end * 0.004;  // so that an instant stays visible
      const span = function (row, from, to, note) {
        return { y: row, x: [from, Math.max(to, from + thin)], note: note };
      };
      const bars = function (label, color, items) {
        return { label: label, backgroundColor: color, data: items, grouped: false,
                 barPercentage: 0.7, categoryPercentage: 1 };
      };
      const phase = function (name, color, offset, length) {
        return bars(name, color, data.changes.map(function (c) {
          return span('downtime', c.start + offset(c), c.start + offset(c) + length(c),
                      c.kind + ' to gen ' + c.generation + ', ' + name + ' ' + seconds(length(c)));
        }));
      };
      return {
        type: 'bar',
        data: { labels: rows, datasets: [
          bars('training', colors[0], data.generations.map(function (g, k) {
            return span(rows[k + 2], g.start, g.end, 'gen ' + g.generation + ' ' + clock(g.start) + '-' + clock(g.end));
          })),
          phase('stop', colors[1], function () { return 0; }, function (c) { return c.stop; }),
          phase('relaunch', colors[4], function (c) { return c.stop; }, function (c) { return c.relaunch; }),
          phase('start-up, load and first step', colors[8], function (c) { return c.stop + c.relaunch; }, function (c) { return c.first_step; }),
          bars('failure', colors[3], data.failures.map(function (f) {
            return span('downtime', f.time, f.time, 'rank ' + f.rank + ': ' + f.reason);
          })),
          bars('checkpoint', colors[2], data.checkpoints.map(function (c) {
            return span('checkpoints', c.time - c.total, c.time, 'step ' + c.step + ': blocked ' +
                        seconds(c.blocked) + ', total ' + seconds(c.total));
          }))
        ] },
        options: {
          indexAxis: 'y',
          plugins: Object.assign(titled('Timeline: generations, downtime of each morph and recovery, checkpoints'),
                                 { tooltip: { callbacks: { label: function (ctx) { return ctx.raw.note; } } } }),
          scales: { x: Object.assign(timeAxis(), { min: 0, max: end }), y: { stacked: true } }
        }
      };
    });

    draw('checkpoints', function () {
      const labels = data.checkpoints.map(function (c) { return 'step ' + c.step; });
      const set = function (label, key, color) {
        return { label: label, backgroundColor: color,
                 data: data.checkpoints.map(function (c) { return c[key] * 1000; }) };
      };
      return { type: 'bar',
               data: { labels: labels, datasets: [set('blocked (ms)', 'blocked', colors[3]),
                                                  set('total (ms)', 'total', colors[2])] },
               options: { plugins: titled('Checkpoints: time training was blocked, and total time'),
                          scales: { y: axis('milliseconds') } } };
    });

    // The newest generation's ranks.
    const newest = data.ranks.reduce(function (a, r) { return Math.max(a, r.generation); }, -1);
    const ranks = data.ranks.filter(function (r) { return r.generation === newest; });
    draw('ranks', function () {
      const set = function (label, key, color) {
        return { label: label, backgroundColor: color, stack: 'step',
                 data: ranks.map(function (r) { return r[key] * 1000; }) };
      };
      return { type: 'bar',
               data: { labels: ranks.map(function (r) { return 'rank ' + r.rank + ' (stage ' + r.stage + ')'; }),
                       datasets: [set('compute (ms)', 'compute', colors[0]), set('wait (ms)', 'wait', colors[7])] },
               options: { plugins: titled('Generation ' + newest + ': compute and wait per step of each rank'),
                          scales: { x: { stacked: true }, y: axis('milliseconds per step', { stacked: true }) } } };
    });
    draw('rank_compute', function () {
      const byRank = {};
      data.rank_series.forEach(function (p) {
        if (p.generation !== newest) return;
        (byRank[p.rank] = byRank[p.rank] || []).push({ x: p.step, y: p.compute * 1000 });
      });
      const sets = Object.keys(byRank).map(function (rank, k) {
        return { label: 'rank ' + rank, data: byRank[rank], showLine: true, pointRadius: 1,
                 borderColor: colors[k % 10], backgroundColor: colors[k % 10], borderWidth: 1.5 };
      });
      return { type: 'scatter', data: { datasets: sets },
               options: { plugins: titled('Generation ' + newest + ': compute per step of each rank over steps'),
                          scales: { x: stepAxis(), y: axis('milliseconds per step') } } };
    });
    // Where machines differ: each generation's micro-batches by machine (a replica counted on
    // its first stage's machine), in percent of the step's.
    draw('machine_shares', function () {
      const machines = [];
      data.machine_shares.forEach(function (g) {
        g.machines.forEach(function (m) { if (machines.indexOf(m) < 0) machines.push(m); });
      });
      const sets = machines.map(function (m, k) {
        return { label: m, backgroundColor: colors[k % 10], stack: 'batch',
                 data: data.machine_shares.map(function (g) {
                   let sum = 0;
                   g.machines.forEach(function (x, d) { if (x === m) sum += g.fractions[d]; });
                   return sum * 100;
                 }) };
      });
      return { type: 'bar',
               data: { labels: data.machine_shares.map(function (g) { return 'generation ' + g.generation + ' (' + g.shape + ')'; }),
                       datasets: sets },
               options: { plugins: titled("Each machine's part of a step's micro-batches"),
                          scales: { x: { stacked: true }, y: axis('percent of the step', { stacked: true, max: 100 }) } } };
    });
  } catch (e) {
    errors.push(e && e.stack ? e.stack : String(e));
  }
  document.getElementById('errors').textContent = errors.join('\n');
  document.body.setAttribute('data-chart-count', String(drawn));
  document.body.setAttribute('data-charts', errors.length ? 'failed' : 'drawn');
})();
