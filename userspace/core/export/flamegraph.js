(function () {
  var svg = document.documentElement;
  var PAD = +svg.getAttribute('data-pad'), IW = +svg.getAttribute('data-iw'), CW = 7;
  var frames = Array.prototype.slice.call(document.querySelectorAll('g.f'));
  var details = document.getElementById('details');
  var unzoomBtn = document.getElementById('unzoom');
  var matched = document.getElementById('matched');
  var input = document.getElementById('search');
  function label(g, w) {
    var n = g.getAttribute('data-n'), c = Math.floor((w - 6) / CW);
    if (c < 3) return '';
    return n.length <= c ? n : n.substr(0, c - 2) + '..';
  }
  function place(g, x, w) {
    var r = g.querySelector('rect'), t = g.querySelector('text');
    r.setAttribute('x', x.toFixed(2));
    r.setAttribute('width', Math.max(w, 0).toFixed(2));
    t.setAttribute('x', (x + 3).toFixed(2));
    t.textContent = label(g, w);
  }
  function num(g, k) { return +g.getAttribute('data-' + k); }
  function zoom(target) {
    var x0 = num(target, 'x'), w0 = num(target, 'w'), d0 = num(target, 'd'), eps = 1e-9;
    frames.forEach(function (g) {
      var x = num(g, 'x'), w = num(g, 'w'), d = num(g, 'd');
      if (d < d0 && x <= x0 + eps && x + w >= x0 + w0 - eps) {
        g.style.display = ''; g.classList.add('parent'); place(g, PAD, IW);
      } else if (d >= d0 && x >= x0 - eps && x + w <= x0 + w0 + eps) {
        g.style.display = ''; g.classList.remove('parent');
        place(g, PAD + (x - x0) / w0 * IW, w / w0 * IW);
      } else {
        g.style.display = 'none';
      }
    });
    unzoomBtn.style.opacity = 1;
  }
  function unzoom() {
    frames.forEach(function (g) {
      g.style.display = ''; g.classList.remove('parent');
      place(g, PAD + num(g, 'x') * IW, num(g, 'w') * IW);
    });
    unzoomBtn.style.opacity = 0.2;
  }
  function search(term) {
    var re = null;
    if (term) { try { re = new RegExp(term); } catch (e) { re = new RegExp(term.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')); } }
    var spans = [];
    frames.forEach(function (g) {
      var r = g.querySelector('rect');
      if (!r.hasAttribute('data-c')) r.setAttribute('data-c', r.getAttribute('fill'));
      if (re && re.test(g.getAttribute('data-n'))) {
        r.setAttribute('fill', 'rgb(230,0,230)');
        spans.push([num(g, 'x'), num(g, 'x') + num(g, 'w')]);
      } else {
        r.setAttribute('fill', r.getAttribute('data-c'));
      }
    });
    spans.sort(function (a, b) { return a[0] - b[0]; });
    var total = 0, end = -1;
    spans.forEach(function (s) {
      if (s[0] >= end) { total += s[1] - s[0]; end = s[1]; }
      else if (s[1] > end) { total += s[1] - end; end = s[1]; }
    });
    matched.textContent = re ? 'Matched: ' + (100 * total).toFixed(1) + '%' : '';
  }
  frames.forEach(function (g) {
    g.addEventListener('click', function () { zoom(g); });
    g.addEventListener('mouseover', function () { details.textContent = g.querySelector('title').textContent; });
    g.addEventListener('mouseout', function () { details.textContent = ' '; });
  });
  unzoomBtn.addEventListener('click', unzoom);
  if (input) {
    input.addEventListener('input', function () { search(input.value); });
    input.addEventListener('keydown', function (e) { if (e.key === 'Escape') { input.value = ''; search(''); } });
  }
  window.addEventListener('keydown', function (e) {
    if (input && (e.ctrlKey || e.metaKey) && e.key === 'f') { e.preventDefault(); input.focus(); }
  });
})();
