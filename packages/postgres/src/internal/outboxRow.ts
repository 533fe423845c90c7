import { fromStoredJson, type Message } from "@tidings/core/Message"

/** An outbox row as the stores select it: json columns as text, timestamps as epoch milliseconds. */
export interface OutboxRow {
  readonly id: string
  readonly event_type: string
  readonly event_version: number
  readonly aggregate_type: string
  readonly aggregate_id: string
  readonly ordering_key: string
  readonly payload: string
  readonly headers: string
  readonly occurred_at_ms: number | string
}

/** The message an outbox row holds; its payload is parsed only when read (`Message.fromStoredJson`). */
export const toMessage = (row: OutboxRow): Message =>
  fromStoredJson({
    id: row.id,
    type: row.event_type,
    version: Number(row.event_version),
    aggregateType: row.aggregate_type,
    aggregateId: row.aggregate_id,
    orderingKey: row.ordering_key,
    headers: JSON.parse(row.headers) as Record<string, string>,
    occurredAt: new Date(Number(row.occurred_at_ms))
  }, row.payload)
