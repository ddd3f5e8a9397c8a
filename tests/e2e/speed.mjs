// Steps/s of the app's `tiny` preset (d=64, L=4, batch 16, ctx 64) in headless Chromium, on the
// CPU fallback (flex in wasm) and on WebGPU (SwiftShader here). Not a test: it prints numbers for
// docs/RESULTS.md.   node tests/e2e/speed.mjs [cpu-steps] [webgpu-steps]
import { serve, launch, setFields } from './harness.mjs';

const [server, base] = await serve();
const browser = await launch();

async function measure(backend, steps) {
  const page = await browser.newPage();
  await page.goto(`${base}/?backend=${backend}`);
  await page.waitForFunction(() => !document.querySelector('[data-testid=train-start]')?.disabled, null, { timeout: 60_000 });
  await setFields(page, { steps });
  await page.getByTestId('train-start').click();
  // Time from the first step's report (shader compilation and the first evaluation excluded).
  await page.waitForFunction(() => /^[1-9]\d* \//.test(document.querySelector('[data-testid=step]')?.textContent ?? ''), null, { timeout: 600_000 });
  const t0 = Date.now();
  const s0 = parseInt(await page.getByTestId('step').textContent());
  await page.waitForFunction((n) => document.querySelector('[data-testid=step]')?.textContent?.trim() === `${n} / ${n}`, steps, { timeout: 1_800_000, polling: 200 });
  const secs = (Date.now() - t0) / 1000;
  const label = await page.getByTestId('backend').textContent();
  const loss = await page.getByTestId('val-loss').textContent();
  console.log(`${label}: ${steps - s0} steps in ${secs.toFixed(1)} s = ${((steps - s0) / secs).toFixed(2)} steps/s ` +
    `(evaluations included), val loss ${loss}, alpha ${await page.getByTestId('alpha').textContent()}`);
  await page.close();
}

const [cpu = '100', gpu = '10'] = process.argv.slice(2);
try {
  if (+cpu > 0) await measure('cpu', +cpu);
  if (+gpu > 0) await measure('webgpu', +gpu);
} finally {
  await browser.close();
  server.close();
}
