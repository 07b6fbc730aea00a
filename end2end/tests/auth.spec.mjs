import { test, expect } from '@playwright/test';
import { hydrated, email, password } from '../support.mjs';

test('a wrong password shows a clear error and no session', async ({ page }) => {
  await page.goto('/login');
  await hydrated(page);
  await page.fill('input[name=email]', email);
  await page.fill('input[name=password]', 'definitely-wrong');
  await page.click('#sign-in');
  await expect(page.locator('#login-error')).toHaveText('Wrong e-mail address or password.');
  await page.goto('/');
  await expect(page).toHaveURL(/\/login$/);
});

test('sign in, see the overview, navigate without reload, sign out', async ({ page }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto('/');
  await expect(page).toHaveURL(/\/login$/);
  await hydrated(page);
  await page.fill('input[name=email]', email);
  await page.fill('input[name=password]', password);
  await page.click('#sign-in');

  await expect(page.locator('#org-name')).toHaveText('Acme Analytics');
  await expect(page.getByText('Subscribers', { exact: true })).toBeVisible();
  await expect(page.locator('#whoami')).toContainText('Olivia Owner');
  await hydrated(page);

  // A marker on window survives client-side navigation and dies with a full reload.
  await page.evaluate(() => { window.__noReload = 'still here'; });
  await page.getByRole('link', { name: 'Campaigns' }).click();
  await expect(page).toHaveURL(/\/campaigns$/);
  await expect(page.locator('#campaigns')).toContainText('December product update');
  expect(await page.evaluate(() => window.__noReload)).toBe('still here');

  await page.click('#logout');
  await expect(page).toHaveURL(/\/login$/);
  await page.goto('/');
  await expect(page).toHaveURL(/\/login$/);
  expect(errors).toEqual([]);
});

test('the hydrated app works under its Content-Security-Policy: no violation on any page, e-mail previews included', async ({ page }) => {
  // Chromium reports every blocked script, style, image or frame on the console ("… violates the
  // following Content Security Policy directive …"), for the page and its srcdoc frames alike.
  const violations = [];
  page.on('console', (m) => { if (/Content Security Policy/i.test(m.text())) violations.push(m.text()); });
  page.on('pageerror', (e) => violations.push(String(e)));
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) => console.error(
      `Content Security Policy violation: ${e.violatedDirective} ${e.blockedURI}`));
  });

  const response = await page.goto('/login');
  const csp = response.headers()['content-security-policy'];
  expect(csp).toMatch(/script-src 'self' 'nonce-[\w-]+' 'wasm-unsafe-eval'/);
  expect(csp).toContain("frame-ancestors 'none'");
  expect(response.headers()['x-frame-options']).toBe('DENY');
  expect(response.headers()['x-content-type-options']).toBe('nosniff');
  await hydrated(page);
  await page.fill('input[name=email]', email);
  await page.fill('input[name=password]', password);
  await page.click('#sign-in');
  await expect(page.locator('#org-name')).toHaveText('Acme Analytics');
  await hydrated(page);

  // Client-side navigation (the wasm routes), then a campaign editor with its sandboxed preview.
  await page.getByRole('link', { name: 'Campaigns' }).click();
  await expect(page).toHaveURL(/\/campaigns$/);
  await page.getByRole('link', { name: 'December product update' }).first().click();
  await expect(page).toHaveURL(/\/campaigns\/\d+/);
  const id = new URL(page.url()).pathname.split('/')[2];
  await page.goto(`/campaigns/${id}/edit`);
  await hydrated(page);
  await expect(page.locator('[data-test=preview-html]')).toBeVisible();

  // The digests page and its framed preview (rendered whole on the server, then hydrated).
  await page.goto('/digests');
  await hydrated(page);
  await expect(page.frameLocator('#digest-preview').locator('h1')).toHaveText('Weekly digest for Acme Analytics');
  await page.getByRole('link', { name: 'Campaigns' }).click();
  await expect(page).toHaveURL(/\/campaigns$/);
  expect(violations).toEqual([]);
});
