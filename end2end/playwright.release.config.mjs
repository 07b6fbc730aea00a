// The release binary alone (scripts/e2e-release copies it into an empty directory and starts it):
// the dashboard it serves from inside itself hydrates and works.
import base from './playwright.config.mjs';

export default { ...base, testDir: './release' };
