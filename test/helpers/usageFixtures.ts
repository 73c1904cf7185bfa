import { appendFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

/** Harness artifacts in the documented shapes (shared/spec/usage-formats.md), written for tests. */
export function fixtureDir(): string {
  return mkdtempSync(join(tmpdir(), 'yoke-usage-'));
}

export function writeLines(path: string, rows: object[], append = false): void {
  mkdirSync(dirname(path), { recursive: true });
  const text = rows.map((r) => JSON.stringify(r)).join('\n') + '\n';
  if (append) appendFileSync(path, text);
  else writeFileSync(path, text);
}

export interface ClaudeUsage {
  input?: number;
  cacheRead?: number;
  cacheCreate?: number;
  write5m?: number;
  write1h?: number;
  output?: number;
  thinking?: number;
}

export function claudeAssistant(
  id: string,
  usage: ClaudeUsage,
  opts: { model?: string; requestId?: string; sidechain?: boolean } = {},
) {
  return {
    type: 'assistant',
    requestId: opts.requestId ?? `req_${id}`,
    isSidechain: opts.sidechain ?? false,
    timestamp: '2026-11-29T10:00:00Z',
    sessionId: 's',
    message: {
      id,
      model: opts.model ?? 'claude-sonnet-4-5-20250929',
      role: 'assistant',
      content: [{ type: 'text', text: 'hi' }],
      usage: {
        input_tokens: usage.input ?? 0,
        cache_read_input_tokens: usage.cacheRead ?? 0,
        cache_creation_input_tokens: usage.cacheCreate ?? 0,
        ...(usage.write5m !== undefined || usage.write1h !== undefined
          ? {
              cache_creation: {
                ephemeral_5m_input_tokens: usage.write5m ?? 0,
                ephemeral_1h_input_tokens: usage.write1h ?? 0,
              },
            }
          : {}),
        output_tokens: usage.output ?? 0,
        ...(usage.thinking !== undefined ? { output_tokens_details: { thinking_tokens: usage.thinking } } : {}),
        iterations: [{ input_tokens: usage.input ?? 0, output_tokens: usage.output ?? 0 }],
      },
    },
  };
}

export const claudeUser = (usage: object) => ({
  type: 'user',
  message: { role: 'user', content: 'x' },
  toolUseResult: { usage },
});
export const claudeProgress = (copied: object) => ({ type: 'progress', data: { message: copied } });

export function codexMeta(id: string, timestamp: string, child = false) {
  return {
    timestamp,
    type: 'session_meta',
    payload: {
      id,
      cwd: '/w',
      cli_version: '0.50',
      source: child ? { subagent: { thread_spawn: { parent_thread_id: 'p', depth: 1 } } } : 'cli',
    },
  };
}
/** A rollout item naming a sub-agent's thread (how a parent names its child threads, U6). */
export const codexSubAgent = (threadId: string, timestamp: string) => ({
  timestamp,
  type: 'response_item',
  payload: { type: 'SubAgentActivity', thread_id: threadId },
});
export const codexTurn = (model: string, timestamp = '2026-11-29T10:00:01Z') => ({
  timestamp,
  type: 'turn_context',
  payload: { turn_id: 't', model, effort: 'high', model_context_window: 272000 },
});
export function codexTokens(
  timestamp: string,
  total: { input: number; cached: number; output: number; reasoning: number } | null,
) {
  return {
    timestamp,
    type: 'event_msg',
    payload: {
      type: 'token_count',
      info: total && {
        total_token_usage: {
          input_tokens: total.input,
          cached_input_tokens: total.cached,
          output_tokens: total.output,
          reasoning_output_tokens: total.reasoning,
          total_tokens: total.input + total.output,
        },
        last_token_usage: {
          input_tokens: 1,
          cached_input_tokens: 0,
          output_tokens: 1,
          reasoning_output_tokens: 0,
          total_tokens: 2,
        },
        model_context_window: 272000,
      },
    },
  };
}
