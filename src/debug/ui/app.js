// wayfinder's /ui: draws the debug pages' JSON, polled, as tables and a chart.
//
// Data: /debug/registryz, /debug/endpointz, /debug/syncz, /debug/configz and
// /debug/push_status, fetched together every 2 seconds (longer when the pages are slow to
// answer: the next poll waits at least five times the last one's duration), each poll
// starting after the previous one ended.
//
// Access: the pages answer loopback peers without a token. From another host they need
// `Authorization: Bearer TOKEN`, the token of the server's --debug-token-file. Give it in
// the address's fragment (`/ui#token=TOKEN`; a fragment is never sent to a server) or type
// it when the page asks (on a 403). It is kept in this tab's sessionStorage (gone when the
// tab closes), removed from the address bar at once, and sent only to this origin's
// /debug pages.
//
// Every value from the server is put in the page as text (textContent, SVG attributes),
// never parsed as markup: a NACK or a registry's error cannot inject script.
"use strict";

(() => {
  const POLL_MS = 2000;
  const TOKEN_KEY = "wayfinder-debug-token";
  const SVG_NS = "http://www.w3.org/2000/svg";
  const TYPES = ["cds", "lds", "eds", "rds"];
  const MAX_SERVICES = 500;
  const CHART_PUSHES = 60;
  const TABLE_PUSHES = 10;

  class Forbidden extends Error {}

  const $ = (sel) => document.querySelector(sel);

  // An element with attributes and children (strings become text nodes).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      e.append(c instanceof Node ? c : String(c ?? ""));
    }
    return e;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function badge(word) {
    return el("span", { class: "badge " + String(word).replace(/ /g, "_") }, word);
  }

  function ago(at) {
    if (typeof at !== "number") return "";
    const s = Math.max(0, Date.now() / 1000 - at);
    if (s < 60) return Math.round(s) + "s ago";
    if (s < 3600) return Math.round(s / 60) + "m ago";
    return Math.round(s / 3600) + "h ago";
  }

  function errorText(record) {
    if (!record) return "";
    const e = record.error || {};
    const parts = [e.origin, e.kind, e.detail].filter((p) => p);
    return parts.join(": ") + (record.at ? " (" + ago(record.at) + ")" : "");
  }

  function fill(tbody, rows, empty, columns) {
    if (rows.length === 0) {
      rows = [el("tr", {}, el("td", { class: "empty", colspan: columns }, empty))];
    }
    $(tbody).replaceChildren(...rows);
  }

  // --- token -------------------------------------------------------------------------

  function takeTokenFromFragment() {
    const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (!m) return;
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }

  async function getJson(path) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    const r = await fetch(path, { headers, cache: "no-store", credentials: "omit" });
    if (r.status === 403) throw new Forbidden((await r.text()).trim());
    if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()).trim());
    return r.json();
  }

  function askForToken(why) {
    $("#token-why").textContent = why;
    $("#token-form").hidden = false;
    $("#token-input").focus();
  }

  // --- registries --------------------------------------------------------------------

  function renderRegistries(z) {
    const rows = (z.registries || []).map(({ status: s }) =>
      el("tr", { "data-registry": s.registry, class: s.health },
        el("td", {}, s.registry),
        el("td", { class: "health" }, badge(s.health)),
        el("td", {}, s.synced ? "yes" : "no"),
        el("td", { class: "num" }, s.services ?? ""),
        el("td", { class: "num" }, s.endpoints ?? ""),
        el("td", { class: s.last_error ? "error" : "" }, errorText(s.last_error))));
    fill("#registries tbody", rows, "no registries", 6);
    const conflicts = z.conflicts || [];
    $("#conflicts").replaceChildren(...(conflicts.length === 0 ? [] : [
      el("h3", {}, "Merge conflicts"),
      el("ul", {}, conflicts.map((c) => el("li", { class: "mono" }, JSON.stringify(c)))),
    ]));
  }

  // --- services ----------------------------------------------------------------------

  function locality(l) {
    const parts = [l && l.region, l && l.zone, l && l.subzone].filter((p) => p);
    return parts.length ? parts.join("/") : "(none)";
  }

  function renderServices(services) {
    const rows = [];
    for (const svc of services.slice(0, MAX_SERVICES)) {
      const groups = new Map();
      for (const e of svc.endpoints || []) {
        const ep = e.endpoint || {};
        const key = [e.registry, locality(ep.locality), ep.health].join("\u0000");
        if (!groups.has(key)) {
          groups.set(key, { registry: e.registry, locality: locality(ep.locality),
            health: ep.health, addresses: [] });
        }
        const port = Object.values(e.ports || {})[0];
        groups.get(key).addresses.push(ep.address + (port ? ":" + port : ""));
      }
      const ports = (svc.ports || []).map((p) => p.name + " " + p.number + "/" + p.protocol)
        .join(", ");
      const list = [...groups.values()];
      if (list.length === 0) {
        list.push({ registry: (svc.registries || []).join(", "), locality: "",
          health: "", addresses: [] });
      }
      list.forEach((g, i) => {
        const shown = g.addresses.slice(0, 20).join(" ");
        const more = g.addresses.length > 20 ? " +" + (g.addresses.length - 20) + " more" : "";
        rows.push(el("tr", { "data-service": svc.service },
          i === 0 ? el("td", { rowspan: list.length, class: "mono" }, svc.service) : [],
          i === 0 ? el("td", { rowspan: list.length }, ports) : [],
          el("td", {}, g.registry),
          el("td", {}, g.locality),
          el("td", {}, g.health ? badge(g.health) : ""),
          el("td", { class: "mono" }, g.addresses.length + ": " + shown + more)));
      });
    }
    if (services.length > MAX_SERVICES) {
      rows.push(el("tr", {}, el("td", { class: "empty", colspan: 6 },
        "first " + MAX_SERVICES + " of " + services.length + " services shown")));
    }
    fill("#services tbody", rows, "no services", 6);
  }

  // --- proxies -----------------------------------------------------------------------

  function syncCell(type, t) {
    if (!t) return el("td", { "data-type": type, class: "muted" }, "—");
    const word = t.status === "STALE" && typeof t.unacked_seconds === "number"
      ? "STALE (" + Math.floor(t.unacked_seconds) + "s)" : t.status;
    return el("td", { "data-type": type }, el("span", { class: "badge " +
      String(t.status).replace(/ /g, "_") }, word));
  }

  function renderProxies(conns) {
    const rows = conns.map((c) => {
      const types = c.types || {};
      const nacks = Object.entries(types).filter(([, t]) => t.last_nack)
        .map(([name, t]) => name.toUpperCase() + ": " + t.last_nack.message);
      return el("tr", { "data-proxy": c.proxy },
        el("td", { class: "mono" }, c.proxy),
        el("td", {}, c.proxy_type),
        el("td", {}, c.version || ""),
        el("td", { class: "mono" }, c.identity || "—"),
        TYPES.map((type) => syncCell(type, types[type])),
        el("td", {}, ago(c.connected_since) + (c.peer ? " from " + c.peer : "")),
        el("td", { class: nacks.length ? "nack" : "" }, nacks.join("; ")));
    });
    fill("#proxies tbody", rows, "no proxy connected", 10);
  }

  // --- pushes ------------------------------------------------------------------------

  function renderPushes(z) {
    const pushes = (z.pushes || []).slice().sort((a, b) => a.at - b.at);
    const timed = pushes.filter((p) => typeof p.after_publication === "number");
    $("#pushes-summary").textContent = pushes.length + " pushes kept; " + timed.length +
      " after a new snapshot, " + (pushes.length - timed.length) + " answers to requests." +
      " Bars: milliseconds from the snapshot's publication to the push (answers: grey ticks).";
    $("#push-chart").replaceChildren(chart(pushes.slice(-CHART_PUSHES)));
    const rows = pushes.slice(-TABLE_PUSHES).reverse().map((p) =>
      el("tr", { "data-push-type": p.type },
        el("td", {}, ago(p.at)),
        el("td", { class: "mono" }, p.proxy),
        el("td", {}, p.type.toUpperCase()),
        el("td", {}, p.variant),
        el("td", { class: "num" }, p.resources),
        el("td", { class: "num" }, p.bytes),
        el("td", { class: "num" }, typeof p.after_publication === "number"
          ? (p.after_publication * 1000).toFixed(1) + " ms" : "answer")));
    fill("#pushes tbody", rows, "no pushes yet", 7);
  }

  function chart(pushes) {
    const W = 720, H = 150, left = 50, bottom = 20, top = 10;
    const root = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H,
      role: "img", "aria-label": "time from publication to push, per push" });
    const ms = pushes.map((p) => typeof p.after_publication === "number"
      ? p.after_publication * 1000 : null);
    const max = Math.max(1, ...ms.filter((v) => v !== null));
    const plotH = H - bottom - top;
    const slot = (W - left - 10) / CHART_PUSHES;
    root.append(svg("line", { class: "axis", x1: left, y1: H - bottom, x2: W - 10, y2: H - bottom }));
    root.append(svg("line", { class: "axis", x1: left, y1: top, x2: left, y2: H - bottom }));
    root.append(svg("text", { x: 4, y: top + 10 }, max.toFixed(1) + " ms"));
    root.append(svg("text", { x: 4, y: H - bottom }, "0"));
    root.append(svg("text", { x: left, y: H - 4 }, "older → newer (last " + CHART_PUSHES + ")"));
    pushes.forEach((p, i) => {
      const v = ms[i];
      const h = v === null ? 3 : Math.max(1, (v / max) * plotH);
      const cls = TYPES.includes(p.type) ? p.type : "other";
      const bar = svg("rect", { class: v === null ? "other" : cls, x: left + 2 + i * slot,
        y: H - bottom - h, width: Math.max(1, slot - 2), height: h });
      bar.append(svg("title", {}, p.type.toUpperCase() + " to " + p.proxy + ": " +
        (v === null ? "answer to a request" : v.toFixed(2) + " ms after publication")));
      root.append(bar);
    });
    TYPES.forEach((t, i) => {
      root.append(svg("rect", { class: t, x: W - 200 + i * 48, y: top, width: 10, height: 10 }));
      root.append(svg("text", { x: W - 186 + i * 48, y: top + 9 }, t.toUpperCase()));
    });
    return root;
  }

  // --- configuration -----------------------------------------------------------------

  function renderConfig(z) {
    const sources = (z.sources || []).map((s) =>
      el("tr", { "data-source": s.source, class: s.health },
        el("td", {}, s.source),
        el("td", {}, badge(s.health)),
        el("td", {}, s.synced ? "yes" : "no"),
        el("td", { class: "num" }, s.objects ?? ""),
        el("td", { class: s.last_error ? "error" : "" }, errorText(s.last_error))));
    fill("#config-sources tbody", sources, "no configuration source", 5);
    const refused = (z.refused || []).map((r) =>
      el("tr", { "data-refused": r.kind + "/" + r.namespace + "/" + r.name },
        el("td", {}, r.kind || ""),
        el("td", { class: "mono" }, (r.namespace || "") + "/" + (r.name || "")),
        el("td", {}, r.source || ""),
        el("td", { class: "mono" }, (r.file || "") + (r.document ? " document " + r.document : "") +
          (r.line ? " line " + r.line : "")),
        el("td", { class: "error" }, r.error || "")));
    fill("#refused tbody", refused, "nothing refused", 5);
    const objects = (z.objects || []).map((o) =>
      el("tr", { "data-object": o.kind + "/" + o.namespace + "/" + o.name },
        el("td", {}, o.kind),
        el("td", { class: "mono" }, o.namespace + "/" + o.name),
        el("td", { class: "mono" }, o.origin || ""),
        el("td", {}, (o.warnings || []).join("; "))));
    $("#objects-total").textContent = "(" + (z.total ?? objects.length) +
      (z.next !== null && z.next !== undefined ? "; the first " + objects.length + " shown" : "") + ")";
    fill("#objects tbody", objects, "no objects", 4);
  }

  // --- polling -----------------------------------------------------------------------

  async function poll() {
    const started = performance.now();
    let delay = POLL_MS;
    try {
      const [registryz, endpointz, syncz, configz, pushes] = await Promise.all([
        getJson("/debug/registryz"), getJson("/debug/endpointz"), getJson("/debug/syncz"),
        getJson("/debug/configz"), getJson("/debug/push_status"),
      ]);
      renderRegistries(registryz);
      renderServices(endpointz);
      renderProxies(syncz);
      renderPushes(pushes);
      renderConfig(configz);
      $("#snapshot").textContent = "snapshot " + registryz.snapshot_version;
      const state = $("#state");
      state.className = "muted";
      state.textContent = "updated " + new Date().toLocaleTimeString() + ", polling";
      document.body.dataset.loaded = "true";
      delay = Math.max(POLL_MS, 5 * (performance.now() - started));
    } catch (e) {
      const state = $("#state");
      state.className = "error";
      if (e instanceof Forbidden) {
        state.textContent = "forbidden";
        askForToken(e.message);
        return; // polling resumes when a token is given
      }
      state.textContent = "cannot read the debug pages: " + e.message;
    }
    setTimeout(poll, delay);
  }

  document.addEventListener("DOMContentLoaded", () => {
    takeTokenFromFragment();
    $("#token-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const value = $("#token-input").value.trim();
      if (!value) return;
      sessionStorage.setItem(TOKEN_KEY, value);
      $("#token-input").value = "";
      $("#token-form").hidden = true;
      poll();
    });
    poll();
  });
})();
