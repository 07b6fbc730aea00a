import { test, expect } from '@playwright/test';
import { hydrated, signIn, sql } from '../support.mjs';

// Markup typed into any field must stay text on every page, in the server's HTML and after
// hydration: a campaign body that closes its <textarea> could otherwise put a live form on the
// owner's editor page that makes its admin author an owner with one click.

// Ends every raw-text element a page could hold it in, then tries three kinds of live markup.
// "zz" sorts it after the demo data, so the specs that pick the first list are not disturbed.
const P = 'zz</textarea></title></style></script><b data-injected="b">b</b>'
  + '<img data-injected="img" src="/pkg/none.png"><form data-injected="form" action="/api/set_user_role"><button>go</button></form>';
const quoted = `$inj$${P}$inj$`;

test('markup typed into any field stays text on every page, for the server and after hydration', async ({ page, browser }) => {
  // The attack as an admin would make it: writing the campaign through the editor.
  const context = await browser.newContext();
  const admin = await context.newPage();
  await signIn(admin, process.env.MAILROOM_E2E_ADMIN_EMAIL, process.env.MAILROOM_E2E_ADMIN_PASSWORD);
  await admin.getByRole('link', { name: 'Campaigns' }).click();
  await hydrated(admin);
  await admin.getByLabel("New campaign's name").fill(P);
  await admin.click('#new-campaign');
  await expect(admin).toHaveURL(/\/campaigns\/\d+\/edit$/);
  const campaign = new URL(admin.url()).pathname.split('/')[2];
  await admin.locator('[data-test=subject]').fill(P);
  await admin.locator('[data-test=body]').fill(P);
  await admin.locator('[data-test=save]').click();
  await expect(admin.locator('[data-test=save-result]')).toHaveText('Saved (version 2).');
  await context.close();

  // The other typed fields, planted where their forms would store them: a list, a subscriber
  // on it, a user.
  const org = sql("select id from orgs where slug = 'acme'");
  const list = sql(`insert into lists (org_id, name) values (${org}, ${quoted}) returning id`);
  const subscriber = sql(`insert into subscribers (org_id, email, email_lower, name)
    values (${org}, 'zz-injected@acme.example', 'zz-injected@acme.example', ${quoted}) returning id`);
  sql(`insert into list_members (org_id, list_id, subscriber_id) values (${org}, ${list}, ${subscriber})`);
  const user = sql(`insert into users (org_id, email, email_lower, name, role, password_hash, disabled)
    values (${org}, 'zz-injected-user@acme.example', 'zz-injected-user@acme.example', ${quoted}, 'viewer', 'x', true) returning id`);

  try {
    await signIn(page, process.env.MAILROOM_E2E_EMAIL, process.env.MAILROOM_E2E_PASSWORD);
    const pages = ['/', '/campaigns', `/campaigns/${campaign}`, `/campaigns/${campaign}/edit`, '/audience',
      `/audience/subscribers/${subscriber}`, '/audience/lists', '/audience/suppressions', '/deliveries',
      '/digests', '/settings', '/settings/audit'];
    for (const path of pages) {
      // The server's HTML, as a browser without the wasm would parse it.
      const html = await (await page.request.get(path)).text();
      for (const live of ['<b data-injected', '<img data-injected', '<form data-injected']) {
        expect(html, `${path}: ${live}`).not.toContain(live);
      }
      await page.goto(path);
      await expect(page.locator('[data-injected]'), `${path} as parsed`).toHaveCount(0);
      await hydrated(page);
      await expect(page.locator('[data-injected]'), `${path} after hydration`).toHaveCount(0);
    }
    // The text itself is shown as typed.
    await page.goto(`/campaigns/${campaign}/edit`);
    await hydrated(page);
    await expect(page.locator('[data-test=body]')).toHaveValue(P);
    await expect(page.locator('[data-test=subject]')).toHaveValue(P);
    await page.goto('/audience/lists');
    await expect(page.getByText(P).first()).toBeVisible();
  } finally {
    sql(`delete from users where id = ${user}`);
    sql(`delete from list_members where list_id = ${list}`);
    sql(`delete from subscribers where id = ${subscriber}`);
    sql(`delete from lists where id = ${list}`);
    sql(`update campaigns set deleted_at = now() where id = ${campaign}`);
  }
});
