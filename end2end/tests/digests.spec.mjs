import { test, expect } from '@playwright/test';
import { hydrated, signIn, email, password } from '../support.mjs';

const adamSwitch = (page) =>
  page.locator('[data-test=digest-admin][data-email="adam@acme.example"] [data-test=opt-in]');
const manualRows = (page) => page.locator('[data-test=digest-row][data-kind=manual]');

test('digests: toggle an opt-out, preview, resend with confirmation, see the history row', async ({ page }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await signIn(page);
  await page.getByRole('link', { name: 'Digests' }).click();
  await expect(page).toHaveURL(/\/digests$/);
  await hydrated(page);

  // The opt-in switch applies without a page reload (a marker on window survives).
  await page.evaluate(() => { window.__noReload = 'still here'; });
  await expect(adamSwitch(page)).toHaveAttribute('aria-checked', 'true');
  await adamSwitch(page).click();
  await expect(adamSwitch(page)).toHaveAttribute('aria-checked', 'false');
  await expect(page.locator('[data-test=opt-in-result]')).toHaveText('Weekly digest turned off.');
  expect(await page.evaluate(() => window.__noReload)).toBe('still here');

  // The preview is this week's digest as it would be sent.
  await expect(page.locator('[data-test=preview-subject]')).toContainText('Weekly digest for Acme Analytics');
  await page.getByText('Plain-text version').click();
  await expect(page.locator('#digest-preview-text')).toContainText('Weekly digest for Acme Analytics');
  await expect(page.frameLocator('#digest-preview').locator('h1')).toHaveText('Weekly digest for Acme Analytics');

  // Resend now: a confirmation first; it warns while this week's scheduled digest is not out.
  const before = await manualRows(page).count();
  const weekState = await page.locator('[data-test=this-week-state]').textContent();
  await page.click('#resend-now');
  const dialog = page.getByRole('dialog');
  await expect(dialog).toContainText('Resend the digest now?');
  await expect(dialog.locator('[data-test=pending-warning]')).toHaveCount(weekState === 'not sent yet' ? 1 : 0);
  await expect(dialog.locator('[data-test=skipped-note]')).toHaveCount(weekState.startsWith('skipped') ? 1 : 0);
  await dialog.locator('#confirm-resend').click();
  await expect(page).toHaveURL(/\/digests$/);
  await expect(manualRows(page)).toHaveCount(before + 1);
  const row = manualRows(page).first();
  await expect(row).toContainText('Olivia Owner');
  // Adam opted out: Olivia and Amy (the other admin) get it, Adam does not.
  await expect(row.locator('[data-test=recipient-count]')).toHaveText('2');
  await expect(row.locator('[data-test=digest-recipient]')).toHaveText([/amy@acme\.example/, /olivia@acme\.example/]);
  expect(errors).toEqual([]);
});

test('digests: the forms work before the wasm has loaded', async ({ browser, page }) => {
  await signIn(page);
  const noJs = await browser.newContext({ javaScriptEnabled: false, storageState: await page.context().storageState() });
  const p = await noJs.newPage();
  await p.goto('/digests');
  const before = await manualRows(p).count();
  // Flip Adam's opt-in with a plain form post (whatever the other test left it at).
  const was = await adamSwitch(p).getAttribute('aria-checked');
  await Promise.all([
    p.waitForResponse((r) => r.url().includes('/api/digest_opt_in')),
    adamSwitch(p).click(),
  ]);
  await p.goto('/digests');
  await expect(adamSwitch(p)).toHaveAttribute('aria-checked', was === 'true' ? 'false' : 'true');
  // A dialog key is a second of the database clock: open this one in a new second.
  await p.waitForTimeout(1100);
  await p.goto('/digests/resend');
  await p.check('[data-test=only-me]');
  await Promise.all([
    p.waitForResponse((r) => r.url().includes('/api/digest_resend')),
    p.click('#confirm-resend'),
  ]);
  await p.goto('/digests');
  await expect(manualRows(p)).toHaveCount(before + 1);
  const row = manualRows(p).first();
  await expect(row).toContainText('(only me)');
  await expect(row.locator('[data-test=recipient-count]')).toHaveText('1');
  await noJs.close();
});
