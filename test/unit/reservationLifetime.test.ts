import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../config/yokeConfig';

/** A YOKE_HOME whose services.json is what `npm start` recorded. */
function homeRecording(recorded: Record<string, unknown>): string {
  const home = mkdtempSync(join(tmpdir(), 'yoke-home-'));
  writeFileSync(join(home, 'services.json'), JSON.stringify({ processes: [], ...recorded }));
  return home;
}

test('W9 (issue 3) a CLI without YOKE_RESERVATION_LIFETIME_SECONDS reserves for the lifetime npm start recorded for its worker', () => {
  const home = homeRecording({ temporalAddress: '127.0.0.1:7233', reservationLifetimeSeconds: 30 });
  expect(loadConfig({ YOKE_HOME: home }).reservationLifetimeMs).toBe(30_000);
  // the variable, where set, still wins; with neither, the documented default
  expect(loadConfig({ YOKE_HOME: home, YOKE_RESERVATION_LIFETIME_SECONDS: '45' }).reservationLifetimeMs).toBe(45_000);
  expect(loadConfig({ YOKE_HOME: homeRecording({}) }).reservationLifetimeMs).toBe(300_000);
});
