// Flotilla's dashboard: live parts from server-sent events, the token kept in session storage
// and sent only as an Authorization header, actions behind a confirmation. The server renders
// every part; this script only places them.
"use strict";
(function () {
  const body = document.body;
  const base = body.dataset.base;
  const kind = body.dataset.page;
  const fleet = body.dataset.fleet;
  const cluster = body.dataset.cluster;
  const live = document.getElementById("live");
  const notice = document.getElementById("notice");
  const KEY = "flotilla-token";

  function say(text, bad) {
    notice.textContent = text;
    notice.className = bad ? "bad" : "ok";
  }

  // --- the token ---------------------------------------------------------------------------
  const form = document.getElementById("token-form");
  const input = document.getElementById("token");
  const use = document.getElementById("token-use");
  const forget = document.getElementById("token-forget");
  const mode = document.getElementById("mode");

  function token() {
    return sessionStorage.getItem(KEY);
  }
  function showMode() {
    const has = token() !== null;
    body.classList.toggle("can-act", has);
    input.hidden = has;
    use.hidden = has;
    forget.hidden = !has;
    mode.textContent = has
      ? "actions enabled with the API token"
      : "read-only: actions need the API token";
  }
  form.addEventListener("submit", async function (e) {
    e.preventDefault();
    const given = input.value.trim();
    if (!given) return;
    const r = await fetch(base + "/api/token", {
      headers: { Authorization: "Bearer " + given },
    });
    if (r.status === 204) {
      sessionStorage.setItem(KEY, given);
      input.value = "";
      say("token accepted: actions are enabled", false);
    } else {
      say("the API refused this token (" + r.status + "): " + (await reason(r)) +
        "; the dashboard stays read-only", true);
    }
    showMode();
  });
  forget.addEventListener("click", function () {
    sessionStorage.removeItem(KEY);
    say("token forgotten: read-only", false);
    showMode();
  });

  async function reason(r) {
    try {
      const j = await r.json();
      return j.error || j.message || JSON.stringify(j);
    } catch (_) {
      return r.statusText;
    }
  }

  // --- actions -------------------------------------------------------------------------------
  const dialog = document.getElementById("confirm");
  const confirmText = document.getElementById("confirm-text");
  let pending = null;
  document.addEventListener("click", function (e) {
    const button = e.target.closest("button.action");
    if (!button || token() === null) return;
    pending = button.dataset.command;
    confirmText.textContent = button.dataset.confirm;
    dialog.showModal();
  });
  document.getElementById("confirm-no").addEventListener("click", function () {
    pending = null;
    dialog.close();
  });
  document.getElementById("confirm-yes").addEventListener("click", async function () {
    const command = pending;
    pending = null;
    dialog.close();
    if (command === null) return;
    const r = await fetch(base + "/api/fleets/" + encodeURIComponent(fleet) + "/commands", {
      method: "POST",
      headers: { Authorization: "Bearer " + token(), "Content-Type": "application/json" },
      body: command,
    });
    if (r.status === 202) {
      const j = await r.json();
      say("accepted (command " + j.id + "): " + j.message, false);
    } else if (r.status === 401 || r.status === 403) {
      sessionStorage.removeItem(KEY);
      showMode();
      say("the API refused the token (" + r.status + "): " + (await reason(r)) +
        "; nothing was done and the dashboard is read-only again", true);
    } else {
      say("refused (" + r.status + "): " + (await reason(r)), true);
    }
  });

  // --- live parts ----------------------------------------------------------------------------
  let seq = null;
  let loading = false;
  async function snapshot() {
    if (loading) return;
    loading = true;
    seq = null;
    try {
      const r = await fetch(base + "/live/snapshot?fleet=" + encodeURIComponent(fleet));
      if (r.ok) {
        const j = await r.json();
        live.innerHTML = j.html;
        seq = j.seq;
        body.dataset.seq = String(seq);
      } else {
        say("this page is gone: " + (await reason(r)), true);
      }
    } finally {
      loading = false;
    }
  }
  function apply(data) {
    if (seq === null) return;
    if (data.seq <= seq) return;
    if (data.seq !== seq + 1) {
      snapshot();
      return;
    }
    for (const [id, html] of data.parts) {
      const el = document.getElementById(id);
      if (el) el.outerHTML = html;
    }
    seq = data.seq;
    body.dataset.seq = String(seq);
  }

  async function refreshCluster() {
    const r = await fetch(base + "/fleets/" + encodeURIComponent(fleet) + "/clusters/" +
      encodeURIComponent(cluster) + "/body");
    if (r.ok) {
      live.innerHTML = await r.text();
      body.dataset.refreshed = String(Number(body.dataset.refreshed || "0") + 1);
    }
  }

  function connect() {
    const events = new EventSource(base + "/live/stream?fleet=" + encodeURIComponent(fleet));
    if (kind === "cluster") {
      // The cluster's row changed: its page's body is read again.
      const id = "c-" + encodeURIComponent(cluster).replace(/[!'()*]/g, function (c) {
        return "%" + c.charCodeAt(0).toString(16).toUpperCase();
      });
      events.addEventListener("parts", function (e) {
        const data = JSON.parse(e.data);
        if (data.parts.some(function (p) { return p[0] === id; })) refreshCluster();
      });
      events.addEventListener("layout", refreshCluster);
      events.addEventListener("gap", refreshCluster);
      events.onopen = refreshCluster;
      return;
    }
    events.addEventListener("parts", function (e) { apply(JSON.parse(e.data)); });
    events.addEventListener("layout", snapshot);
    events.addEventListener("gap", snapshot);
    // On connect, and on every reconnect, the page loads a snapshot.
    events.onopen = snapshot;
  }

  showMode();
  if (kind === "list" || kind === "fleet" || kind === "cluster") connect();
})();
