import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { projectRoot } from '../../config/paths';

const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser'];

/** Debian's Chromium, installed with apt-get by scripts/install-chromium.sh when missing. */
export function chromiumPath(): string {
  if (process.env.CHROMIUM_PATH) return process.env.CHROMIUM_PATH;
  const found = CANDIDATES.find((p) => existsSync(p));
  if (found) return found;
  execFileSync('bash', [join(projectRoot(__dirname), 'scripts', 'install-chromium.sh')], {
    stdio: 'inherit',
    timeout: 900_000,
  });
  const installed = CANDIDATES.find((p) => existsSync(p));
  if (!installed) throw new Error('chromium is not installed and apt-get could not install it');
  return installed;
}
