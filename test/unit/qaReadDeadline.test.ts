import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../config/yokeConfig';
import { YokeError } from '../../domain/errors';

const home = mkdtempSync(join(tmpdir(), 'yoke-deadline-'));

test('Q5 YOKE_QA_READ_DEADLINE_MS: 5000 by default, a positive whole number of ms when set, anything else invalid_configuration naming it', () => {
  expect(loadConfig({ YOKE_HOME: home }).qaReadDeadlineMs).toBe(5_000);
  expect(loadConfig({ YOKE_HOME: home, YOKE_QA_READ_DEADLINE_MS: '150' }).qaReadDeadlineMs).toBe(150);
  for (const bad of ['abc', '0', '-5', '1.5']) {
    let thrown: unknown;
    try {
      loadConfig({ YOKE_HOME: home, YOKE_QA_READ_DEADLINE_MS: bad });
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(YokeError);
    expect(thrown).toMatchObject({ code: 'invalid_configuration', details: { variable: 'YOKE_QA_READ_DEADLINE_MS' } });
  }
});
