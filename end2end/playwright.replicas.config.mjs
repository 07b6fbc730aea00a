// The specs that need two replicas (scripts/e2e-replicas starts them); scripts/e2e, with its one
// server, runs ./tests only.
import base from './playwright.config.mjs';

export default { ...base, testDir: './replicas', timeout: 120_000 };
