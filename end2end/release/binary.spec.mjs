import { test, expect } from '@playwright/test';
import { hydrated, email, password } from '../support.mjs';

test('the binary alone serves a dashboard that hydrates: sign in, navigate without reload, styles applied', async ({ page }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  const assets = new Map();
  page.on('response', (r) => {
    const path = new URL(r.url()).pathname;
    if (path.startsWith('/pkg/')) assets.set(path, r);
  });

  await page.goto('/login');
  await hydrated(page);
  await page.fill('input[name=email]', email);
  await page.fill('input[name=password]', password);
  await page.click('#sign-in');
  await expect(page.locator('#org-name')).toHaveText('Acme Analytics');
  await hydrated(page);

  // The wasm, its JS and the stylesheet all came from the executable, compressed for the browser.
  for (const path of ['/pkg/mailroom.js', '/pkg/mailroom.wasm', '/pkg/mailroom.css']) {
    const r = assets.get(path);
    expect(r, `${path} was loaded`).toBeTruthy();
    expect(r.status(), path).toBe(200);
    expect(r.headers()['content-encoding'], path).toBe('br');
  }
  expect(assets.get('/pkg/mailroom.wasm').headers()['content-type']).toBe('application/wasm');
  // Tailwind's stylesheet applies: the navigation is a flex row, not the browser default.
  expect(await page.locator('nav').first().evaluate((n) => getComputedStyle(n).display)).toBe('flex');

  // A click handled by the wasm router: the page is not reloaded.
  await page.evaluate(() => { window.__noReload = 'still here'; });
  await page.getByRole('link', { name: 'Campaigns' }).click();
  await expect(page).toHaveURL(/\/campaigns$/);
  await expect(page.locator('#campaigns')).toContainText('December product update');
  expect(await page.evaluate(() => window.__noReload)).toBe('still here');
  expect(errors).toEqual([]);

  // A path that is neither a page nor a file gets the app's own 404 page.
  const missing = await page.goto('/pkg/nothing-here.js');
  expect(missing.status()).toBe(404);
  await expect(page.getByText('Page not found')).toBeVisible();
});
