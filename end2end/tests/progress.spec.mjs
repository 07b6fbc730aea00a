import { test, expect } from '@playwright/test';
import { hydrated, sql, email, password } from '../support.mjs';

test('campaign page: progress moves live, without a reload, as the workers send', async ({ page }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto('/login');
  await hydrated(page);
  await page.fill('input[name=email]', email);
  await page.fill('input[name=password]', password);
  await page.click('#sign-in');
  await expect(page.locator('#org-name')).toHaveText('Acme Analytics');

  await page.getByRole('link', { name: 'Campaigns' }).click();
  await page.getByRole('link', { name: 'December product update' }).click();
  await expect(page).toHaveURL(/\/campaigns\/\d+$/);
  await hydrated(page);
  await expect(page.locator('#campaign-name')).toHaveText('December product update');
  await expect(page.locator('[data-test=campaign-status]')).toHaveText('draft');
  await expect(page.locator('[data-test=live]')).toHaveText('● live');
  await page.evaluate(() => { window.__noReload = 'still here'; });

  // A second admin's approval, written to the database (workflow.spec.mjs approves through the
  // pages) so this page stays open: the workers of the running server start it, send it
  // through capture, and the page follows.
  const id = Number(new URL(page.url()).pathname.split('/').pop());
  sql(`update campaigns c set status = 'approved', submitted_at = now(), approved_at = now(),
      approver_id = (select u.id from users u where u.org_id = c.org_id and u.email_lower = 'adam@acme.example'),
      approved_version = content_version, scheduled_for = now()
    where c.id = ${id}`);
  sql(`select pg_notify('mailroom_campaign_approved', '${id}')`);

  await expect(page.locator('[data-test=campaign-status]')).toHaveText('sent', { timeout: 40_000 });
  const total = Number(sql(`select recipients_total from campaigns where id = ${id}`));
  expect(total).toBeGreaterThan(0);
  const delivered = Number(sql(`select count(*) from deliveries where campaign_id = ${id} and kind = 'campaign' and status = 'delivered'`));
  await expect(page.locator('[data-test=count-delivered]')).toHaveText(String(delivered));
  // The relay-reports card above follows the same reading: one delivered figure, not the 0 read
  // when the page opened.
  await expect(page.locator('[data-test=reports-delivered]')).toHaveText(String(delivered));
  await expect(page.locator('[data-test=progress-summary]')).toHaveText(`${total} of ${total} recipients done`);
  await expect(page.locator('[data-test=count-queued]')).toHaveText('0');
  expect(await page.evaluate(() => window.__noReload)).toBe('still here');

  // Another organisation's (or a missing) campaign is not found.
  await page.goto('/campaigns/999999');
  await expect(page.getByRole('alert')).toHaveText('Not found.');
  expect(errors).toEqual([]);
});
