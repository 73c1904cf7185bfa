/**
 * Custom search attributes registered on the Temporal namespace, so operators can filter
 * workflows in the Web UI and `temporal workflow list --query 'YokeProject="web"'`.
 */
export const SEARCH_ATTRIBUTES = {
  YokeProject: 'Keyword',
  YokeRunStatus: 'Keyword',
  YokeTargetOrigin: 'Keyword',
  YokeTestMachine: 'Keyword',
  YokeItem: 'KeywordList',
} as const;
