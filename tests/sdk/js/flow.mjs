// The official JavaScript `svix` SDK (npm, pinned in package.json) pointed at
// dispatcher's Svix-compatible API: the core flow a team runs after changing
// only `serverUrl`. Driven by tests/sdk/test_svix_js.py, which reads the one
// JSON document printed on stdout.
//
// env: SVIX_SERVER_URL, SVIX_TOKEN, RECEIVER_URL (a second endpoint, the
// Python test's receiver), RUN_ID (keeps names unique).
// Every wait is bounded; every step is recorded, failures included, so the
// caller can say exactly which call did not match what the SDK expects.

import http from "node:http";
import { ApiException, MessageStatus, Svix, Webhook } from "svix";

const SERVER_URL = process.env.SVIX_SERVER_URL;
const TOKEN = process.env.SVIX_TOKEN;
const RECEIVER_URL = process.env.RECEIVER_URL;
const RUN = process.env.RUN_ID ?? "js";
const WAIT_MS = 30_000;

const out = { steps: [] };
const svix = new Svix(TOKEN, { serverUrl: SERVER_URL, retryScheduleInMs: [] });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function describe(err) {
  if (err instanceof ApiException) {
    return { status: err.code, body: err.body };
  }
  return { message: String(err?.stack ?? err) };
}

async function step(name, fn) {
  try {
    const value = await fn();
    out.steps.push({ name, ok: true });
    return value;
  } catch (err) {
    out.steps.push({ name, ok: false, error: describe(err) });
    return undefined;
  }
}

async function until(probe, what) {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const got = await probe();
    if (got) return got;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

// The SDK call is expected to fail: its status and parsed body.
async function refusal(fn) {
  try {
    await fn();
  } catch (err) {
    if (err instanceof ApiException) return { status: err.code, body: err.body };
    throw err;
  }
  throw new Error("the call succeeded");
}

// A receiver of our own on 127.0.0.1, so the SDK's Webhook class checks
// exactly the bytes and headers that arrived.
const received = [];
const receiver = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    received.push({ path: req.url, headers: req.headers, body: Buffer.concat(chunks) });
    res.writeHead(200, { "content-type": "text/plain" });
    res.end("ok");
  });
});
await new Promise((resolve) => receiver.listen(0, "127.0.0.1", resolve));
const hookUrl = `http://127.0.0.1:${receiver.address().port}/js-hook`;

const schema = {
  type: "object",
  properties: { order: { type: "string" }, cents: { type: "integer", minimum: 0 } },
  required: ["order", "cents"],
};
const eventType = `js.order.paid`;
const payload = { order: `ord-${RUN}`, cents: 1999, marker: "js-first" };

try {
  await step("health.get", () => svix.health.get());

  const app = await step("application.getOrCreate", () =>
    svix.application.getOrCreate({ name: "JS Co", uid: `js-co-${RUN}` })
  );
  if (!app) throw new Error("no application: nothing else can run");
  out.appId = app.id;
  out.appName = app.name;
  out.appCreatedAt = app.createdAt instanceof Date ? app.createdAt.toISOString() : null;
  const again = await step("application.getOrCreate again", () =>
    svix.application.getOrCreate({ name: "JS Co", uid: `js-co-${RUN}` })
  );
  out.appIdAgain = again?.id;
  out.appByUid = (await step("application.get by uid", () =>
    svix.application.get(`js-co-${RUN}`)
  ))?.id;

  const et = await step("eventType.create", () =>
    svix.eventType.create({ name: eventType, description: "An order was paid", schemas: { 1: schema } })
  );
  out.eventTypeName = et?.name;

  const ep = await step("endpoint.create", () =>
    svix.endpoint.create(app.id, { url: hookUrl, description: "node", eventTypes: [eventType] })
  );
  const ep2 = await step("endpoint.create (python receiver)", () =>
    svix.endpoint.create(app.id, { url: RECEIVER_URL, eventTypes: [eventType] })
  );
  if (!ep || !ep2) throw new Error("no endpoints: nothing else can run");
  out.endpointId = ep.id;
  out.endpoint2Id = ep2.id;
  out.endpointIds = (await step("endpoint.list", () => svix.endpoint.list(app.id)))?.data.map(
    (e) => e.id
  );
  const secret = (await step("endpoint.getSecret", () => svix.endpoint.getSecret(app.id, ep.id)))
    ?.key;
  out.secret2 = (await step("endpoint.getSecret (python receiver)", () =>
    svix.endpoint.getSecret(app.id, ep2.id)
  ))?.key;

  const msg = await step("message.create", () =>
    svix.message.create(
      app.id,
      { eventType, eventId: `js-evt-${RUN}`, payload, channels: ["js"] },
      { withContent: true }
    )
  );
  if (!msg) throw new Error("no message: nothing else can run");
  out.msgId = msg.id;
  out.msgEventId = msg.eventId;
  out.msgPayloadEqual = JSON.stringify(msg.payload) === JSON.stringify(payload);
  out.msgTimestampValid = msg.timestamp instanceof Date && !Number.isNaN(msg.timestamp.getTime());

  const got = await step("the webhook arrives", () =>
    until(() => received.find((r) => r.path === "/js-hook"), "the webhook at the node receiver")
  );
  if (got && secret) {
    out.verified = await step("Webhook.verify", () => {
      new Webhook(secret).verify(got.body, got.headers);
      return true;
    });
    out.tamperedRejected = await step("Webhook.verify refuses a changed body", () => {
      try {
        new Webhook(secret).verify(Buffer.from(got.body.toString().replace("1999", "1")), got.headers);
      } catch {
        return true;
      }
      throw new Error("a changed body verified");
    });
    out.bodyEqual = JSON.stringify(JSON.parse(got.body.toString())) === JSON.stringify(payload);
  }

  const attempt = await step("messageAttempt.listByMsg (success)", () =>
    until(async () => {
      const page = await svix.messageAttempt.listByMsg(app.id, msg.id);
      return page.data.find((a) => a.status === MessageStatus.Success && a.endpointId === ep.id);
    }, "a successful attempt")
  );
  if (attempt) {
    out.attempt = {
      id: attempt.id,
      msgId: attempt.msgId,
      endpointId: attempt.endpointId,
      status: attempt.status,
      statusText: attempt.statusText,
      triggerType: attempt.triggerType,
      responseStatusCode: attempt.responseStatusCode,
      url: attempt.url,
      timestampValid: attempt.timestamp instanceof Date && !Number.isNaN(attempt.timestamp.getTime()),
    };
  }
  out.byEndpointIds = (await step("messageAttempt.listByEndpoint", () =>
    svix.messageAttempt.listByEndpoint(app.id, ep.id)
  ))?.data.map((a) => a.id);

  const full = await step("message.get withContent", () =>
    svix.message.get(app.id, msg.id, { withContent: true })
  );
  out.getPayloadEqual = full ? JSON.stringify(full.payload) === JSON.stringify(payload) : null;

  out.duplicate = await step("message.create repeated eventId", () =>
    refusal(() => svix.message.create(app.id, { eventType, eventId: `js-evt-${RUN}`, payload }))
  );
  out.invalid = await step("message.create schema mismatch", () =>
    refusal(() => svix.message.create(app.id, { eventType, payload: { order: 7 } }))
  );

  // Two more messages, then the list one at a time.
  for (const n of [1, 2]) {
    await step(`message.create page-${n}`, () =>
      svix.message.create(app.id, { eventType, payload: { order: `p${n}`, cents: n } })
    );
  }
  out.pages = await step("message.list pages", async () => {
    const ids = [];
    const shapes = [];
    let iterator = null;
    for (let i = 0; i < 10; i++) {
      const page = await svix.message.list(app.id, { limit: 1, iterator });
      ids.push(...page.data.map((m) => m.id));
      shapes.push({ n: page.data.length, done: page.done, hasIterator: Boolean(page.iterator) });
      if (page.done) return { ids, shapes };
      iterator = page.iterator;
    }
    throw new Error("still not done after 10 pages");
  });

  await step("endpoint.rotateSecret", () => svix.endpoint.rotateSecret(app.id, ep.id, {}));
  out.secretRotated =
    (await step("endpoint.getSecret after rotation", () => svix.endpoint.getSecret(app.id, ep.id)))
      ?.key !== secret;

  const access = await step("authentication.appPortalAccess", () =>
    svix.authentication.appPortalAccess(app.id, {})
  );
  out.portal = access ? { url: access.url, token: access.token } : null;

  out.missing = await step("application.get unknown", () =>
    refusal(() => svix.application.get(`no-such-app-${RUN}`))
  );
} catch (err) {
  out.fatal = String(err?.stack ?? err);
} finally {
  receiver.close();
}

process.stdout.write(`${JSON.stringify(out)}\n`);
