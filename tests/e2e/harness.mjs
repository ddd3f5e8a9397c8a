// What the browser scripts share: the built site in dist/ served on 127.0.0.1, and Debian's
// Chromium launched with WebGPU (SwiftShader when there is no GPU) through playwright-core.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../dist');
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm',
  '.css': 'text/css', '.txt': 'text/plain; charset=utf-8' };

/// Serves dist/ on a free port; resolves to [server, base URL].
export function serve() {
  const server = http.createServer((req, res) => {
    const rel = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const file = path.join(root, rel === '/' ? 'index.html' : rel);
    if (!file.startsWith(root) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      res.writeHead(404).end('not found');
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream' });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () =>
    ok([server, `http://127.0.0.1:${server.address().port}`])));
}

export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    // The background-networking flags keep Chromium off this machine's closed network.
    args: ['--no-sandbox', '--enable-unsafe-webgpu', '--disable-quic', '--disable-sync',
      '--disable-component-update', '--disable-background-networking', '--no-first-run'],
  });
}

const field = (page, label) =>
  page.locator('label.field').filter({ has: page.locator(`span:text-is("${label}")`) }).locator('input');

/// Types into the settings form, e.g. { d: 32, steps: 60 } (labels as the page shows them).
export async function setFields(page, values) {
  for (const [label, v] of Object.entries(values)) {
    await field(page, label).fill(String(v));
    await field(page, label).press('Tab'); // fires `change`
  }
}
