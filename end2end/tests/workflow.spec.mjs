import { test, expect } from '@playwright/test';
import { hydrated, signIn, sql } from '../support.mjs';

// Opens an action's confirmation; retried because the panel re-renders once more after the
// page re-reads the campaign, which closes a dialog opened in between.
async function openDialog(page, verb) {
  const details = page.locator(`[data-test=dialog-${verb}]`);
  await expect(async () => {
    if (!(await details.evaluate((d) => d.open))) await page.locator(`[data-test=open-${verb}]`).click();
    await page.waitForTimeout(300);
    await expect(details).toHaveJSProperty('open', true, { timeout: 100 });
  }).toPass({ timeout: 10_000 });
}

// Another admin, signed in in a browser context of their own.
async function asAdmin(browser, errors, email, password) {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.on('pageerror', (e) => errors.push(String(e)));
  await signIn(page, email, password);
  return { context, page };
}

test('four eyes: the owner writes, tests and submits, cannot approve; an editing admin cannot either; a third admin approves and all watch it send', async ({ page, browser }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await signIn(page, process.env.MAILROOM_E2E_EMAIL, process.env.MAILROOM_E2E_PASSWORD);
  await page.getByRole('link', { name: 'Campaigns' }).click();
  await hydrated(page);
  await page.screenshot({ path: 'end2end/test-results/campaigns.png', fullPage: true });
  await page.getByLabel("New campaign's name").fill('Spring <sale>');
  await page.click('#new-campaign');
  await expect(page).toHaveURL(/\/campaigns\/\d+\/edit$/);
  const id = new URL(page.url()).pathname.split('/')[2];

  // Write it: subject and body with a per-recipient field, one list.
  await page.locator('[data-test=subject]').fill('Spring is here, {{ name }}');
  await page.locator('[data-test=body]').fill('Hello {{ name }}, our spring sale starts today.');
  await page.locator('[data-test=list-choice]').first().check();
  await page.locator('[data-test=save]').click();
  await expect(page.locator('[data-test=save-result]')).toHaveText('Saved (version 2).');
  await page.screenshot({ path: 'end2end/test-results/campaign-editor.png', fullPage: true });
  await expect(page.locator('[data-test=preview-subject]')).toHaveText(/^Spring is here, \S/);
  await expect(page.locator('[data-test=estimate]')).toHaveText(/^[1-9]\d*$/);
  const estimate = Number(await page.locator('[data-test=estimate]').textContent());

  // A test to herself: a double click sends it once, and it is not the campaign's sending.
  await hydrated(page);
  await page.locator('[data-test=test-addresses]').fill('olivia@acme.example');
  await page.locator('[data-test=send-test]').dblclick();
  await expect(page.locator('[data-test=test-result]')).toHaveText('Test of version 2 queued to olivia@acme.example.');
  expect(sql(`select count(*) from deliveries where job_id like 'test:${id}:2:%'`)).toBe('1');

  // Submit it, then try to approve it herself: four eyes refuse.
  await page.goto(`/campaigns/${id}`);
  await hydrated(page);
  await expect(page.locator('#campaign-name')).toHaveText('Spring <sale>');
  await openDialog(page, 'submit');
  await page.locator('[data-test=confirm-submit]').click();
  await expect(page.locator('[data-test=action-result]')).toHaveText('Campaign submitted.');
  await openDialog(page, 'approve');
  await expect(page.locator('[data-test=four-eyes-note]')).toBeVisible();
  await page.locator('[data-test=confirm-approve]').click();
  await expect(page.locator('[data-test=action-result]')).toContainText('another admin must approve');

  // A second admin edits it (so it goes back to draft), submits it, and cannot approve it
  // either: they last edited it.
  const adamSession = await asAdmin(browser, errors, process.env.MAILROOM_E2E_ADMIN_EMAIL, process.env.MAILROOM_E2E_ADMIN_PASSWORD);
  const adam = adamSession.page;
  await adam.goto(`/campaigns/${id}/edit`);
  await hydrated(adam);
  await adam.locator('[data-test=body]').fill('Hello {{ name }}, our spring sale starts today. **Everything** must go.');
  await adam.locator('[data-test=save]').click();
  await expect(adam.locator('[data-test=save-result]')).toHaveText('Saved (version 3).');
  // The preview shows the Markdown body as HTML in a sandboxed frame. Right after the save the
  // frame is replaced once more (the campaign is read again), and Chromium can leave a locator
  // on the replaced sandboxed frame; so the new document is checked on the element, and what the
  // frame renders is checked on a fresh load, where nothing replaces it.
  const previewFrame = adam.locator('[data-test=preview-html]');
  await expect(previewFrame).toHaveAttribute('srcdoc', /<strong>Everything<\/strong>/, { timeout: 20_000 });
  await expect(previewFrame).toHaveAttribute('sandbox', '');
  await adam.goto(`/campaigns/${id}/edit`);
  await hydrated(adam);
  await expect(adam.frameLocator('[data-test=preview-html]').locator('strong')).toHaveText('Everything');
  await adam.goto(`/campaigns/${id}`);
  await hydrated(adam);
  await expect(adam.locator('[data-test=campaign-status]')).toHaveText('draft');
  await openDialog(adam, 'submit');
  await adam.locator('[data-test=confirm-submit]').click();
  await expect(adam.locator('[data-test=action-result]')).toHaveText('Campaign submitted.');
  await openDialog(adam, 'approve');
  await expect(adam.locator('[data-test=four-eyes-note]')).toBeVisible();
  await adam.locator('[data-test=confirm-approve]').click();
  await expect(adam.locator('[data-test=action-result]')).toContainText('another admin must approve');

  // A third admin, who neither wrote nor edited it, approves exactly what the dialog shows.
  const amySession = await asAdmin(browser, errors, process.env.MAILROOM_E2E_ADMIN2_EMAIL, process.env.MAILROOM_E2E_ADMIN2_PASSWORD);
  const amy = amySession.page;
  await amy.goto(`/campaigns/${id}`);
  await hydrated(amy);
  await openDialog(amy, 'approve');
  await expect(amy.locator('[data-test=approval-preview]')).toContainText('Everything');
  await expect(amy.locator('[data-test=four-eyes-note]')).toHaveCount(0);
  await amy.screenshot({ path: 'end2end/test-results/campaign-approval.png', fullPage: true });
  await amy.locator('[data-test=confirm-approve]').click();
  await expect(amy.locator('[data-test=action-result]')).toHaveText('Campaign approved.');
  // The owner's open page follows the send live, to 100 %, without a reload.
  await page.evaluate(() => { window.__noReload = 'still here'; });
  await expect(page.locator('[data-test=campaign-status]')).toHaveText('sent', { timeout: 40_000 });
  await expect(page.locator('[data-test=progress-summary]')).toHaveText(`${estimate} of ${estimate} recipients done`);
  expect(await page.evaluate(() => window.__noReload)).toBe('still here');
  // What this page said before (submitted, then refused to approve) is gone now that it is
  // sent; the relay-reports card shows the live panel's delivered figure.
  await expect(page.locator('[data-test=action-result]')).toHaveCount(0);
  await expect(adam.locator('[data-test=action-result]')).toHaveCount(0);
  const deliveredNow = await page.locator('[data-test=count-delivered]').textContent();
  await expect(page.locator('[data-test=reports-delivered]')).toHaveText(deliveredNow);
  // A sent campaign offers no action any more, on the open page too.
  await expect(page.locator('[data-test=open-cancel]')).toHaveCount(0);
  await page.screenshot({ path: 'end2end/test-results/campaign-sent.png', fullPage: true });
  // A sent campaign can go to the recycle bin, and come back.
  await openDialog(page, 'delete');
  await page.locator('[data-test=confirm-delete]').click();
  await expect(page).toHaveURL(/\/campaigns\/bin$/);
  const binned = page.locator('[data-test=binned]', { hasText: 'Spring <sale>' });
  await expect(binned).toHaveCount(1);
  await page.screenshot({ path: 'end2end/test-results/recycle-bin.png', fullPage: true });
  await hydrated(page);
  await binned.locator('[data-test=restore]').click();
  await expect(page.locator('[data-test=restore-result]')).toHaveText('Restored.');
  await expect(binned).toHaveCount(0);
  await adamSession.context.close();
  await amySession.context.close();
  expect(errors).toEqual([]);
});
