// The progress page's poller: it asks how the demo is coming along a few
// times a second and goes on to it as soon as it is ready. Without
// scripts the page refreshes itself instead. No tenant data is ever in
// this file; it reads the status URL from the page.
(function () {
  "use strict";
  var body = document.body;
  var statusURL = body.getAttribute("data-status");
  if (!statusURL) { return; }
  var bar = document.getElementById("progress");
  var pct = document.getElementById("percent");
  function poll() {
    fetch(statusURL, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : { state: "gone" }; })
      .then(function (s) {
        if (s.state === "ready" || s.state === "failed" || s.state === "gone") {
          window.location.replace(window.location.href);
          return;
        }
        if (bar && typeof s.progress === "number") { bar.value = s.progress; }
        if (pct && typeof s.progress === "number") { pct.textContent = s.progress + "%"; }
        setTimeout(poll, 250);
      })
      .catch(function () { setTimeout(poll, 1000); });
  }
  setTimeout(poll, 150);
})();
