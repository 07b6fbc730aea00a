import { test, expect } from '@playwright/test';
import { hydrated, signIn, email, password } from '../support.mjs';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

test('settings: sender identity, invite a user who sets a password from the mail, audit log', async ({ page, browser }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await signIn(page);
  await page.getByRole('link', { name: 'Settings' }).click();
  await expect(page).toHaveURL(/\/settings$/);
  await hydrated(page);

  // The sender identity: saved, and still there after a reload.
  const form = page.locator('#sender-form');
  const original = {
    name: await form.locator('input[name=from_name]').inputValue(),
    reply: await form.locator('input[name=reply_to]').inputValue(),
  };
  await form.locator('input[name=from_name]').fill('Acme Analytics Team');
  await form.locator('input[name=reply_to]').fill('support@acme.example');
  await page.click('#save-sender');
  await expect(page.locator('[data-test=sender-result]')).toHaveText('Sender identity saved.');
  await page.reload();
  await hydrated(page);
  await expect(form.locator('input[name=from_name]')).toHaveValue('Acme Analytics Team');
  await expect(form.locator('input[name=reply_to]')).toHaveValue('support@acme.example');
  await expect(page.locator('[data-test=timezone]')).toContainText('Time zone:');

  // Invite a user: listed at once as invited.
  const invitee = `e2e-${Date.now()}@acme.example`;
  const invite = page.locator('#invite-form');
  await invite.locator('input[name=email]').fill(invitee);
  await invite.locator('input[name=name]').fill('Ivy Invitee');
  await invite.locator('select[name=role]').selectOption('viewer');
  await page.click('#send-invite');
  await expect(page.locator('[data-test=invite-result]')).toHaveText(`Invitation sent to ${invitee}.`);
  const row = page.locator(`[data-test=user-row][data-email="${invitee}"]`);
  await expect(row.locator('[data-test=state]')).toHaveText('Invitation sent');
  await expect(row.locator('[data-test=role]')).toHaveText('viewer');
  // The same address again: refused, saying so.
  await page.click('#send-invite');
  await expect(page.locator('[data-test=invite-result]')).toContainText('was already invited');
  await page.screenshot({ path: 'end2end/test-results/settings.png', fullPage: true });

  // The audit log shows both changes, with before and after; the filter narrows it.
  await page.getByRole('link', { name: 'Audit log' }).click();
  await expect(page).toHaveURL(/\/settings\/audit$/);
  await expect(page.locator('[data-test=audit-row][data-action="settings.sender"]').first()).toContainText('Acme Analytics Team');
  await expect(page.locator('[data-test=audit-row][data-action="user.invite"]').first()).toContainText(invitee);
  await page.selectOption('select[name=action]', 'user.invite');
  await page.click('#apply-audit-filters');
  await expect(page).toHaveURL(/action=user\.invite/);
  await expect(page.locator('[data-test=audit-row]').first()).toBeVisible();
  await expect(page.locator('[data-test=audit-row]:not([data-action="user.invite"])')).toHaveCount(0);
  await page.screenshot({ path: 'end2end/test-results/settings-audit.png', fullPage: true });

  // The invitation went through the delivery engine (captured, no SMTP here). Its link signs
  // in as the invitee, so the dashboard lists it but never opens it, not even for an owner;
  // the operator finds the copy in the data directory. Follow its link in a fresh browser,
  // set a password, and arrive signed in as the new user.
  await expect(async () => {
    await page.goto(`/deliveries?kind=invite&recipient=${encodeURIComponent(invitee)}`);
    await expect(page.locator('[data-test=delivery-row][data-status=delivered]')).toHaveCount(1, { timeout: 1_000 });
  }).toPass({ timeout: 30_000 });
  await expect(page.locator('[data-test=delivery-row] [data-test=open-message]')).toHaveCount(0);
  const captured = join(process.env.MAILROOM_DATA_DIR, 'captured');
  const message = readdirSync(captured, { recursive: true })
    .filter((f) => f.endsWith('.eml'))
    .map((f) => readFileSync(join(captured, f), 'utf8'))
    .find((m) => m.includes(`To: ${invitee}`) || m.includes(`<${invitee}>`));
  expect(message).toBeTruthy();
  expect(message).toContain('You are invited to Acme Analytics on Mailroom');
  const token = message.match(/\/invite\/([A-Za-z0-9_-]{43})/)[1];
  const fresh = await browser.newContext();
  const guest = await fresh.newPage();
  await guest.goto(`/invite/${token}`);
  await hydrated(guest);
  await expect(guest.locator('[data-test=invite-email]')).toHaveText(invitee);
  await guest.fill('input[name=password]', 'ivy-invitee-password');
  await guest.click('#set-password');
  await expect(guest.locator('#whoami')).toContainText('Ivy Invitee');
  await expect(guest.locator('#whoami')).toContainText('viewer');
  // The link worked once.
  await guest.goto(`/invite/${token}`);
  await expect(guest.locator('#invite-error')).toContainText('expired or was already used');
  await fresh.close();

  // Put the sender identity back for the specs that follow.
  await page.goto('/settings');
  await hydrated(page);
  await form.locator('input[name=from_name]').fill(original.name);
  await form.locator('input[name=reply_to]').fill(original.reply);
  await page.click('#save-sender');
  await expect(page.locator('[data-test=sender-result]')).toHaveText('Sender identity saved.');
  expect(errors).toEqual([]);
});
