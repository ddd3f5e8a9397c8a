import { chromium } from 'playwright-core';
import http from 'node:http'; import fs from 'node:fs'; import path from 'node:path';
const root='/work/main/dist';
const server = http.createServer((req, res) => { const rel=new URL(req.url,'http://x').pathname; const f=path.join(root, rel==='/'?'index.html':rel);
 if(!fs.existsSync(f)) return res.writeHead(404).end(); res.writeHead(200,{'content-type': f.endsWith('.wasm')?'application/wasm':f.endsWith('.js')?'text/javascript':'text/html'}); fs.createReadStream(f).pipe(res);});
await new Promise(ok=>server.listen(0,'127.0.0.1',ok));
const browser = await chromium.launch({executablePath:'/usr/bin/chromium', args:['--no-sandbox','--enable-unsafe-webgpu','--disable-quic','--disable-sync','--disable-component-update','--disable-background-networking','--no-first-run']});
const page = await browser.newPage();
await page.addInitScript(() => {
  const rd = GPUAdapter.prototype.requestDevice;
  GPUAdapter.prototype.requestDevice = async function (desc) {  console.log('requestDevice ' + JSON.stringify(desc?.requiredFeatures)); const d = await rd.call(this, desc); console.log('device features ' + JSON.stringify([...d.features])); return d; };
  const orig = GPUDevice.prototype.createShaderModule;
  GPUDevice.prototype.createShaderModule = function (desc) {
    const m = orig.call(this, desc);
    m.getCompilationInfo().then((info) => { for (const msg of info.messages) if (msg.type === 'error') console.log('WGSL ' + (desc.label||'') + ' ' + msg.type + ' line ' + msg.lineNum + ': ' + msg.message + '\n>> ' + desc.code.split('\n').slice(Math.max(0,msg.lineNum-3), msg.lineNum+1).join('\n>> ')); });
    return m;
  };
});
page.on('console', m=>console.log(Date.now()%100000, 'console', m.type(), m.text().slice(0,300)));
page.on('pageerror', e=>console.log('pageerror', e.message));
await page.goto(`http://127.0.0.1:${server.address().port}/?backend=webgpu`);
for (let i=0;i<30;i++){ const t=Date.now(); const s = await Promise.race([page.evaluate(()=>document.querySelector('[data-testid=backend]')?.textContent + ' | ' + document.querySelector('[data-testid=step]')?.textContent + ' | ' + (document.querySelector('[data-testid=error]')?.textContent??'')), new Promise(r=>setTimeout(()=>r('TIMEOUT'),5000))]); console.log(i, Date.now()-t,'ms', s); if(i==2){ await page.evaluate(()=>document.querySelector('[data-testid=train-start]').click()); console.log('clicked'); } await new Promise(r=>setTimeout(r,3000)); }
await page.screenshot({path:'/tmp/gpu.png'});
await browser.close(); server.close();
