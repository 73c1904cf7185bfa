import { parseOperatorKey, operatorKeyOf } from '../../domain/operatorKeys';
import { parseItemRef, defaultItemPrefix } from '../../domain/itemRef';
import { isSticky } from '../../domain/claimKinds';
import { YokeError } from '../../domain/errors';

describe('operator keys', () => {
  test('C6 each key form names its coordination kind and canonical key', () => {
    expect(parseOperatorKey('LIVE_DB_MIGRATION:primary')).toEqual({
      kind: 'migration_serialization',
      key: 'LIVE_DB_MIGRATION:primary',
      model: 'primary',
    });
    expect(parseOperatorKey('qa_host:mac-mini-lab')).toEqual({
      kind: 'qa_admission',
      key: 'QA_HOST:mac-mini-lab',
      testMachine: 'mac-mini-lab',
    });
    expect(parseOperatorKey('ROUTE_GRANT:tok.1')).toEqual({
      kind: 'route_qualification',
      key: 'ROUTE_QUALIFICATION:tok.1',
      grantKey: 'tok.1',
    });
    expect(parseOperatorKey('DEPLOY:web').kind).toBe('deploy_serialization');
  });

  test('C6 the bare qualification grant token is an operator key; the prefixed forms are aliases', () => {
    const bare = parseOperatorKey('tok-123.beta');
    expect(bare).toEqual({
      kind: 'route_qualification',
      key: 'ROUTE_QUALIFICATION:tok-123.beta',
      grantKey: 'tok-123.beta',
    });
    expect(parseOperatorKey('ROUTE_QUALIFICATION:tok-123.beta')).toEqual(bare);
    expect(parseOperatorKey('ROUTE_GRANT:tok-123.beta')).toEqual(bare);
  });

  test('C6 stored claims render back to the key they were taken with', () => {
    expect(operatorKeyOf('qa_admission', { test_machine: 'lab-1' })).toBe('QA_HOST:lab-1');
    expect(operatorKeyOf('migration_serialization', { project_id: 1, model: 'orders', item_id: 3 })).toBe(
      'LIVE_DB_MIGRATION:orders',
    );
    expect(operatorKeyOf('item', { item_id: 3 })).toBeNull();
  });

  test.each(['', 'QA_HOST', 'QA_HOST:', 'PRINTER:x', 'QA_HOST:has space', ':lab', 'has space', '-tok'])(
    'C6 malformed key %p is a usage error',
    (raw) => {
      expect(() => parseOperatorKey(raw)).toThrow(YokeError);
      try {
        parseOperatorKey(raw);
      } catch (e) {
        expect((e as YokeError).kind).toBe('usage');
        expect((e as YokeError).code).toBe('invalid_operator_key');
      }
    },
  );

  test('C5 migration and QA admission are sticky; route grants and the retired deploy lock are not', () => {
    expect(isSticky('migration_serialization')).toBe(true);
    expect(isSticky('qa_admission')).toBe(true);
    expect(isSticky('route_qualification')).toBe(false);
    expect(isSticky('deploy_serialization')).toBe(false);
    expect(isSticky('item')).toBe(false);
  });
});

describe('item references', () => {
  test('PREFIX-N parses and upper-cases the prefix', () => {
    expect(parseItemRef('web-12')).toEqual({ prefix: 'WEB', number: 12 });
    expect(() => parseItemRef('WEB-0')).toThrow(YokeError);
    expect(() => parseItemRef('12')).toThrow(YokeError);
  });

  test('a project name gives its default prefix', () => {
    expect(defaultItemPrefix('web-shop')).toBe('WEBSHOP');
    expect(defaultItemPrefix('9lives')).toBe('LIVES');
  });
});
