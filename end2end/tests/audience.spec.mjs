import { test, expect } from '@playwright/test';
import { hydrated, signIn, email, password } from '../support.mjs';

const csv = [
  'email,name',
  'e2e.ann@example.org,Ann E2E',
  'not-an-address,Broken',
  'e2e.bo@example.org,<script>window.__pwned = 1</script>',
  'E2E.Ann@example.org,Ann again',
  '',
].join('\n');

test('audience: a CSV import with bad rows shows them by line; subscribers, a subscriber, suppressions', async ({ page }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await signIn(page);
  await page.getByRole('link', { name: 'Audience' }).click();
  await expect(page).toHaveURL(/\/audience$/);
  await hydrated(page);
  await expect(page.locator('[data-test=subscriber-row]').first()).toBeVisible();
  await page.screenshot({ path: 'end2end/test-results/audience-subscribers.png', fullPage: true });

  // A new list, then a file into it.
  await page.getByRole('link', { name: 'Lists' }).click();
  await hydrated(page);
  await page.locator('[data-test=new-list-name]').fill('E2E import');
  await page.locator('[data-test=create-list]').click();
  await expect(page.locator('[data-test=create-result]')).toHaveText('List "E2E import" created.');
  const card = page.locator('[data-test=list][data-name="E2E import"]');
  await expect(card.locator('[data-test=members]')).toHaveText('0 members');
  await page.screenshot({ path: 'end2end/test-results/audience-lists.png', fullPage: true });
  await card.locator('[data-test=import-file]').setInputFiles({ name: 'people.csv', mimeType: 'text/csv', buffer: Buffer.from(csv) });
  await card.locator('[data-test=import]').click();
  await expect(page).toHaveURL(/\/audience\/imports\/\d+$/);
  const status = page.locator('[data-test=import-status]');
  await expect(status).toHaveText('Imported: 4 rows read, 2 new subscribers, 2 added to the list, 2 rows refused', { timeout: 20_000 });
  const refused = page.locator('[data-test=import-error]');
  await expect(refused).toHaveCount(2);
  await expect(refused.nth(0)).toContainText('3');
  await expect(refused.nth(0)).toContainText('“not-an-address” is not a valid e-mail address');
  await expect(refused.nth(1)).toContainText('E2E.Ann@example.org appears earlier in the file');
  await page.screenshot({ path: 'end2end/test-results/audience-import.png', fullPage: true });

  // The imported name is text, never markup; the subscriber's page has their lists and history.
  await page.goto('/audience?q=e2e.bo');
  await hydrated(page);
  await expect(page.locator('[data-test=subscriber-row]')).toHaveCount(1);
  await expect(page.locator('#subscribers')).toContainText('<script>window.__pwned = 1</script>');
  expect(await page.evaluate(() => window.__pwned)).toBeUndefined();
  await page.getByRole('link', { name: 'e2e.bo@example.org' }).click();
  await expect(page.locator('[data-test=subscriber-email]')).toHaveText('e2e.bo@example.org');
  await hydrated(page);
  await expect(page.locator('[data-test=no-history]')).toBeVisible();
  await page.screenshot({ path: 'end2end/test-results/audience-subscriber.png', fullPage: true });

  // Suppress an address, find it, remove it after the confirmation.
  await page.goto('/audience/suppressions');
  await hydrated(page);
  await page.locator('[data-test=add-addresses]').fill('e2e.gone@example.org');
  await page.locator('[data-test=add]').click();
  await expect(page.locator('[data-test=add-result]')).toHaveText('1 suppressed.');
  const row = page.locator('[data-test=suppression-row][data-email="e2e.gone@example.org"]');
  await expect(row).toContainText('manual');
  await page.screenshot({ path: 'end2end/test-results/audience-suppressions.png', fullPage: true });
  await row.locator('[data-test=remove] summary').click();
  await row.locator('[data-test=confirm-remove]').click();
  await expect(page.locator('[data-test=remove-result]')).toHaveText('e2e.gone@example.org may be mailed again.');
  await expect(row).toHaveCount(0);
  expect(errors).toEqual([]);
});

test('dark mode follows the system preference', async ({ page }) => {
  await page.emulateMedia({ colorScheme: 'dark' });
  await signIn(page);
  await hydrated(page);
  const background = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  const header = await page.evaluate(() => getComputedStyle(document.querySelector('header')).backgroundColor);
  // slate-950 and slate-900 (oklch in Tailwind 4): both dark, neither the light theme's.
  for (const color of [background, header]) {
    expect(color).not.toBe('rgb(255, 255, 255)');
    expect(color).not.toBe('rgb(248, 250, 252)');
  }
  expect(background).not.toBe(header);
  await page.screenshot({ path: 'end2end/test-results/overview-dark.png', fullPage: true });
  await page.goto('/campaigns');
  await hydrated(page);
  await page.screenshot({ path: 'end2end/test-results/campaigns-dark.png', fullPage: true });
  await page.emulateMedia({ colorScheme: 'light' });
  const light = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  expect(light).not.toBe(background);
});
