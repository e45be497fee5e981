// Drives wayfinder's /ui in headless Chromium (Debian's /usr/bin/chromium) through
// playwright-core, for tests/it/ui.rs. Run with NODE_PATH holding playwright-core:
//
//   node ui.js '{"url": "http://127.0.0.1:PORT/ui", "out": DIR, "chromium": "/usr/bin/chromium",
//                "registries": [...], "services": [...], "proxy": ID, "refused": KEY,
//                "degrade": REGISTRY, "degraded_rgb": [r, g, b]}'
//
// Phase 1: opens the page, waits (by selectors, no sleeps) for the registries, services,
// the proxy's CDS shown SYNCED, the refused object and a drawn push chart; checks the
// answers' content types and CSP; takes DIR/mesh.png (the viewport) and element shots of
// the registry rows; prints {"phase": "before", ...} and waits for a line on stdin (the
// test makes registry `degrade` degraded meanwhile). Phase 2: waits for that registry's
// row to say "degraded", takes DIR/degraded.png and DIR/degraded-row.png, and checks that
// every PNG is valid and of its size and that the degraded row holds `degraded_rgb` (the
// CSS's --degraded) while a healthy row does not. Prints {"phase": "after", ...}; any
// failure is an exception: a message on stderr and exit status 1.
//
// With "token" in the options (a server with --debug-token-file, reached from another
// host), it checks the page's token handling instead (see withToken) and prints
// {"phase": "token", ...}.
"use strict";

const fs = require("fs");
const path = require("path");
const readline = require("readline");
const zlib = require("zlib");
const { chromium } = require("playwright-core");

const VIEWPORT = { width: 1280, height: 900 };
const TIMEOUT_MS = 30000;

// Decodes an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes) into
// { width, height, channels, pixels }.
function decodePng(buf) {
  const sig = Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]);
  if (!buf.subarray(0, 8).equals(sig)) throw new Error("not a PNG: bad signature");
  let off = 8;
  let ihdr = null;
  const idat = [];
  while (off < buf.length) {
    const len = buf.readUInt32BE(off);
    const type = buf.toString("latin1", off + 4, off + 8);
    const data = buf.subarray(off + 8, off + 8 + len);
    if (type === "IHDR") {
      ihdr = { width: data.readUInt32BE(0), height: data.readUInt32BE(4), depth: data[8],
        color: data[9], interlace: data[12] };
    } else if (type === "IDAT") {
      idat.push(data);
    } else if (type === "IEND") {
      break;
    }
    off += 12 + len;
  }
  if (!ihdr) throw new Error("not a PNG: no IHDR");
  if (ihdr.depth !== 8 || ![2, 6].includes(ihdr.color) || ihdr.interlace !== 0) {
    throw new Error("unexpected PNG format " + JSON.stringify(ihdr));
  }
  const channels = ihdr.color === 6 ? 4 : 3;
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = ihdr.width * channels;
  if (raw.length !== (stride + 1) * ihdr.height) throw new Error("PNG data of the wrong size");
  const pixels = Buffer.alloc(stride * ihdr.height);
  for (let y = 0; y < ihdr.height; y++) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? pixels[y * stride + x - channels] : 0;
      const b = y > 0 ? pixels[(y - 1) * stride + x] : 0;
      const c = x >= channels && y > 0 ? pixels[(y - 1) * stride + x - channels] : 0;
      let pred;
      switch (filter) {
        case 0: pred = 0; break;
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) >> 1; break;
        case 4: {
          const p = a + b - c;
          const pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default: throw new Error("bad PNG filter " + filter);
      }
      pixels[y * stride + x] = (line[x] + pred) & 0xff;
    }
  }
  return { width: ihdr.width, height: ihdr.height, channels, pixels };
}

// How many pixels are `rgb`, within 2 per channel.
function countColour(png, rgb) {
  let n = 0;
  for (let i = 0; i < png.pixels.length; i += png.channels) {
    if (rgb.every((v, k) => Math.abs(png.pixels[i + k] - v) <= 2)) n++;
  }
  return n;
}

function check(ok, what) {
  if (!ok) throw new Error(what);
}

async function shot(target, file) {
  const buf = await target.screenshot({ path: file });
  check(fs.readFileSync(file).equals(buf), file + " on disk is not the screenshot taken");
  return decodePng(buf);
}

function nextLine() {
  const rl = readline.createInterface({ input: process.stdin });
  return new Promise((resolve, reject) => {
    rl.once("line", (l) => { resolve(l); rl.close(); });
    rl.once("close", () => reject(new Error("stdin closed before the go-ahead")));
  });
}

async function main() {
  const opts = JSON.parse(process.argv[2]);
  const profile = fs.mkdtempSync(path.join(opts.out, "chromium-profile-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: opts.chromium,
    headless: true,
    viewport: VIEWPORT,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  context.setDefaultTimeout(TIMEOUT_MS);
  try {
    const page = context.pages()[0] || (await context.newPage());
    await (opts.token ? withToken(context, page, opts) : mesh(page, opts));
  } finally {
    await context.close();
  }
}

// From another host: the page asks for the token on the pages' 403, refuses a wrong one,
// works with the right one typed in; and in a new tab, with the token in the fragment,
// which leaves the address bar at once.
async function withToken(context, page, opts) {
  await page.goto(opts.url);
  const why = page.locator("#token-form:not([hidden]) #token-why");
  await why.filter({ hasText: "--debug-token-file" }).waitFor();
  const asked = await why.innerText();
  await page.fill("#token-input", opts.token + "-wrong");
  await page.press("#token-input", "Enter");
  await why.filter({ hasText: "not the one" }).waitFor();
  await page.fill("#token-input", opts.token);
  await page.press("#token-input", "Enter");
  await page.waitForSelector("body[data-loaded=true] #registries tr[data-registry=Mock]");
  check(await page.locator("#token-form").isHidden(), "the token form stays after the token");
  const typed = await shot(page, path.join(opts.out, "token.png"));
  check(typed.width === VIEWPORT.width, "token.png is not the viewport's width");

  const tab = await context.newPage();
  await tab.goto(opts.url + "#token=" + encodeURIComponent(opts.token));
  await tab.waitForSelector("body[data-loaded=true] #registries tr[data-registry=Mock]");
  const address = tab.url();
  check(!address.includes(opts.token), "the token stays in the address: " + address);
  const kept = await tab.evaluate(() => sessionStorage.getItem("wayfinder-debug-token"));
  check(kept === opts.token, "sessionStorage holds " + JSON.stringify(kept));
  console.log(JSON.stringify({ phase: "token", asked, address }));
}

// The mesh, then a registry turning degraded (see the top of this file).
async function mesh(page, opts) {
  const problems = [];
  page.on("console", (m) => { if (m.type() === "error") problems.push(m.text()); });
  page.on("pageerror", (e) => problems.push(String(e)));
  page.on("response", (r) => { if (r.status() >= 400) problems.push(r.status() + " " + r.url()); });

  const answer = await page.goto(opts.url);
  check(answer.status() === 200, "GET /ui answered " + answer.status());
  const headers = answer.headers();
  check(headers["content-type"] === "text/html; charset=utf-8", "/ui content type " +
    headers["content-type"]);
  check((headers["content-security-policy"] || "").startsWith("default-src 'none'"),
    "/ui CSP: " + headers["content-security-policy"]);
  for (const [file, type] of [["app.js", "text/javascript"], ["app.css", "text/css"],
    ["favicon.svg", "image/svg+xml"]]) {
    const r = await page.request.get(new URL(file, opts.url + "/").href);
    check(r.status() === 200 && r.headers()["content-type"].startsWith(type),
      file + ": " + r.status() + " " + r.headers()["content-type"]);
  }

  await page.waitForSelector("body[data-loaded=true]");
  for (const r of opts.registries) {
    await page.waitForSelector(`#registries tr[data-registry="${r}"].healthy`);
  }
  for (const s of opts.services) {
    await page.waitForSelector(`#services tr[data-service="${s}"]`);
  }
  const cds = page.locator(`#proxies tr[data-proxy="${opts.proxy}"] td[data-type="cds"]`);
  await cds.filter({ hasText: "SYNCED" }).waitFor();
  await page.waitForSelector(`#refused tr[data-refused="${opts.refused}"] td.error`);
  await page.waitForSelector("#push-chart svg rect.cds");
  const counts = {
    registries: await page.locator("#registries tbody tr[data-registry]").count(),
    service_rows: await page.locator("#services tbody tr[data-service]").count(),
    proxies: await page.locator("#proxies tbody tr[data-proxy]").count(),
    chart_bars: await page.locator("#push-chart svg rect").count(),
  };
  const mesh = await shot(page, path.join(opts.out, "mesh.png"));
  check(mesh.width === VIEWPORT.width && mesh.height === VIEWPORT.height,
    `mesh.png is ${mesh.width}x${mesh.height}, not the viewport`);
  const healthyRow = page.locator(`#registries tr[data-registry="${opts.degrade}"]`);
  const before = await shot(healthyRow, path.join(opts.out, "healthy-row.png"));
  check(countColour(before, opts.degraded_rgb) === 0,
    "the healthy row already shows the degraded colour");
  console.log(JSON.stringify({ phase: "before", counts }));

  await nextLine();
  const row = page.locator(`#registries tr[data-registry="${opts.degrade}"].degraded`);
  await row.filter({ hasText: "degraded" }).waitFor();
  const error = await row.locator("td.error").innerText();
  const whole = await shot(page, path.join(opts.out, "degraded.png"));
  check(whole.width === VIEWPORT.width && whole.height === VIEWPORT.height,
    `degraded.png is ${whole.width}x${whole.height}, not the viewport`);
  const after = await shot(row, path.join(opts.out, "degraded-row.png"));
  const box = await row.boundingBox();
  // The shot covers the row's box rounded outwards to whole pixels.
  check(Math.abs(after.width - box.width) < 2 && Math.abs(after.height - box.height) < 2,
    `degraded-row.png is ${after.width}x${after.height}, the row ${box.width}x${box.height}`);
  const red = countColour(after, opts.degraded_rgb);
  check(red > 50, "the degraded row has " + red + " pixels of the degraded colour");
  check(problems.length === 0, "the page logged errors: " + problems.join("\n"));
  console.log(JSON.stringify({ phase: "after", error, degraded_pixels: red }));
}

main().then(() => process.exit(0), (e) => {
  process.stderr.write("ui.js: " + (e && e.stack ? e.stack : e) + "\n");
  process.exit(1);
});
