import { readableDatabaseUrl } from '../../config/databaseUrl';

describe('readableDatabaseUrl', () => {
  const pghost = process.env.PGHOST;
  afterEach(() => {
    if (pghost === undefined) delete process.env.PGHOST;
    else process.env.PGHOST = pghost;
  });

  test('a URL the WHATWG parser reads is kept as given', () => {
    for (const url of [
      'postgres://u:p@db:5432/yoke',
      'postgresql:///yoke?host=/run/postgresql',
      'postgres://u@%2Frun%2Fpg/yoke',
    ])
      expect(readableDatabaseUrl(url)).toBe(url);
  });

  test('an empty host with a host parameter gets a placeholder host the parameter overrides', () => {
    process.env.PGHOST = '/elsewhere';
    expect(readableDatabaseUrl('postgres://u:p@/yoke?host=/run/postgresql&port=5433')).toBe(
      'postgres://u:p@localhost/yoke?host=/run/postgresql&port=5433',
    );
  });

  test('an empty host alone means PGHOST (a socket directory percent-encoded), else localhost', () => {
    process.env.PGHOST = '/run/postgresql';
    expect(readableDatabaseUrl('postgres://u@/yoke')).toBe('postgres://u@%2Frun%2Fpostgresql/yoke');
    delete process.env.PGHOST;
    expect(readableDatabaseUrl('postgres://u@/yoke')).toBe('postgres://u@localhost/yoke');
  });

  test('anything but a postgres URL is no database URL', () => {
    for (const bad of ['http://db/yoke', 'db:5432/yoke', 'nonsense', 'mysql://u@/db?host=/tmp', ''])
      expect(readableDatabaseUrl(bad)).toBeUndefined();
  });
});
