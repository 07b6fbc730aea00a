import { test, expect } from '@playwright/test';
import { hydrated, signIn } from '../support.mjs';

test('api tokens: an owner creates one (shown once), it calls the API, and revoked it is refused', async ({ page }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await signIn(page);
  await page.goto('/settings');
  await hydrated(page);
  await page.getByRole('link', { name: 'API tokens' }).click();
  await expect(page).toHaveURL(/\/settings\/api$/);
  await hydrated(page);

  const name = `e2e-${Date.now()}`;
  await page.locator('#api-token-form input[name=name]').fill(name);
  await page.locator('#api-token-form input[value="suppressions:read"]').check();
  await page.locator('#api-token-form input[value="suppressions:write"]').check();
  await page.click('#create-api-token');
  const token = (await page.locator('[data-test=api-token-value]').innerText()).trim();
  expect(token).toMatch(/^mrk_[A-Za-z0-9_-]{43}$/);
  const row = page.locator('[data-test=api-token]', { hasText: name });
  await expect(row).toContainText('suppressions:read, suppressions:write');
  await expect(row).not.toContainText(token);

  // The token works against the API the page links to.
  const auth = { authorization: `Bearer ${token}` };
  const added = await page.request.put('/api/v1/suppressions/e2e-api@example.org', { headers: auth });
  expect(added.status()).toBe(201);
  expect((await added.json()).reason).toBe('manual');
  const doc = await page.request.get(await page.locator('[data-test=openapi-link]').getAttribute('href'));
  expect((await doc.json()).paths['/api/v1/suppressions/{email}']).toBeTruthy();

  await row.locator('[data-test=revoke] summary').click();
  await row.locator('[data-test=confirm-revoke]').click();
  await expect(page.locator('[data-test=revoke-result]')).toHaveText(`The token “${name}” is revoked.`);
  await expect(row).toContainText('revoked');
  const refused = await page.request.delete('/api/v1/suppressions/e2e-api@example.org', { headers: auth });
  expect(refused.status()).toBe(401);
  expect(refused.headers()['content-type']).toBe('application/problem+json');
  expect(errors).toEqual([]);
});
