import { test, expect } from '@playwright/test';
import { hydrated, signIn, sql } from '../support.mjs';

test('segments: built with forms, nested, counted live as they grow, a bad condition named; saved, listed, offered to campaigns', async ({ page }) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await signIn(page);
  await page.goto('/audience/segments');
  await hydrated(page);
  await page.locator('[data-test=new-segment]').click();
  await expect(page).toHaveURL(/\/audience\/segments\/new$/);
  await hydrated(page);
  const count = page.locator('[data-test=live-count]');
  const everyone = sql("select count(*) from subscribers s join orgs o on o.id = s.org_id where o.name = 'Acme Analytics' and s.erased_at is null");
  await expect(count).toHaveText(everyone);

  // Confirmed subscribers only.
  const root = page.locator('[data-test=tree] > [data-test=group]');
  await root.locator('[data-test=add-condition]').first().selectOption('status');
  const confirmed = sql("select count(*) from subscribers s join orgs o on o.id = s.org_id where o.name = 'Acme Analytics' and s.erased_at is null and s.status = 'confirmed'");
  await expect(count).toHaveText(confirmed);
  await expect(page.locator('[data-test=sample-row]').first()).toBeVisible();

  // An attribute without a name is named as the fault, and nothing is counted.
  await root.locator('[data-test=add-condition]').first().selectOption('attribute');
  await expect(page.locator('[data-test=preview-problem]')).toContainText('children[1].name');

  // Made a list condition instead: the confirmed members of the first list.
  await page.locator('[data-test=condition-kind]').nth(1).selectOption('list');
  const listName = await page.locator('[data-test=list-id] option:checked').textContent();
  const members = sql(`select count(*) from subscribers s join list_members m on m.subscriber_id = s.id join lists l on l.id = m.list_id
    join orgs o on o.id = s.org_id where o.name = 'Acme Analytics' and l.name = '${listName.replaceAll("'", "''")}' and s.status = 'confirmed' and s.erased_at is null`);
  await expect(count).toHaveText(members);

  // A nested group: none of (did an event nobody did) leaves the count as it was.
  await root.locator('[data-test=add-condition]').first().selectOption('group');
  const inner = root.locator('[data-test=group]').first();
  await inner.locator('[data-test=group-op]').first().selectOption('none');
  await inner.locator('[data-test=add-condition]').first().selectOption('event');
  await inner.locator('[data-test=event-name]').fill('e2e_never_happened');
  await inner.locator('[data-test=event-name]').press('Tab');
  await expect(page.locator('[data-test=definition]')).toHaveValue(/e2e_never_happened/);
  // An event's property takes any value test, as an attribute does.
  await inner.locator('[data-test=property-name]').fill('plan');
  await inner.locator('[data-test=property-name]').press('Tab');
  await inner.locator('[data-test=property-op]').selectOption('text_in');
  await inner.locator('[data-test=property-value]').fill('pro, team');
  await inner.locator('[data-test=property-value]').press('Tab');
  await expect(page.locator('[data-test=definition]')).toHaveValue(/"property":\{"name":"plan","test":\{"op":"text_in","values":\["pro","team"\]\}\}/);
  await expect(count).toHaveText(members);
  await page.screenshot({ path: 'end2end/test-results/segment-builder.png', fullPage: true });

  await page.locator('[data-test=segment-name]').fill('E2E confirmed members');
  await page.locator('[data-test=save-segment]').click();
  await expect(page).toHaveURL(/\/audience\/segments\/\d+$/);
  await expect(page.locator('[data-test=segment-heading]')).toHaveText('Segment: E2E confirmed members (version 1)');
  const stored = sql("select definition::text from segments where name = 'E2E confirmed members'");
  expect(stored).toContain('e2e_never_happened');

  await page.goto('/audience/segments');
  await hydrated(page);
  const row = page.locator('[data-test=segment-row]', { hasText: 'E2E confirmed members' });
  await expect(row.locator('[data-test=segment-count]')).toHaveText(members);
  await page.screenshot({ path: 'end2end/test-results/segments.png', fullPage: true });

  // The campaign editor offers it, to send to or to leave out.
  await page.goto('/campaigns');
  await hydrated(page);
  await page.getByLabel("New campaign's name").fill('E2E to a segment');
  await page.click('#new-campaign');
  await expect(page).toHaveURL(/\/campaigns\/\d+\/edit$/);
  await hydrated(page);
  await expect(page.locator('[data-test=segment-choice]')).toHaveCount(1);
  await expect(page.locator('[data-test=segment-exclude]')).toHaveCount(1);
  expect(errors).toEqual([]);
});
