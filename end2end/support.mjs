// What every spec shares: the database for checks a page cannot show, hydration, sign-in.
// scripts/e2e (and its replica and release variants) pass the URL, a login and the database
// through the environment.
import { expect } from '@playwright/test';
import { execFileSync } from 'node:child_process';

export const email = process.env.MAILROOM_E2E_EMAIL;
export const password = process.env.MAILROOM_E2E_PASSWORD;
const psqlBin = process.env.MAILROOM_E2E_PSQL ?? '/usr/lib/postgresql/15/bin/psql';

/** One statement against the app's database; its result as text (psql -At). */
export function sql(statement) {
  return execFileSync(psqlBin, [process.env.MAILROOM_E2E_PG, '-v', 'ON_ERROR_STOP=1', '-qAt', '-c', statement], { encoding: 'utf8' }).trim();
}

/** Waits until the wasm has hydrated the page (the app marks its root from an effect, which runs only in the browser). */
export async function hydrated(page) {
  await expect(page.locator('#app')).toHaveAttribute('data-hydrated', 'true', { timeout: 20_000 });
}

/** Signs in through the login form (the demo owner unless told otherwise). */
export async function signIn(page, who = email, secret = password) {
  await page.goto('/login');
  await hydrated(page);
  await page.fill('input[name=email]', who);
  await page.fill('input[name=password]', secret);
  await page.click('#sign-in');
  await expect(page.locator('#org-name')).toHaveText('Acme Analytics');
}
