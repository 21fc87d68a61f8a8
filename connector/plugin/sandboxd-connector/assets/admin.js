/* Sandboxd Connector admin page: drives the copy through admin-ajax steps. */
(function () {
	'use strict';
	var cfg = window.sbxConnector;
	if (!cfg) {
		return;
	}
	function el(id) { return document.getElementById(id); }
	var running = false, timer = null, failures = 0;

	function show(node, on) {
		if (node) { node.hidden = !on; }
	}

	function call(action, extra, done) {
		var xhr = new XMLHttpRequest();
		var body = 'action=' + encodeURIComponent(action) + '&nonce=' + encodeURIComponent(cfg.nonce);
		Object.keys(extra || {}).forEach(function (k) {
			body += '&' + encodeURIComponent(k) + '=' + encodeURIComponent(extra[k]);
		});
		xhr.open('POST', cfg.ajaxUrl, true);
		xhr.setRequestHeader('Content-Type', 'application/x-www-form-urlencoded; charset=UTF-8');
		xhr.onload = function () {
			var res = null;
			try { res = JSON.parse(xhr.responseText); } catch (e) { res = null; }
			if (res && res.success) {
				done(null, res.data);
			} else {
				done((res && res.data && res.data.message) || cfg.i18n.network, null);
			}
		};
		xhr.onerror = function () { done(cfg.i18n.network, null); };
		xhr.send(body);
	}

	function render(v) {
		var p = el('sbx-progress');
		if (!p || !v) { return; }
		p.setAttribute('data-state', v.state);
		show(p, v.state !== 'idle' || v.label !== '');
		var fill = p.querySelector('.sbx-bar-fill');
		if (fill) { fill.style.width = (v.percent || 0) + '%'; }
		el('sbx-phase').textContent = v.label || '';
		el('sbx-error').textContent = v.error || '';
		show(el('sbx-error'), !!v.error);
		show(el('sbx-resume'), !!v.paused);
		show(el('sbx-cancel'), !!v.active);
		show(el('sbx-start'), !v.active && v.connected);
		var link = el('sbx-result-url');
		if (link) {
			link.textContent = v.siteUrl || '';
			link.href = v.siteUrl || '#';
			show(link.parentNode, v.state === 'ready');
		}
		var notes = el('sbx-notes');
		if (notes) {
			notes.textContent = '';
			(v.notes || []).forEach(function (n) {
				var li = document.createElement('li');
				li.textContent = n;
				notes.appendChild(li);
			});
		}
	}

	function schedule(v) {
		clearTimeout(timer);
		running = false;
		if (!v || !v.active || v.paused) { return; }
		running = true;
		var wait = v.busy ? 3000 : (v.state === 'restoring' ? 3000 : 50);
		timer = setTimeout(function () { step(false); }, wait);
	}

	function step(resume) {
		running = true;
		call('sbx_step', resume ? { resume: 1 } : {}, function (err, v) {
			if (err) {
				// A request that died (timeout, 5xx) is retried: the server
				// redoes the step from its last saved point.
				failures++;
				if (failures <= 3) {
					timer = setTimeout(function () { step(resume); }, 2000 * failures);
					return;
				}
				failures = 0;
				running = false;
				el('sbx-error').textContent = err;
				show(el('sbx-error'), true);
				show(el('sbx-resume'), true);
				return;
			}
			failures = 0;
			render(v);
			schedule(v);
		});
	}

	function on(id, fn) {
		var node = el(id);
		if (node) { node.addEventListener('click', fn); }
	}

	on('sbx-start', function () {
		el('sbx-start').disabled = true;
		call('sbx_start', {}, function (err, v) {
			el('sbx-start').disabled = false;
			if (err) {
				show(el('sbx-progress'), true);
				el('sbx-error').textContent = err;
				show(el('sbx-error'), true);
				return;
			}
			render(v);
			schedule(v);
		});
	});
	on('sbx-resume', function () {
		show(el('sbx-resume'), false);
		clearTimeout(timer);
		step(true);
	});
	on('sbx-cancel', function () {
		if (!window.confirm(cfg.i18n.confirmCancel)) { return; }
		clearTimeout(timer);
		call('sbx_cancel', {}, function (err, v) {
			if (err) {
				el('sbx-error').textContent = err;
				show(el('sbx-error'), true);
				return;
			}
			render(v);
			schedule(v);
		});
	});
	on('sbx-open-admin', function () {
		// Open the window now (a popup opened after the request would be
		// blocked), then send it to the one-time link fetched fresh.
		var w = window.open('', '_blank');
		if (w) {
			try { w.opener = null; w.document.title = cfg.i18n.opening; } catch (e) { /* ignore */ }
		}
		call('sbx_login', {}, function (err, d) {
			if (err || !d || !/^https?:\/\//i.test(d.loginUrl)) {
				if (w) { w.close(); }
				el('sbx-error').textContent = err || cfg.i18n.network;
				show(el('sbx-error'), true);
				return;
			}
			if (w) {
				w.location.href = d.loginUrl;
			} else {
				window.location.href = d.loginUrl;
			}
		});
	});

	render(cfg.view);
	// Reopening the page resumes a copy that was running.
	schedule(cfg.view);
}());
