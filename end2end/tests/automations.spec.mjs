import { test, expect } from '@playwright/test';
import { hydrated, signIn, sql } from '../support.mjs';

test('automations: a series built with forms, its mail previewed, saved as a draft, approved by another admin, paused', async ({ page, browser }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await signIn(page);
  await page.getByRole('link', { name: 'Automations' }).click();
  await hydrated(page);
  await page.locator('[data-test=new-automation]').click();
  await expect(page).toHaveURL(/\/automations\/new$/);
  await hydrated(page);

  // The starter is a welcome mail to whoever joins the first list; a wait and a second mail.
  await expect(page.locator('[data-test=step]')).toHaveCount(1);
  await page.locator('[data-test=add-step]').selectOption('wait');
  await page.locator('[data-test=wait-days]').fill('2');
  await page.locator('[data-test=wait-days]').press('Tab');
  await page.locator('[data-test=add-step]').selectOption('email');
  await expect(page.locator('[data-test=step]')).toHaveCount(3);
  await page.locator('[data-test=mail-subject]').nth(1).fill('Two days in, {{ name }}');
  await page.locator('[data-test=mail-subject]').nth(1).press('Tab');
  await expect(page.locator('[data-test=definition]')).toHaveValue(/"days": 2/);
  await expect(page.locator('[data-test=definition]')).toHaveValue(/Two days in/);

  // Each mail previews with sample fields.
  await page.locator('[data-test=preview-mail]').nth(1).click();
  await expect(page.locator('[data-test=mail-preview]')).toContainText('Two days in, Sample Person');
  await page.screenshot({ path: 'end2end/test-results/automation-builder.png', fullPage: true });

  await page.locator('[data-test=automation-name]').fill('E2E welcome');
  await page.locator('[data-test=save-automation]').click();
  await expect(page).toHaveURL(/\/automations\/\d+$/);
  await expect(page.locator('[data-test=automation-heading]')).toHaveText('Automation: E2E welcome');
  await expect(page.locator('[data-test=automation-state]')).toContainText('draft · never approved');
  const id = new URL(page.url()).pathname.split('/')[2];
  expect(sql(`select definition -> 'steps' -> 2 ->> 'subject' from automation_versions where automation_id = ${id}`)).toBe('Two days in, {{ name }}');

  // Another admin approves it; it is live, and the list shows it.
  const context = await browser.newContext();
  const adam = await context.newPage();
  adam.on('pageerror', (e) => errors.push(String(e)));
  await signIn(adam, process.env.MAILROOM_E2E_ADMIN_EMAIL, process.env.MAILROOM_E2E_ADMIN_PASSWORD);
  await adam.goto(`/automations/${id}`);
  await hydrated(adam);
  await adam.locator('[data-test=approve-automation]').click();
  await expect(adam.locator('[data-test=approve-result]')).toHaveText('Version 1 approved: the automation is live.');
  expect(sql(`select status || ' ' || live_version from automations where id = ${id}`)).toBe('active 1');
  await adam.goto('/automations');
  await hydrated(adam);
  await expect(adam.locator('[data-test=automation-row]', { hasText: 'E2E welcome' }).locator('[data-test=automation-status]')).toHaveText('active');

  // Paused from its page.
  await page.goto(`/automations/${id}`);
  await hydrated(page);
  await page.locator('[data-test=pause-automation]').click();
  await expect(page.locator('[data-test=control-result]')).toHaveText('The automation is paused.');
  expect(sql(`select status from automations where id = ${id}`)).toBe('paused');
  await page.screenshot({ path: 'end2end/test-results/automation.png', fullPage: true });
  await context.close();
  expect(errors).toEqual([]);
});
