(function () {
  'use strict';
  var body = document.body, errors = [];
  function showErrors() {
    body.setAttribute('data-js-errors', String(errors.length));
    if (errors.length) {
      var box = document.getElementById('qc-js-errors');
      box.style.display = 'block';
      box.textContent = 'JavaScript errors while drawing the figures: ' + errors.join(' | ');
    }
  }
  window.addEventListener('error', function (e) { errors.push(String(e.message)); showErrors(); });
  var specs = JSON.parse(document.getElementById('qc-chart-specs').textContent);
  body.setAttribute('data-charts-expected', String(specs.length));
  if (typeof Chart === 'undefined') {
    errors.push('Chart.js did not load'); showErrors();
    body.setAttribute('data-charts-status', 'failed');
    return;
  }
  function pow2Tick(value) { return Number.isInteger(value) ? '2^' + value : ''; }
  var drawn = 0;
  specs.forEach(function (spec) {
    try {
      var cfg = spec.config;
      (spec.log2_axes || []).forEach(function (axis) {
        cfg.options.scales = cfg.options.scales || {};
        var s = cfg.options.scales[axis] = cfg.options.scales[axis] || {};
        s.ticks = s.ticks || {};
        s.ticks.callback = pow2Tick;
      });
      var canvas = document.getElementById(spec.id);
      new Chart(canvas.getContext('2d'), cfg);
      var w = canvas.width, h = canvas.height, px = canvas.getContext('2d').getImageData(0, 0, w, h).data, ink = 0;
      for (var i = 3; i < px.length; i += 4) { if (px[i] !== 0) { ink++; } }
      canvas.setAttribute('data-ink-pixels', String(ink));
      if (w > 0 && h > 0 && ink > 0) { canvas.setAttribute('data-rendered', 'true'); drawn++; }
    } catch (e) {
      errors.push(spec.id + ': ' + e.message);
    }
  });
  body.setAttribute('data-charts-rendered', String(drawn));
  body.setAttribute('data-charts-status', drawn === specs.length && errors.length === 0 ? 'ok' : 'incomplete');
  document.title = document.title + ' [charts ' + drawn + '/' + specs.length + ']';
  // The layout, for a headless browser to check that the page fits its window (no horizontal scroll).
  body.setAttribute('data-scroll-width', String(document.documentElement.scrollWidth));
  body.setAttribute('data-viewport-width', String(document.documentElement.clientWidth));
  showErrors();
})();
