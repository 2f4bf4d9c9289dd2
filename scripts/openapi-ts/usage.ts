// usage.ts: a few uses of the types openapi-typescript generates from
// docs/openapi.json (into aspd-api.d.ts, beside this file, by
// scripts/openapi-ts-check.sh), so that `tsc --noEmit` checks that the
// generated client describes aspd's wire shapes, not only that it parses.
// Each @ts-expect-error must be an error: were a type to degrade to `any`
// (a schema the generator could not read), tsc reports the directive unused.
import type { components, paths } from "./aspd-api";

type Schemas = components["schemas"];

// POST /sessions/{id}/messages: its body and its 201 answer.
type SendOperation = paths["/sessions/{id}/messages"]["post"];
type SendBody = SendOperation["requestBody"]["content"]["application/json"];
type SendAnswer = SendOperation["responses"][201]["content"]["application/json"];

export const send: SendBody = { content: "hello", idempotency_key: "k-1", metadata: { lang: "en" } };
export const parts: SendBody = { content: [{ type: "text", text: "hello" }] };
export const sent: SendAnswer = { message_id: "msg_01", sequence: 3 };
// @ts-expect-error: a sequence is a number
export const badSent: SendAnswer = { message_id: "msg_01", sequence: "3" };
// @ts-expect-error: content is required
export const noContent: SendBody = { idempotency_key: "k-2" };

// POST /sessions and the path parameter of GET /sessions/{id}.
export const create: Schemas["PostSessionsRequest"] = { invite: ["bob"], topic: "review" };
type GetSession = paths["/sessions/{id}"]["get"];
export const getParams: GetSession["parameters"]["path"] = { id: "ses_01" };

// Every error answer (4XX, 5XX) is an ErrorBody.
type SendError = SendOperation["responses"]["4XX"]["content"]["application/json"];
export function errorCode(e: SendError): string {
  return e.error.field ? `${e.error.code} (${e.error.field})` : e.error.code;
}

// Session events (events.json) are a union discriminated by type.
export function describe(e: Schemas["SessionEvent"]): string {
  switch (e.type) {
    case "session.message":
      return `${e.payload.sender}: ${typeof e.payload.content === "string" ? e.payload.content : "(parts)"}`;
    case "session.joined":
      return `joined at ${e.sequence}`;
    default:
      return e.type;
  }
}
