// The live page: each snapshot the driver pushes (server-sent events)
// replaces the live part and the report below it. The HTML comes from the
// driver, escaped there. When the run is over, its final state stays on
// the page and the stream is closed, so a tab left open keeps it.
"use strict";
(function () {
  const token = new URLSearchParams(window.location.search).get("token") || "";
  const parts = {
    pipeline: document.getElementById("pipeline"),
    connection: document.getElementById("connection"),
    live: document.getElementById("live"),
    report: document.getElementById("report"),
  };
  document.getElementById("report-link").href = "report.html?token=" + encodeURIComponent(token);
  let seen = 0;
  let over = false;
  const stream = new EventSource("api/stream?token=" + encodeURIComponent(token));
  stream.addEventListener("snapshot", function (message) {
    const snapshot = JSON.parse(message.data);
    if (snapshot.sequence <= seen) {
      return;
    }
    seen = snapshot.sequence;
    document.title = snapshot.title;
    parts.pipeline.textContent = snapshot.pipeline;
    parts.live.innerHTML = snapshot.live;
    parts.report.innerHTML = snapshot.report;
    if (snapshot.over) {
      over = true;
      stream.close();
      parts.connection.textContent =
        "The run is over: this is its final state, as `daisy-driver report` draws it. " +
        "The driver has exited; this page no longer changes.";
      parts.connection.className = "over";
    } else {
      parts.connection.textContent =
        "live: updated " + new Date().toLocaleTimeString() + " (read-only)";
      parts.connection.className = "hint";
    }
  });
  stream.addEventListener("error", function () {
    if (over) {
      return;
    }
    // The browser tries again by itself; the last state stays shown.
    parts.connection.textContent =
      "no answer from the driver (it stopped, or the connection or tunnel broke): " +
      "showing the last state seen, trying again";
    parts.connection.className = "warning";
  });
})();
