/**
 * Core's consumer pieces without a transport: the decision table row by row, the version header
 * rule and the event registry (the transports run the behaviour through the consumer contract).
 */
import { assert, describe, it } from "@effect/vitest"
import { Data, Schema } from "effect"
import * as Consumer from "../src/Consumer.ts"
import * as Errors from "../src/Errors.ts"
import * as Event from "../src/Event.ts"
import * as EventRegistry from "../src/EventRegistry.ts"

class Transient extends Data.TaggedError("Transient")<{}> {
  get isRetryable() {
    return true
  }
}
class BusinessRule extends Data.TaggedError("BusinessRule")<{ readonly rule: string }> {}

const OrderPlacedV1 = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, totalCents: Schema.Int })
})
const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  version: 2,
  schema: Schema.Struct({
    orderId: Schema.String,
    total: Schema.Struct({ cents: Schema.Int, currency: Schema.String })
  })
})
const ShipmentSent = Event.define("shipment.sent", {
  aggregateType: "shipment",
  schema: Schema.Struct({ shipmentId: Schema.String })
})
const registry = EventRegistry.make([
  EventRegistry.entry(
    OrderPlaced,
    EventRegistry.upcast(
      OrderPlacedV1,
      (v1) => ({ orderId: v1.orderId, total: { cents: v1.totalCents, currency: "EUR" } })
    )
  ),
  ShipmentSent
])

describe("Consumer.defaultDecision", () => {
  it("every row of the table, and an override", () => {
    const ctx = { attempt: 1, maxAttempts: 3, unknownType: "ack" as const }
    const last = { ...ctx, attempt: 3 }
    const d = Consumer.defaultDecision
    assert.strictEqual(d({ _tag: "Success" }, ctx), "ack")
    assert.strictEqual(d({ _tag: "Failure", error: new Transient(), retryable: true }, ctx), "retry")
    assert.strictEqual(d({ _tag: "Failure", error: new Transient(), retryable: true }, last), "dead-letter")
    assert.strictEqual(
      d({ _tag: "Failure", error: new BusinessRule({ rule: "x" }), retryable: false }, ctx),
      "dead-letter"
    )
    assert.strictEqual(d({ _tag: "Defect", defect: new Error("x") }, ctx), "retry")
    assert.strictEqual(d({ _tag: "Defect", defect: new Error("x") }, last), "dead-letter")
    assert.strictEqual(
      d({ _tag: "Timeout", error: new Consumer.HandlerTimeout({ timeoutMs: 1 }) }, last),
      "dead-letter"
    )
    assert.strictEqual(
      d({ _tag: "DecodeFailure", error: new EventRegistry.DecodeError({ reason: "InvalidJson", message: "x" }) }, ctx),
      "dead-letter"
    )
    assert.strictEqual(d({ _tag: "UnknownType", type: "x" }, ctx), "ack")
    assert.strictEqual(d({ _tag: "UnknownType", type: "x" }, { ...ctx, unknownType: "dead-letter" }), "dead-letter")
    assert.strictEqual(d({ _tag: "DeliveryLimit", attempt: 9 }, ctx), "dead-letter")
    assert.strictEqual(d({ _tag: "Shutdown" }, ctx), "requeue")
    assert.strictEqual(Consumer.decide({ _tag: "Success" }, ctx, () => "dead-letter"), "dead-letter")
    assert.strictEqual(Consumer.decide({ _tag: "Success" }, ctx, () => undefined), "ack")
    assert.strictEqual(Consumer.label({ _tag: "Failure", error: new Transient(), retryable: true }), "TransientFailure")
    assert.isTrue(Consumer.isRetryable(new Transient()))
    assert.isFalse(Consumer.isRetryable(new BusinessRule({ rule: "x" })))
    assert.isFalse(Consumer.isRetryable(new Error("plain")))
    assert.isTrue(
      Errors.isUnavailable(new Errors.StoreError({ operation: "x", message: "down", reason: new Errors.Unavailable() }))
    )
  })
})

describe("EventRegistry", () => {
  it("rejects a type registered twice and upcasters that do not fit, naming both in one InvalidConfig", () => {
    assert.throws(() => EventRegistry.make([ShipmentSent, ShipmentSent]), /registered twice/)
    assert.throws(
      () =>
        EventRegistry.make([
          EventRegistry.entry(
            OrderPlaced,
            EventRegistry.upcast(ShipmentSent, () => ({ orderId: "x", total: { cents: 1, currency: "EUR" } }))
          )
        ]),
      /does not fit/
    )
    try {
      EventRegistry.make([
        ShipmentSent,
        ShipmentSent,
        EventRegistry.entry(OrderPlaced, EventRegistry.upcast(OrderPlaced, (p) => p))
      ])
      assert.fail("expected InvalidConfig")
    } catch (error) {
      assert.instanceOf(error, Errors.InvalidConfig)
      assert.deepStrictEqual((error as Errors.InvalidConfig).issues?.map((i) => i.path), [
        "registry.shipment.sent",
        "registry.order.placed"
      ])
    }
  })

  it("decodes a current payload, upcasts an old one, and reports unknown types and mismatches", () => {
    assert.deepStrictEqual(registry.decode("order.placed", 1, { orderId: "a", totalCents: 1 }), {
      _tag: "Decoded",
      event: {
        type: "order.placed",
        version: 2,
        receivedVersion: 1,
        payload: { orderId: "a", total: { cents: 1, currency: "EUR" } }
      }
    })
    assert.strictEqual(registry.decode("nope", 1, {})._tag, "UnknownType")
    const bad = registry.decode("order.placed", 1, { orderId: 1 })
    assert.strictEqual(bad._tag, "Invalid")
    assert.strictEqual(bad._tag === "Invalid" ? bad.error.reason : "", "SchemaMismatch")
    const newer = registry.decode("shipment.sent", 4, { shipmentId: "s" })
    assert.strictEqual(newer._tag === "Decoded" ? newer.note : undefined, "newer-version")
  })

  it("a version header is absent, or an integer >= 1; anything else is an InvalidVersion decode error", () => {
    assert.isUndefined(EventRegistry.parseVersion(undefined))
    assert.strictEqual(EventRegistry.parseVersion(2), 2)
    assert.strictEqual(EventRegistry.parseVersion("3"), 3)
    for (const bad of ["abc", 0, "0", -1, 1.5, "", "1e3", Number.NaN, {}]) {
      const parsed = EventRegistry.parseVersion(bad, "order.placed")
      assert.instanceOf(parsed, EventRegistry.DecodeError, JSON.stringify(bad))
      if (parsed instanceof EventRegistry.DecodeError) {
        assert.strictEqual(parsed.reason, "InvalidVersion")
        assert.strictEqual(parsed.eventType, "order.placed")
        assert.isFalse(parsed.isRetryable)
      }
    }
  })
})
