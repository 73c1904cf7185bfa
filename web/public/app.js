// The operator dashboard: each panel polls its own JSON endpoint and redraws in place (no
// reload, no build step). The machines panel's 24-hour usage cards are fetched once per
// panel load (U13), independently of the fleet it polls.
'use strict';

const h = (tag, attrs = {}, ...children) => {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('data-')) el.setAttribute(k, v);
    else el[k] = v;
  }
  for (const c of children.flat()) el.append(c instanceof Node ? c : document.createTextNode(c ?? ''));
  return el;
};
const time = (iso) => (iso ? new Date(iso).toISOString().replace('T', ' ').slice(0, 19) : '-');
const link = (url, text) => h('a', { href: url, target: '_blank', rel: 'noopener', class: 'workflow-link' }, text);
const badge = (text, kind) => h('span', { class: `badge ${kind ?? text}` }, text);

/** A panel's cards: one per entry, or the panel's `empty` line when there are none. */
const cardList = (list, empty, card) => (list.length ? list.map(card) : [h('p', { class: 'empty' }, empty)]);

function stamp(panel) {
  panel.querySelector('.updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
}

function sessionRow(r, live) {
  // W7: a turn reserved for this session and not yet taken is drawn as a reservation, not a hold.
  const reserved = new Set((r.reserved_claims ?? []).map((c) => c.keycap));
  return h(
    'tr',
    { 'data-session': r.session_id },
    h('td', {}, r.session_id),
    h('td', {}, r.actor_id),
    h('td', {}, r.project ?? '-'),
    h('td', {}, r.machine_id ?? '-'),
    h('td', {}, r.harness ?? '-'),
    h('td', {}, time(live ? r.offered_at : r.ended_at)),
    h(
      'td',
      { class: 'claims' },
      r.claims.map((k) =>
        h('kbd', reserved.has(k) ? { class: 'reserved', title: 'reserved turn, not yet taken' } : {}, k),
      ),
    ),
    live ? h('td', { class: 'staffing' }, (r.staffing ?? []).join(' ') || '-') : null,
  );
}

const panels = {
  async board(panel, data) {
    panel
      .querySelector('#active-sessions tbody')
      .replaceChildren(...data.active_sessions.map((r) => sessionRow(r, true)));
    panel
      .querySelector('#recent-sessions tbody')
      .replaceChildren(...data.recent_sessions.map((r) => sessionRow(r, false)));
  },
  async runs(panel, runs) {
    panel.querySelector('.cards').replaceChildren(
      ...cardList(runs, 'no runs', (r) =>
        h(
          'article',
          { class: `card run ${r.status}`, 'data-run': r.run_id },
          // S1: a settling run is still executing; the badge names the phase, as watch does.
          h('h3', {}, link(r.workflow_url, r.run_id), ' ', badge(r.settling ? 'settling' : r.status)),
          h('p', {}, `${r.project} · ${r.flow} → ${r.target} · ${String(r.candidate_sha).slice(0, 12)}`),
          h('p', {}, 'driver: ', r.driver ? `${r.driver.session_id}${r.driver.live ? '' : ' (lapsed)'}` : '-'),
          h(
            'ol',
            { class: 'stages' },
            (r.stages ?? []).map((s) =>
              h(
                'li',
                { class: `stage ${s.status}`, 'data-stage': s.name },
                `${s.name} (${s.kind} → ${s.target_env}): `,
                badge(s.status),
              ),
            ),
          ),
          h(
            'p',
            { class: 'occupancy' },
            `occupancy: ${r.occupancy?.occupying ? 'occupying' : 'free'} ${(r.occupancy?.units ?? []).join(', ')}`,
            ...(r.occupancy?.open_lines ?? []).map((l) => h('span', { class: 'open-line' }, ` · ${l}`)),
          ),
          h(
            'ul',
            { class: 'qa' },
            (r.qa ?? []).map((q) =>
              h(
                'li',
                { 'data-check': q.check_name },
                `${q.check_name}${q.blocking ? ' (blocking)' : ''}: `,
                badge(q.status),
              ),
            ),
          ),
        ),
      ),
    );
  },
  async 'test-machines'(panel, machines) {
    panel.querySelector('.cards').replaceChildren(
      ...cardList(machines, 'no test machines', (m) =>
        h(
          'article',
          { class: 'card machine', 'data-machine': m.name },
          h('h3', {}, m.name, ' ', badge(m.healthy ? 'healthy' : 'unhealthy')),
          h(
            'p',
            { class: 'holder' },
            'holder: ',
            m.holder
              ? `${m.holder.session_id} (claim ${m.holder.claim_id}${m.holder.reserved_until ? `, reserved until ${time(m.holder.reserved_until)}` : ''})`
              : 'free',
          ),
          h('p', {}, `waiting: ${m.waiting}`),
          h(
            'ol',
            { class: 'line' },
            m.line.map((w) =>
              h(
                'li',
                { 'data-wait-session': w.session_id },
                link(w.workflow_url, w.session_id),
                ` ${w.state} since ${time(w.queued_at)}`,
              ),
            ),
          ),
        ),
      ),
    );
  },
  async machines(panel, fleet) {
    panel.querySelector('#fleet').replaceChildren(
      ...cardList(fleet, 'no live sessions', (m) =>
        h(
          'article',
          { class: 'card fleet', 'data-fleet-machine': m.machine_id },
          h('h3', {}, m.machine_id),
          h(
            'ul',
            {},
            m.sessions.map((s) => h('li', {}, `${s.session_id} (${s.actor_id}) ${s.staffing.join(' ')}`)),
          ),
        ),
      ),
    );
  },
};

const endpoints = {
  board: '/api/board',
  runs: '/api/runs',
  'test-machines': '/api/test-machines',
  machines: '/api/machines',
};

async function loadUsage() {
  const cards = document.getElementById('usage-cards');
  const res = await fetch('/api/machines/usage');
  const rows = await res.json();
  if (!res.ok) {
    cards.replaceChildren(h('p', { class: 'error' }, rows.error?.message ?? 'usage unavailable'));
    return;
  }
  cards.replaceChildren(
    ...cardList(rows, 'no sessions in the last 24 hours', (m) =>
      h(
        'article',
        { class: 'card usage', 'data-usage-machine': m.machine_id },
        h('h3', {}, m.machine_id),
        h(
          'dl',
          {},
          h('dt', {}, '24H TOKENS'),
          // U10: a machine none of whose sessions was measured has no sum, never a zero.
          h(
            'dd',
            { 'data-figure': 'tokens', 'data-usage-status': m.usage_status },
            m['24H TOKENS'] === null
              ? 'not measured'
              : m.measured_sessions < m['24H SESSIONS']
                ? `${m['24H TOKENS']} (${m.measured_sessions} of ${m['24H SESSIONS']} sessions measured)`
                : String(m['24H TOKENS']),
          ),
          h('dt', {}, '24H API COST'),
          h(
            'dd',
            { 'data-figure': 'cost' },
            `${m['24H API COST'] === null ? '–' : `$${m['24H API COST'].toFixed(4)}`}${m.cost_status === 'priced' ? '' : ` (${m.cost_status})`}`,
          ),
          h('dt', {}, '24H SESSIONS'),
          h('dd', { 'data-figure': 'sessions' }, String(m['24H SESSIONS'])),
        ),
      ),
    ),
  );
}

async function refresh(name) {
  const panel = document.querySelector(`[data-panel="${name}"]`);
  try {
    const res = await fetch(endpoints[name]);
    if (!res.ok) throw new Error(`${endpoints[name]}: HTTP ${res.status}`);
    await panels[name](panel, await res.json());
    stamp(panel);
    panel.classList.remove('stale');
  } catch (err) {
    panel.classList.add('stale');
    panel.querySelector('.updated').textContent = String(err.message ?? err);
  }
}

async function start() {
  const config = await (await fetch('/api/config')).json();
  document.getElementById('temporal-ui').append(link(config.temporal_ui, 'Temporal Web UI'));
  document.getElementById('usage-reload').addEventListener('click', () => loadUsage());
  await loadUsage();
  for (const name of Object.keys(endpoints)) {
    await refresh(name);
    setInterval(() => refresh(name), config.poll_ms);
  }
}

start();
