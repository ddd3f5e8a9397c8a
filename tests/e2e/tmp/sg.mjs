import { chromium } from 'playwright-core';
import http from 'node:http';
const server = http.createServer((q, r) => r.writeHead(200, {'content-type':'text/html'}).end('<p>x</p>'));
await new Promise(ok => server.listen(0, '127.0.0.1', ok));
for (const extra of [[], ['--enable-webgpu-developer-features']]) {
const browser = await chromium.launch({executablePath:'/usr/bin/chromium', args:['--no-sandbox','--enable-unsafe-webgpu','--disable-quic','--disable-background-networking', ...extra]});
const page = await browser.newPage();
await page.goto(`http://127.0.0.1:${server.address().port}/`);
console.log(extra, await page.evaluate(async () => {
  const a = await navigator.gpu.requestAdapter();
  const feats = [...a.features].sort();
  const d = await a.requestDevice({ requiredFeatures: feats.filter(f => f === 'subgroups') });
  const m = d.createShaderModule({ code: 'enable subgroups;\n@compute @workgroup_size(64) fn main(@builtin(subgroup_size) s: u32) {}' });
  const info = await m.getCompilationInfo();
  return JSON.stringify({ feats, dev: [...d.features].sort(), msgs: info.messages.map(x => x.message) });
}));
await browser.close();
}
server.close();
