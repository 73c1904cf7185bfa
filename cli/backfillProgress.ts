import type { BackfillProgress } from '../activities/usage/backfill';

/**
 * The backfill's progress on a terminal: one line redrawn in place (files, MB, tokens,
 * elapsed, ETA), at most a few times a second so drawing never costs more than folding.
 */
const WIDTH = 24;

function clock(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return '--:--';
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const mm = String(m).padStart(2, '0');
  const ss = String(s % 60).padStart(2, '0');
  return h ? `${h}:${mm}:${ss}` : `${mm}:${ss}`;
}

function tokens(n: number): string {
  return n >= 1e9
    ? `${(n / 1e9).toFixed(2)}B`
    : n >= 1e6
      ? `${(n / 1e6).toFixed(1)}M`
      : n >= 1e3
        ? `${Math.round(n / 1e3)}k`
        : String(n);
}

export function progressLine(p: BackfillProgress): string {
  const share = p.bytes_total > 0 ? p.bytes_done / p.bytes_total : p.files_total > 0 ? p.files_done / p.files_total : 1;
  const filled = Math.round(share * WIDTH);
  const mb = (b: number) => (b / (1024 * 1024)).toFixed(1);
  return (
    `[${'#'.repeat(filled)}${'-'.repeat(WIDTH - filled)}] ${Math.round(share * 100)}% ` +
    `${p.files_done}/${p.files_total} files · ${mb(p.bytes_done)}/${mb(p.bytes_total)} MB · ` +
    `${tokens(p.tokens)} tokens · ${clock(p.elapsed_s)} elapsed · ETA ${clock(p.eta_s)}`
  );
}

export function terminalProgress(stream: NodeJS.WriteStream): { draw(p: BackfillProgress): void; done(): void } {
  let last = 0;
  let pending: BackfillProgress | null = null;
  const paint = (p: BackfillProgress) => {
    stream.write(`\r\x1b[2K${progressLine(p).slice(0, Math.max(40, (stream.columns || 200) - 1))}`);
    last = Date.now();
    pending = null;
  };
  return {
    draw(p) {
      if (Date.now() - last >= 100 || p.files_done === p.files_total) paint(p);
      else pending = p;
    },
    done() {
      if (pending) paint(pending);
      stream.write('\n');
    },
  };
}
