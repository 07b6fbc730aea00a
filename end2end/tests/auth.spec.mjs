import { test, expect } from '@playwright/test';

const email = process.env.MAILROOM_E2E_EMAIL;
const password = process.env.MAILROOM_E2E_PASSWORD;

// The app marks #app data-hydrated="true" from an effect, which runs only in the browser.
async function hydrated(page) {
  await expect(page.locator('#app')).toHaveAttribute('data-hydrated', 'true', { timeout: 20_000 });
}

test('a wrong password shows a clear error and no session', async ({ page }) => {
  await page.goto('/login');
  await hydrated(page);
  await page.fill('input[name=email]', email);
  await page.fill('input[name=password]', 'definitely-wrong');
  await page.click('#sign-in');
  await expect(page.locator('#login-error')).toHaveText('Wrong e-mail address or password.');
  await page.goto('/');
  await expect(page).toHaveURL(/\/login$/);
});

test('sign in, see the overview, navigate without reload, sign out', async ({ page }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto('/');
  await expect(page).toHaveURL(/\/login$/);
  await hydrated(page);
  await page.fill('input[name=email]', email);
  await page.fill('input[name=password]', password);
  await page.click('#sign-in');

  await expect(page.locator('#org-name')).toHaveText('Acme Analytics');
  await expect(page.getByText('Subscribers', { exact: true })).toBeVisible();
  await expect(page.locator('#whoami')).toContainText('Olivia Owner');
  await hydrated(page);

  // A marker on window survives client-side navigation and dies with a full reload.
  await page.evaluate(() => { window.__noReload = 'still here'; });
  await page.getByRole('link', { name: 'Campaigns' }).click();
  await expect(page).toHaveURL(/\/campaigns$/);
  await expect(page.locator('#campaigns')).toContainText('December product update');
  expect(await page.evaluate(() => window.__noReload)).toBe('still here');

  await page.click('#logout');
  await expect(page).toHaveURL(/\/login$/);
  await page.goto('/');
  await expect(page).toHaveURL(/\/login$/);
  expect(errors).toEqual([]);
});
