import { renderClaimsColumn, type RowState } from '../../domain/board/claimsColumn';
import { BoardPayloadSchema, type BoardClaim, type DocPairing } from '../../domain/board/payload';
import { boardMarkdown, renderBoard } from '../../domain/board/render';

let nextId = 1;
let clock = Date.parse('2026-11-30T08:00:00Z');

/** A claim as the board read returns it; each call is a minute after the one before. */
function claim(kind: string, scope: Record<string, unknown>, extra: Partial<BoardClaim> = {}): BoardClaim {
  clock += 60_000;
  return { claim_id: nextId++, kind, scope, claimed_at: new Date(clock).toISOString(), released_at: null, ...extra };
}
const released = (c: BoardClaim, minutesLater = 30): BoardClaim => ({
  ...c,
  released_at: new Date(Date.parse(c.claimed_at) + minutesLater * 60_000).toISOString(),
});
const render = (claims: BoardClaim[], state: RowState = 'active', pairings: DocPairing[] | undefined = []) =>
  renderClaimsColumn({ state, claims, pairings });

describe('B1 the shapes table: every claim primitive renders as its keycap', () => {
  const seat = claim('steering', { project_id: 1 }, { project: 'yoke' });
  const lock = claim('strategy_doc_claim', { project_id: 1, document: 'CURRENT-PLAN' }, { project: 'yoke' });
  const rows: [string, BoardClaim[], DocPairing[], string[]][] = [
    ['work_claim (item)', [claim('item', { item_id: 7 }, { item: 'WEB-7' })], [], ['WEB-7']],
    [
      'work_claim (epic task)',
      [claim('epic_task', { item_id: 7, task: 'T008' }, { item: 'WEB-7' })],
      [],
      ['WEB-7 T008'],
    ],
    ['work_claim (process)', [claim('process', { project_id: 1, process_key: 'FEED' })], [], ['⚙ FEED']],
    [
      'work_claim (steering) with a document',
      [seat, lock],
      [{ seat_claim_id: seat.claim_id, lock_claim_id: lock.claim_id }],
      ['🛞 steering yoke · CURRENT-PLAN'],
    ],
    ['work_claim (steering), a project seat without a document', [seat], [], ['🛞 steering yoke']],
    ['work_claim (other kind)', [claim('future_kind', { k: 'v' })], [], ['future_kind:{"k":"v"}']],
    [
      'uncovered strategy_doc_claim',
      [claim('strategy_doc_claim', { project_id: 1, document: 'MISSION' }, { project: 'yoke' })],
      [],
      ['🛞 yoke · MISSION'],
    ],
    [
      'work_claim + same-item path_claim decoration',
      [
        claim('item', { item_id: 7 }, { item: 'WEB-7' }),
        claim('path_claim', { project_id: 1, path: 'src/a', declared_paths: 23 }, { item: 'WEB-7' }),
      ],
      [],
      ['WEB-7 📁23'],
    ],
    [
      'path_claim orphan',
      [claim('path_claim', { project_id: 1, path: 'x', declared_paths: 5 }, { item: 'WEB-7' })],
      [],
      ['📁5 (WEB-7)'],
    ],
    [
      'path_claim process anchor',
      [claim('path_claim', { project_id: 1, path: 'feed/', process_key: 'FEED', declared_paths: 3 })],
      [],
      ['📁3 (⚙ FEED)'],
    ],
    [
      'coordination claim',
      [claim('qa_admission', { test_machine: 'mac-mini-lab' }, { key: 'QA_HOST:mac-mini-lab' })],
      [],
      ['🔒 QA_HOST:mac-mini-lab'],
    ],
    [
      'coordination claim (item-owned)',
      [
        claim(
          'migration_serialization',
          { project_id: 1, model: 'primary', item_id: 7 },
          { key: 'LIVE_DB_MIGRATION:primary', item: 'WEB-7' },
        ),
      ],
      [],
      ['🔒 LIVE_DB_MIGRATION:primary (WEB-7)'],
    ],
  ];
  test.each(rows)('B1 %s', (_name, claims, pairings, expected) => {
    expect(render(claims, 'active', pairings)).toEqual(expected);
  });

  test('B1 both tables render through the one column: the same claims give the same keycaps', () => {
    const claims = [claim('item', { item_id: 7 }, { item: 'WEB-7' })];
    const session = { session_id: 's', actor_id: 'a', offered_at: '2026-11-30T08:00:00Z', claims };
    const board = renderBoard({
      generated_at: '2026-11-30T09:00:00Z',
      active_sessions: [session],
      recent_sessions: [{ ...session, ended_at: '2026-11-30T08:30:00Z' }],
      doc_pairings: [],
    });
    expect(board.active_sessions[0]!.claims).toEqual(['WEB-7']);
    expect(board.recent_sessions[0]!.claims).toEqual(['WEB-7']);
    const md = boardMarkdown(board);
    expect(md).toContain('## Active Harness Sessions');
    expect(md).toContain('## Recent Sessions');
    expect(md.match(/\| Claims \|/g)).toHaveLength(2);
    expect(md).toContain('<kbd>WEB-7</kbd>');
  });
});

describe('the rules', () => {
  test('B2 same-session path claims on one item roll up into one keycap with the summed total', () => {
    const claims = [
      claim('path_claim', { project_id: 1, path: 'a' }, { item: 'WEB-3' }),
      claim('path_claim', { project_id: 1, path: 'b' }, { item: 'WEB-3' }),
      claim('path_claim', { project_id: 1, path: 'c', declared_paths: 4 }, { item: 'WEB-3' }),
      claim('path_claim', { project_id: 1, path: 'd' }, { item: 'WEB-4' }),
    ];
    expect(render(claims)).toEqual(['📁6 (WEB-3)', '📁1 (WEB-4)']);
    expect(render([claim('item', { item_id: 3 }, { item: 'WEB-3' }), ...claims])).toEqual(['WEB-3 📁6', '📁1 (WEB-4)']);
  });

  test('B3 coordination claims never decorate work claims and never render as work claims', () => {
    const claims = [
      claim('item', { item_id: 7 }, { item: 'WEB-7' }),
      claim(
        'migration_serialization',
        { project_id: 1, model: 'primary', item_id: 7 },
        { key: 'LIVE_DB_MIGRATION:primary', item: 'WEB-7' },
      ),
      claim('route_qualification', { project_id: 1, grant_key: 'tok' }, { key: 'ROUTE_QUALIFICATION:tok' }),
      claim('deploy_serialization', { project_id: 1 }, { key: 'DEPLOY:web' }),
    ];
    const keycaps = render(claims, 'recent');
    expect(keycaps).toEqual([
      'WEB-7',
      '🔒 LIVE_DB_MIGRATION:primary (WEB-7)',
      '🔒 ROUTE_QUALIFICATION:tok',
      '🔒 DEPLOY:web',
    ]);
    expect(keycaps.some((k) => k.includes(':{'))).toBe(false);
  });

  test('B4 order inside a row: work claims, uncovered document locks, orphan path claims, coordination claims', () => {
    // Taken in the reverse order, so only the rule can put them right.
    const claims = [
      claim('qa_admission', { test_machine: 'lab' }, { key: 'QA_HOST:lab' }),
      claim('path_claim', { project_id: 1, path: 'p' }, { item: 'WEB-9' }),
      claim('strategy_doc_claim', { project_id: 1, document: 'MISSION' }, { project: 'yoke' }),
      claim('process', { project_id: 1, process_key: 'FEED' }),
      claim('item', { item_id: 1 }, { item: 'WEB-1' }),
    ];
    expect(render(claims)).toEqual(['⚙ FEED', 'WEB-1', '🛞 yoke · MISSION', '📁1 (WEB-9)', '🔒 QA_HOST:lab']);
  });

  test('B5 a seat folds in only the locks the pairing read paired with it; project id is part of the lock key', () => {
    const seatYoke = claim('steering', { project_id: 1 }, { project: 'yoke' });
    const missionYoke = claim('strategy_doc_claim', { project_id: 1, document: 'MISSION' }, { project: 'yoke' });
    const planYoke = claim('strategy_doc_claim', { project_id: 1, document: 'CURRENT-PLAN' }, { project: 'yoke' });
    const missionWeb = claim('strategy_doc_claim', { project_id: 2, document: 'MISSION' }, { project: 'web' });
    const pairings = [
      { seat_claim_id: seatYoke.claim_id, lock_claim_id: missionYoke.claim_id },
      { seat_claim_id: seatYoke.claim_id, lock_claim_id: planYoke.claim_id },
    ];
    expect(render([seatYoke, missionYoke, planYoke, missionWeb], 'active', pairings)).toEqual([
      '🛞 steering yoke · CURRENT-PLAN, MISSION',
      '🛞 web · MISSION',
    ]);
    // A seat without a lock renders no doc lock.
    expect(render([seatYoke], 'active', pairings)).toEqual(['🛞 steering yoke']);
  });

  test('B6 an older recorded payload without the pairing read keeps seat and lock as separate keycaps', () => {
    const recorded = {
      generated_at: '2026-01-01T00:00:00Z',
      active_sessions: [
        {
          session_id: 'old',
          actor_id: 'ops',
          offered_at: '2026-01-01T00:00:00Z',
          claims: [
            {
              claim_id: 1,
              kind: 'steering',
              scope: { project_id: 1 },
              project: 'yoke',
              claimed_at: '2026-01-01T00:00:00Z',
            },
            {
              claim_id: 2,
              kind: 'strategy_doc_claim',
              scope: { project_id: 1, document: 'MISSION' },
              project: 'yoke',
              claimed_at: '2026-01-01T00:01:00Z',
            },
          ],
        },
      ],
      recent_sessions: [],
    };
    const board = renderBoard(BoardPayloadSchema.parse(recorded));
    expect(board.active_sessions[0]!.claims).toEqual(['🛞 steering yoke', '🛞 yoke · MISSION']);
    expect(() => boardMarkdown(board)).not.toThrow();
  });

  test('B7 repeat work claims on one target and repeat coordination claims on one key collapse to the most recent', () => {
    const first = released(claim('item', { item_id: 1 }, { item: 'WEB-1' }), 1);
    const again = claim('item', { item_id: 1 }, { item: 'WEB-1' });
    const hostA = released(claim('qa_admission', { test_machine: 'lab' }, { key: 'QA_HOST:lab' }), 1);
    const hostB = released(claim('qa_admission', { test_machine: 'lab' }, { key: 'QA_HOST:lab', item: 'WEB-1' }), 2);
    const keycaps = render([first, hostA, again, hostB], 'recent');
    // The most recent coordination row is the item-owned one: that is what renders.
    expect(keycaps).toEqual(['WEB-1', '🔒 QA_HOST:lab (WEB-1)']);
  });

  test('B8 released path and coordination claims leave active rows; no release reason, no per-file list', () => {
    const claims = [
      claim('item', { item_id: 1 }, { item: 'WEB-1' }),
      released(claim('path_claim', { project_id: 1, path: 'src/secret-file.ts' }, { item: 'WEB-1' })),
      released(claim('qa_admission', { test_machine: 'lab' }, { key: 'QA_HOST:lab' })),
      claim('path_claim', { project_id: 1, path: 'src/listed-file.ts' }, { item: 'WEB-2' }),
    ];
    const active = render(claims, 'active');
    expect(active).toEqual(['WEB-1', '📁1 (WEB-2)']);
    // On a recent row the released ones are history and render.
    expect(render(claims, 'recent')).toEqual(['WEB-1 📁1', '📁1 (WEB-2)', '🔒 QA_HOST:lab']);
    const withReason = { ...claims[1]!, release_reason: 'done with it' } as BoardClaim;
    const md = boardMarkdown(
      renderBoard({
        generated_at: 'now',
        active_sessions: [],
        recent_sessions: [{ session_id: 's', actor_id: 'a', offered_at: 'then', claims: [withReason] }],
        doc_pairings: [],
      }),
    );
    expect(md).not.toContain('done with it');
    expect(md).not.toContain('secret-file');
  });

  test('B5 released seats name the released locks the pairing read found overlapping; an unpaired one stays apart', () => {
    const seat = released(claim('steering', { project_id: 1 }, { project: 'yoke' }), 60);
    const overlapping = released(
      claim('strategy_doc_claim', { project_id: 1, document: 'MISSION' }, { project: 'yoke' }),
      10,
    );
    const later = released(claim('strategy_doc_claim', { project_id: 1, document: 'LATER' }, { project: 'yoke' }), 10);
    const pairings = [{ seat_claim_id: seat.claim_id, lock_claim_id: overlapping.claim_id }];
    expect(render([seat, overlapping, later], 'recent', pairings)).toEqual([
      '🛞 steering yoke · MISSION',
      '🛞 yoke · LATER',
    ]);
  });

  test('W7 B1 a waiting-line turn reserved for the session and not yet taken renders as a reservation, not a hold', () => {
    const turn = claim(
      'qa_admission',
      { test_machine: 'lab' },
      { key: 'QA_HOST:lab', reserved_until: '2026-11-30T08:15:00.123456Z' },
    );
    const held = claim('qa_admission', { test_machine: 'lab-2' }, { key: 'QA_HOST:lab-2' });
    expect(render([turn, held])).toEqual(['⏳ QA_HOST:lab reserved until 2026-11-30T08:15:00Z', '🔒 QA_HOST:lab-2']);
    // Once taken (the turn becomes the hold: reserved_until cleared), it is a hold like any other.
    expect(render([{ ...turn, reserved_until: null }])).toEqual(['🔒 QA_HOST:lab']);
    // --json and the dashboard: the row names which of its keycaps are reservations.
    const board = renderBoard({
      generated_at: '2026-11-30T08:10:00Z',
      active_sessions: [{ session_id: 's', actor_id: 'a', offered_at: 't', claims: [turn, held] }],
      recent_sessions: [],
      doc_pairings: [],
    });
    expect(board.active_sessions[0]!.reserved_claims).toEqual([
      {
        claim_id: turn.claim_id,
        key: 'QA_HOST:lab',
        reserved_until: '2026-11-30T08:15:00.123456Z',
        keycap: '⏳ QA_HOST:lab reserved until 2026-11-30T08:15:00Z',
      },
    ]);
    expect(boardMarkdown(board)).toContain(
      '<kbd>⏳ QA_HOST:lab reserved until 2026-11-30T08:15:00Z</kbd> <kbd>🔒 QA_HOST:lab-2</kbd>',
    );
    // B6: a payload recorded before reservations were read renders every coordination claim as before.
    const { reserved_until: _dropped, ...older } = turn;
    expect(render([older as BoardClaim])).toEqual(['🔒 QA_HOST:lab']);
  });

  test('markdown cells escape pipes and angle brackets from scopes', () => {
    const md = boardMarkdown(
      renderBoard({
        generated_at: 'now',
        active_sessions: [
          { session_id: 's', actor_id: 'a', offered_at: 't', claims: [claim('odd_kind', { v: 'a|<b>' })] },
        ],
        recent_sessions: [],
        doc_pairings: [],
      }),
    );
    expect(md).toContain('<kbd>odd_kind:{"v":"a\\|&lt;b&gt;"}</kbd>');
  });
});

describe('audit: the Claims column and the markdown', () => {
  test('B1 every BOARD.md cell is HTML-escaped, not only keycaps: a session id or machine cannot inject markup', () => {
    const evil = 'wz<img src=x onerror=alert(1)>';
    const md = boardMarkdown(
      renderBoard({
        generated_at: 'now',
        active_sessions: [
          {
            session_id: evil,
            actor_id: 'a&b',
            machine_id: evil,
            offered_at: 't',
            claims: [claim('odd', { v: '<i>' })],
          },
        ],
        recent_sessions: [{ session_id: evil, actor_id: 'a', offered_at: 't', ended_at: 'e', claims: [] }],
        doc_pairings: [],
      }),
    );
    expect(md).not.toContain('<img');
    expect(md).toContain(
      '| wz&lt;img src=x onerror=alert(1)&gt; | a&amp;b | - | wz&lt;img src=x onerror=alert(1)&gt; |',
    );
    // A keycap is escaped once, not twice.
    expect(md).toContain('<kbd>odd:{"v":"&lt;i&gt;"}</kbd>');
  });

  test('B7 B5 repeat seats collapse to the most recent, which names only the released locks that overlapped it', () => {
    const seat1 = released(claim('steering', { project_id: 1 }, { project: 'yoke' }), 1);
    const seat2 = released(claim('steering', { project_id: 1 }, { project: 'yoke' }), 10);
    const beta = released(claim('strategy_doc_claim', { project_id: 1, document: 'BETA' }, { project: 'yoke' }), 1);
    const seat3 = released(claim('steering', { project_id: 1 }, { project: 'yoke' }), 10);
    const gamma = released(claim('strategy_doc_claim', { project_id: 1, document: 'GAMMA' }, { project: 'yoke' }), 1);
    const pairings = [
      { seat_claim_id: seat2.claim_id, lock_claim_id: beta.claim_id },
      { seat_claim_id: seat3.claim_id, lock_claim_id: gamma.claim_id },
    ];
    expect(render([seat1, seat2, beta, seat3, gamma], 'recent', pairings)).toEqual(['🛞 steering yoke · GAMMA']);
  });

  test('B2 B7 a path released and taken again counts once: the total is the distinct paths declared', () => {
    const q1 = released(claim('path_claim', { project_id: 1, path: 'q/1' }, { item: 'WEB-3' }), 1);
    const q2 = released(claim('path_claim', { project_id: 1, path: 'q/2' }, { item: 'WEB-3' }), 1);
    const q1again = released(claim('path_claim', { project_id: 1, path: 'q/1' }, { item: 'WEB-3' }), 1);
    const item = released(claim('item', { item_id: 3 }, { item: 'WEB-3' }), 60);
    expect(render([item, q1, q2, q1again], 'recent')).toEqual(['WEB-3 📁2']);
    expect(render([q1, q2, q1again], 'recent')).toEqual(['📁2 (WEB-3)']);
    // The same path name in another project is another path.
    const other = claim('path_claim', { project_id: 2, path: 'q/1' }, { item: 'WEB-3' });
    expect(render([q1, q2, q1again, other], 'recent')).toEqual(['📁3 (WEB-3)']);
  });

  test('B1 B7 an item path total stays on its most recent epic task, on Active and Recent rows alike', () => {
    const t1 = released(claim('epic_task', { item_id: 1, task: 'T001' }, { item: 'WEB-1' }), 1);
    const t2 = claim('epic_task', { item_id: 1, task: 'T002' }, { item: 'WEB-1' });
    const e1 = claim('path_claim', { project_id: 1, path: 'e/1' }, { item: 'WEB-1' });
    const e2 = claim('path_claim', { project_id: 1, path: 'e/2' }, { item: 'WEB-1' });
    expect(render([t2, e1, e2], 'active')).toEqual(['WEB-1 T002 📁2']);
    const ended = [t1, t2, e1, e2].map((c) => (c.released_at ? c : released(c, 90)));
    expect(render(ended, 'recent')).toEqual(['WEB-1 T001', 'WEB-1 T002 📁2']);
  });
});
