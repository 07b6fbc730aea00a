import { test, expect } from '@playwright/test';
import { createHmac } from 'node:crypto';
import { hydrated, signIn, sql } from '../support.mjs';

test('relays: an owner creates an endpoint, a signed bounce arrives and is listed, the rules and the bounce domain are saved', async ({ page }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await signIn(page);
  await page.goto('/settings');
  await hydrated(page);
  await page.getByRole('link', { name: 'Relays' }).click();
  await expect(page).toHaveURL(/\/settings\/relays$/);
  await hydrated(page);

  // A generic endpoint: its path and its secret, shown once.
  await page.locator('#endpoint-form select[name=source]').selectOption('generic');
  await page.click('#create-endpoint');
  const path = (await page.locator('[data-test=endpoint-path]').innerText()).trim();
  const secret = (await page.locator('[data-test=endpoint-secret]').innerText()).trim();
  expect(path).toMatch(/^\/hooks\/v1\/generic\/[A-Za-z0-9_-]+$/);
  expect(secret).toMatch(/^whsec_/);
  await expect(page.locator('[data-test=endpoint]').first()).toContainText(path);

  // The relay posts a signed hard bounce for an address nobody was sent to: kept as unmatched.
  const recipient = `e2e-gone-${Date.now()}@example.org`;
  const body = JSON.stringify({ events: [{ id: `e2e-${Date.now()}`, type: 'hard_bounce', recipient, status: '5.1.1', diagnostic: '550 5.1.1 no such user' }] });
  const ts = sql('select extract(epoch from now())::bigint');
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  const signature = 'v1,' + createHmac('sha256', key).update(`m1.${ts}.${body}`).digest('base64');
  const answer = await page.request.post(path, {
    headers: { 'webhook-id': 'm1', 'webhook-timestamp': ts, 'webhook-signature': signature, 'content-type': 'application/json' },
    data: body,
  });
  expect(answer.status()).toBe(200);
  expect(await answer.json()).toEqual({ events: 1, new: 1 });
  const forged = await page.request.post(path, {
    headers: { 'webhook-id': 'm1', 'webhook-timestamp': ts, 'webhook-signature': 'v1,AAAA' },
    data: body,
  });
  expect(forged.status()).toBe(401);

  await page.reload();
  await hydrated(page);
  await page.check('#unmatched-only');
  const row = page.locator('[data-test=relay-event]', { hasText: recipient });
  await expect(row).toContainText('hard_bounce 5.1.1');
  await expect(row).toContainText('unmatched');
  await expect(row).toContainText('suppressed');

  // The soft-bounce rule, saved and still there after a reload.
  const policy = page.locator('#policy-form');
  await policy.locator('input[name=soft_threshold]').fill('4');
  await policy.locator('input[name=soft_days]').fill('20');
  await policy.locator('input[name=pause_bounce_pct]').fill('4.5');
  await page.click('#save-policy');
  await expect(page.locator('[data-test=policy-result]')).toHaveText(
    'Soft bounces suppress after 4 within 20 days; a campaign pauses itself at 4.5 % bounces or 0.1 % complaints once it delivered 500.');
  // The bounce domain: VERP envelope senders from now on.
  await page.locator('#domain-form input[name=domain]').fill('Bounce.E2E.example');
  await page.click('#save-domain');
  await expect(page.locator('[data-test=domain-result]')).toHaveText('Bounces now come back to VERP addresses at bounce.e2e.example.');
  await page.reload();
  await hydrated(page);
  await expect(policy.locator('input[name=soft_threshold]')).toHaveValue('4');
  await expect(policy.locator('input[name=soft_days]')).toHaveValue('20');
  await expect(policy.locator('input[name=pause_bounce_pct]')).toHaveValue('4.5');
  await expect(page.locator('#domain-form input[name=domain]')).toHaveValue('bounce.e2e.example');
  // Cleared again, so other specs' mail keeps its Return-Path.
  await page.locator('#domain-form input[name=domain]').fill('');
  await page.click('#save-domain');
  await expect(page.locator('[data-test=domain-result]')).toHaveText('No bounce domain: bounces go to the Return-Path.');
  expect(errors).toEqual([]);
});
