import { test, expect } from '@playwright/test';
import { hydrated, signIn, sql } from '../support.mjs';

test('templates: an admin creates one, sees it filled in from the sample data, and saves a new version', async ({ page }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await signIn(page);
  await page.getByRole('link', { name: 'Templates' }).click();
  await expect(page).toHaveURL(/\/templates$/);
  await hydrated(page);

  const name = `receipt-${Date.now()}`;
  await page.fill('[data-test=template-name]', name);
  await page.fill('[data-test=template-subject]', 'Receipt for {{ name }}');
  await page.fill('[data-test=template-text]', 'Hi {{ name }}, you paid {{ total }}.');
  await page.fill('[data-test=template-html]', '<p>Hi {{ name }}</p>');
  await page.fill('[data-test=template-sample]', '{"name": "<Eve>", "total": "9 EUR"}');
  await page.click('[data-test=save-template]');
  await expect(page).toHaveURL(/\/templates\/\d+$/);
  await hydrated(page);
  await expect(page.locator('[data-test=template-version]')).toContainText('Version 1');
  await expect(page.locator('[data-test=preview-subject]')).toHaveText('Receipt for <Eve>');
  // The HTML part escapes the data: the name shows as text in the sandboxed frame.
  const frame = page.frameLocator('[data-test=preview-html]');
  await expect(frame.locator('p')).toHaveText('Hi <Eve>');

  await page.fill('[data-test=template-subject]', 'Your receipt, {{ name }}');
  await page.click('[data-test=save-template]');
  await expect(page.locator('[data-test=save-result]')).toContainText('version 2');
  await expect(page.locator('[data-test=template-version]')).toContainText('Version 2');
  await expect(page.locator('[data-test=preview-subject]')).toHaveText('Your receipt, <Eve>');
  // A field the sample lacks is named instead of a preview.
  await page.fill('[data-test=template-subject]', 'For {{ nobody }}');
  await page.click('[data-test=save-template]');
  await expect(page.locator('[data-test=preview-problem]')).toContainText('subject');
  expect(errors).toEqual([]);
});

test('sign-up: the list page gives its page and form; a visitor signs up (the browser does the proof of work), stays unconfirmed, and the embedded form works too', async ({ page, browser, baseURL }) => {
  await signIn(page);
  await page.goto('/audience/lists');
  await hydrated(page);
  const card = page.locator('[data-test=list]').first();
  await card.locator('[data-test=signup] summary').click();
  const href = await card.locator('[data-test=signup-url]').getAttribute('href');
  const path = new URL(href).pathname;
  expect(path).toMatch(/^\/s\/[0-9a-f]{32}$/);
  await expect(card.locator('[data-test=signup-embed]')).toContainText('name="website"');

  // A visitor, not signed in, on the hosted page.
  const visitor = await browser.newContext({ baseURL });
  const v = await visitor.newPage();
  await v.goto(path);
  const address = `e2e-signup-${Date.now()}@example.org`;
  await v.fill('input[name=email]', address);
  await v.fill('input[name=name]', 'Vera');
  await v.click('button[type=submit]');
  await expect(v.locator('h1')).toHaveText('Check your inbox', { timeout: 30_000 });
  expect(sql(`select status || ' ' || optin_source from subscribers where email = '${address}'`)).toBe('unconfirmed signup');
  expect(sql(`select count(*) from deliveries where kind = 'confirm' and recipient = '${address}'`)).toBe('1');

  // The embedded plain form: no script of ours on that page, so the answer does the work.
  const embedded = `embed-${Date.now()}@example.org`;
  await v.setContent(`<form action="${baseURL}${path}" method="post"><input name="email" value="${embedded}"><input name="website" value=""><button type="submit">Subscribe</button></form>`);
  await v.click('button[type=submit]');
  await expect(v.locator('h1')).toHaveText('Check your inbox', { timeout: 30_000 });
  expect(sql(`select status from subscribers where email = '${embedded}'`)).toBe('unconfirmed');
  await visitor.close();

  // The admin sees how and when they opted in.
  const id = sql(`select id from subscribers where email = '${address}'`);
  await page.goto(`/audience/subscribers/${id}`);
  await hydrated(page);
  await expect(page.locator('[data-test=consent]')).toContainText('Signed up on the sign-up page at');
  await expect(page.locator('[data-test=consent]')).toContainText('Not confirmed yet.');
});
