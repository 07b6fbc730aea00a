import { test, expect } from '@playwright/test';
import { hydrated, signIn } from '../support.mjs';

test('event webhooks: an owner adds an endpoint (its secret shown once), sends a test event, and turns click and open tracking on', async ({ page }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await signIn(page);
  await page.goto('/settings');
  await hydrated(page);
  await page.getByRole('link', { name: 'Event webhooks' }).click();
  await expect(page).toHaveURL(/\/settings\/webhooks$/);
  await hydrated(page);

  const url = `https://hooks-${Date.now()}.e2e.example/mailroom`;
  await page.locator('#endpoint-form input[name=url]').fill(url);
  await page.locator('#endpoint-form input[value="message.unknown"]').uncheck();
  await page.click('#create-endpoint');
  const secret = (await page.locator('[data-test=endpoint-secret]').innerText()).trim();
  expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
  const endpoint = page.locator('[data-test=endpoint]', { hasText: url });
  await expect(endpoint.locator('[data-test=endpoint-health]')).toHaveText('Healthy.');
  await expect(endpoint).toContainText('message.delivered');
  await expect(endpoint).not.toContainText('message.unknown');
  await expect(endpoint).toContainText('Up to 16 requests at once');

  await endpoint.locator('[data-test=send-test]').click();
  await expect(page.locator('[data-test=test-result]')).toContainText('A test event (msg_');

  await expect(page.locator('[data-test=tracking-state]')).toContainText('Off:');
  await page.locator('[data-test=toggle-tracking]').click();
  await expect(page.locator('[data-test=tracking-result]')).toContainText('Click tracking is on');
  await expect(page.locator('[data-test=tracking-state]')).toContainText('On:');
  // Open tracking is its own switch, labelled unreliable, and stays off when clicks go on.
  await expect(page.getByRole('heading', { name: 'Open tracking (unreliable)' })).toBeVisible();
  await expect(page.locator('[data-test=opens-state]')).toContainText('Off:');
  await page.locator('[data-test=toggle-opens]').click();
  await expect(page.locator('[data-test=opens-result]')).toContainText('Open tracking is on');
  await expect(page.locator('[data-test=opens-state]')).toContainText('Unreliable');

  // Shown once: a fresh load of the page never carries the secret.
  await page.reload();
  await hydrated(page);
  await expect(page.locator('[data-test=endpoint]', { hasText: url })).toBeVisible();
  expect(await page.content()).not.toContain(secret);
  await page.locator('[data-test=toggle-tracking]').click();
  await expect(page.locator('[data-test=tracking-state]')).toContainText('Off:');
  await page.locator('[data-test=toggle-opens]').click();
  await expect(page.locator('[data-test=opens-state]')).toContainText('Off:');
  expect(errors).toEqual([]);
});
